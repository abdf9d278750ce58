package attack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
)

// earlyWait bounds the wait for the server's answer to one stream.
const earlyWait = 5 * time.Second

// earlyBarrier is the data of the ping that follows a reset stream: its
// acknowledgement says the server has read the reset.
var earlyBarrier = [8]byte{'e', 'a', 'r', 'l', 'y', 'e', 'o', 'f'}

// earlyCase is one way to end a worker stream early. run returns how the
// server answered, or an error when the case could not be played out.
type earlyCase struct {
	label string
	run   func(r *earlyRun, ctx context.Context) (string, error)
}

// earlyCases are played in turn by every loop of early-eof.
var earlyCases = []earlyCase{
	{"(a) END_STREAM on the HEADERS", (*earlyRun).endOnHeaders},
	{"(b) half a message, then END_STREAM", (*earlyRun).halfMessage},
	{"(c) RST_STREAM before Register", (*earlyRun).resetBeforeRegister},
	{"(d) CloseSend after Register", (*earlyRun).closeAfterRegister},
	{"(e) connection closed mid-frame", (*earlyRun).closedMidFrame},
}

// earlyRun is one loop of early-eof.
type earlyRun struct {
	e      *env
	fields []hpack.HeaderField
	// cc carries case (d)'s streams; dialed when first needed.
	cc *grpc.ClientConn
	// cuts counts case (e)'s connections, to vary where they are cut.
	cuts int
	// acks counts the RegisterAcks of case (d), over every loop.
	acks *atomic.Int64
}

// earlyEOF runs Attackers loops that each, over and over, open a worker
// stream with the attacker's worker key and end it early, one way after
// another (earlyCases), counting how the server answered each: by the
// grpc-status it ended the stream with, or what became of the connection.
// Each raw stream is on a connection of its own, so a case that breaks a
// connection breaks no other.
func earlyEOF(ctx context.Context, e *env) {
	var (
		wg    sync.WaitGroup
		acks  atomic.Int64
		start = time.Now()
	)
	for range e.o.Attackers {
		wg.Go(func() {
			r := &earlyRun{e: e, fields: connectFields(e.srv.grpcAddr, e.srv.keys.attackWorker, "application/grpc"), acks: &acks}
			defer r.close()
			for n := 0; n < e.o.MaxRequests && ctx.Err() == nil; n++ {
				c := earlyCases[n%len(earlyCases)]
				e.tally.sent.Add(1)
				ans, err := c.run(r, ctx)
				switch {
				case ctx.Err() != nil:
					e.tally.add(c.label+": cut off at the end", 1)
				case err != nil:
					e.failed(ctx, c.label, err)
					pause(ctx, 10*time.Millisecond)
				default:
					e.tally.add(c.label+": "+ans, 1)
				}
			}
		})
	}
	wg.Wait()
	n, took := e.tally.sent.Load(), time.Since(start).Seconds()
	e.note("%d streams ended early in %.1f s (%.0f a second) from %d loops; each raw one on a connection of its own",
		n, took, float64(n)/took, e.o.Attackers)
	e.note("(d): %d RegisterAcks before the close", acks.Load())
}

func (r *earlyRun) close() {
	if r.cc != nil {
		r.cc.Close()
	}
}

// raw opens a connection, a stream on it, plays write on it and returns
// what the server answered (see rawConn.await).
func (r *earlyRun) raw(ctx context.Context, write func(c *rawConn, id uint32) error, barrier *[8]byte) (string, error) {
	c, err := dialRaw(ctx, r.e.srv.grpcAddr, 0)
	if err != nil {
		return "", err
	}
	defer c.close()
	id := c.stream()
	if err := write(c, id); err != nil {
		return "", fmt.Errorf("write: %w", err)
	}
	if err := c.flush(); err != nil {
		return "", fmt.Errorf("write: %w", err)
	}
	return c.await(id, earlyWait, barrier), nil
}

// endOnHeaders sends a Connect call's HEADERS with END_STREAM: the worker
// closes its side before its Register frame.
func (r *earlyRun) endOnHeaders(ctx context.Context) (string, error) {
	return r.raw(ctx, func(c *rawConn, id uint32) error {
		return c.headers(id, r.fields, true)
	}, nil)
}

// halfMessage sends the length prefix of a 1 KiB message and 16 bytes of
// it, with END_STREAM.
func (r *earlyRun) halfMessage(ctx context.Context) (string, error) {
	return r.raw(ctx, func(c *rawConn, id uint32) error {
		if err := c.headers(id, r.fields, false); err != nil {
			return err
		}
		return c.fr.WriteData(id, true, grpcMessage(1024, 16))
	}, nil)
}

// resetBeforeRegister resets the stream right after its HEADERS; a ping
// after the reset tells when the server has read it, so "no answer" is
// what came back by then.
func (r *earlyRun) resetBeforeRegister(ctx context.Context) (string, error) {
	return r.raw(ctx, func(c *rawConn, id uint32) error {
		if err := c.headers(id, r.fields, false); err != nil {
			return err
		}
		if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			return err
		}
		return c.fr.WritePing(false, earlyBarrier)
	}, &earlyBarrier)
}

// closeAfterRegister registers a worker through gRPC and closes its side
// of the stream at once; it returns the status the stream ended with.
func (r *earlyRun) closeAfterRegister(ctx context.Context) (string, error) {
	if r.cc == nil {
		cc, err := dial(r.e.srv.grpcAddr, r.e.srv.keys.attackWorker)
		if err != nil {
			return "", err
		}
		r.cc = cc
	}
	sctx, cancel := context.WithTimeout(ctx, earlyWait)
	defer cancel()
	st, err := r.cc.NewStream(sctx, &aionv1.WorkerService_ServiceDesc.Streams[0], connectMethod)
	if err != nil {
		return outcome(err), nil
	}
	reg := &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{attackerNS}, TaskQueue: "early-eof", ActivityTypes: []string{"x"}, Slots: 1, Identity: "attacker-early-eof"}}}
	if err := st.SendMsg(reg); err != nil && !errors.Is(err, io.EOF) {
		return outcome(err), nil
	}
	if err := st.CloseSend(); err != nil {
		return outcome(err), nil
	}
	for {
		m := new(aionv1.ServerMessage)
		err := st.RecvMsg(m)
		if errors.Is(err, io.EOF) {
			return "OK", nil
		}
		if err != nil {
			return outcome(err), nil
		}
		if m.GetRegisterAck() != nil {
			r.acks.Add(1)
		}
	}
}

// The places case (e) cuts a connection at, in turn.
var midFrameCuts = []string{"in a frame header", "in a HEADERS frame", "in a DATA frame"}

// closedMidFrame opens a worker stream and sends its HEADERS and a DATA
// frame, but only up to a point inside one of the frames; there it closes
// its side of the TCP connection and reads what the server answers.
func (r *earlyRun) closedMidFrame(ctx context.Context) (string, error) {
	c, err := dialRaw(ctx, r.e.srv.grpcAddr, 0)
	if err != nil {
		return "", err
	}
	defer c.close()
	id := c.stream()
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	block, err := c.block(r.fields)
	if err != nil {
		return "", err
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
		return "", err
	}
	headersEnd := b.Len()
	if err := fr.WriteData(id, false, grpcMessage(1024, 16)); err != nil {
		return "", err
	}
	var cut int
	where := midFrameCuts[r.cuts%len(midFrameCuts)]
	r.cuts++
	switch where {
	case "in a frame header":
		cut = headersEnd + 4
	case "in a HEADERS frame":
		cut = headersEnd / 2
	default:
		cut = b.Len() - 8
	}
	c.writeBy(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b.Bytes()[:cut]); err != nil {
		return "", fmt.Errorf("write: %w", err)
	}
	if err := c.nc.(*net.TCPConn).CloseWrite(); err != nil {
		return "", fmt.Errorf("close the sending side: %w", err)
	}
	return where + ", " + c.await(id, earlyWait, nil), nil
}
