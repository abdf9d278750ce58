package h2

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Stream is one call to the served method. It is a grpc.ServerStream for
// the method's handler and, in the handler's context, its
// grpc.ServerTransportStream; WriteStatus ends it from any goroutine.
type Stream struct {
	c      *conn
	id     uint32
	method string
	ctx    context.Context
	cancel context.CancelFunc

	// Receive side: the connection's goroutine fills, RecvMsg drains.
	rmu       sync.Mutex
	inbox     [][]byte
	partial   []byte // a message not yet whole, with its 5-byte prefix
	recvEOF   bool
	recvErr   error
	recvTotal int64 // bytes the client sent, padding included
	recvLimit int64 // bytes the client may send in all
	consumed  int64 // bytes handed to RecvMsg, and padding
	waiting   bool  // RecvMsg waits for a message, or Receive takes them
	ready     chan struct{}
	// Set by Receive: messages go to deliver, the end to done, on whichever
	// goroutine pumps (one at a time).
	deliver    func([]byte) error
	onEnd      func(error)
	pumping    bool
	doneCalled bool

	sendWin int64 // on c.mu
	ended   bool  // on c.mu: ended or aborted; senders stop waiting

	// On c.wmu.
	headerSent, done bool
	header, trailer  metadata.MD
}

var _ grpc.ServerStream = (*Stream)(nil)

// transportStream is a Stream as grpc.ServerTransportStreamFromContext
// gives it, with WriteStatus for ending the stream from elsewhere.
type transportStream struct{ st *Stream }

var _ grpc.ServerTransportStream = transportStream{}

func (t transportStream) Method() string                     { return t.st.method }
func (t transportStream) SetHeader(md metadata.MD) error     { return t.st.SetHeader(md) }
func (t transportStream) SendHeader(md metadata.MD) error    { return t.st.SendHeader(md) }
func (t transportStream) WriteStatus(s *status.Status) error { return t.st.WriteStatus(s) }
func (t transportStream) Receive(deliver func([]byte) error, done func(error)) {
	t.st.Receive(deliver, done)
}

func (t transportStream) SetTrailer(md metadata.MD) error {
	t.st.SetTrailer(md)
	return nil
}

// run calls the handler and ends the stream with its status.
func (st *Stream) run() {
	defer st.c.s.wg.Done()
	err := st.c.s.cfg.Handle(st)
	if errors.Is(err, ErrDetached) {
		return
	}
	_ = st.WriteStatus(status.Convert(err))
}

// ErrDetached, returned by a handler that called Receive, leaves its stream
// open without a goroutine: it ends when WriteStatus is called or the
// client or the connection ends it, and Receive's done is told.
var ErrDetached = errors.New("h2: the stream was left to Receive")

// Receive hands the stream's messages, in order, to deliver instead of
// RecvMsg, and then its end to done, once: io.EOF when the client closed
// its side, else the status that ended it. They run on the connection's
// goroutine (or, for messages that arrived before Receive, on its caller's),
// one at a time, so they must be quick: a long piece of work blocks the
// connection's other streams. A deliver error stops the delivery and is
// done's; the stream stays open until WriteStatus, so whoever took the
// stream can finish with it before the client sees its end. The handler
// then returns ErrDetached, and the stream holds no goroutine while it
// waits: an idle worker's costs only its connection's reader.
func (st *Stream) Receive(deliver func([]byte) error, done func(error)) {
	st.rmu.Lock()
	st.deliver, st.onEnd = deliver, done
	st.waiting = true
	credit := st.grant()
	pump := !st.pumping
	st.pumping = true
	st.rmu.Unlock()
	st.giveCredit(credit)
	if pump {
		st.pump()
	}
}

// kick pumps, unless another goroutine does or RecvMsg reads; the caller
// holds rmu and pumps if told to.
func (st *Stream) kick() bool {
	if st.deliver == nil || st.pumping {
		return false
	}
	st.pumping = true
	return true
}

// pump delivers what waits and, once the stream has ended and nothing
// waits (or it ended by a status: what waits is dropped), tells done.
func (st *Stream) pump() {
	for {
		st.rmu.Lock()
		if st.recvErr != nil {
			st.inbox = nil
		}
		if len(st.inbox) == 0 {
			end, fire := st.recvErr, false
			if !st.doneCalled && (end != nil || st.recvEOF) {
				st.doneCalled, fire = true, true
				if end == nil {
					end = io.EOF
				}
			}
			st.pumping = false
			st.rmu.Unlock()
			if fire {
				st.onEnd(end)
			}
			return
		}
		b, credit := st.take()
		st.rmu.Unlock()
		st.giveCredit(credit)
		if err := st.deliver(b); err != nil {
			st.rmu.Lock()
			if st.recvErr == nil {
				st.recvErr = err // what waits is dropped, and done is told err
			}
			st.rmu.Unlock()
		}
	}
}

// received takes a DATA frame's n bytes (data without its padding) on the
// connection's goroutine: it checks the stream's window, gives the padding
// back at once, and cuts whole messages for RecvMsg. A message longer than
// the window gets more room only while RecvMsg waits for it (see grant), so
// a client cannot make the server hold what nobody reads.
func (st *Stream) received(n int64, data []byte, end bool) {
	st.rmu.Lock()
	if st.recvErr != nil || st.recvEOF {
		st.rmu.Unlock()
		return
	}
	st.recvTotal += n
	if st.recvTotal > st.recvLimit {
		st.rmu.Unlock()
		st.fail(errFlowControl, status.Newf(codes.Internal, "the client sent %d bytes past the stream's window", st.recvTotal-st.recvLimit))
		return
	}
	credit := st.consume(n - int64(len(data)))
	for len(data) > 0 {
		if len(st.partial) < 5 { // the prefix, possibly split across frames
			k := min(5-len(st.partial), len(data))
			st.partial = append(st.partial, data[:k]...)
			data = data[k:]
			if len(st.partial) < 5 {
				break
			}
			if bad := st.checkPrefix(st.partial); bad != nil {
				st.rmu.Unlock()
				st.fail(errNo, bad)
				return
			}
		}
		size := int(binary.BigEndian.Uint32(st.partial[1:5]))
		k := min(5+size-len(st.partial), len(data))
		st.partial = append(st.partial, data[:k]...)
		data = data[k:]
		if len(st.partial) < 5+size {
			break
		}
		st.inbox = append(st.inbox, st.partial[5:])
		st.partial = nil
	}
	if end && len(st.partial) > 0 {
		st.rmu.Unlock()
		st.fail(errNo, status.Newf(codes.Internal, "the client ended its side inside a message (%d bytes of it sent)", len(st.partial)))
		return
	}
	if st.waiting {
		credit += st.grant()
	}
	st.recvEOF = end
	pump := st.kick()
	st.rmu.Unlock()
	select {
	case st.ready <- struct{}{}:
	default:
	}
	st.giveCredit(credit)
	if pump {
		st.pump()
	}
}

// grant opens the window to the whole of the message being received, when
// it is longer than the window; the caller holds rmu, and RecvMsg waits.
func (st *Stream) grant() int64 {
	if len(st.partial) < 5 {
		return 0
	}
	rest := int64(5 + int(binary.BigEndian.Uint32(st.partial[1:5])) - len(st.partial))
	need := rest - (st.recvLimit - st.recvTotal)
	if need <= 0 {
		return 0
	}
	st.recvLimit += need
	return need
}

// checkPrefix checks a message's 5-byte prefix: uncompressed, and not
// larger than allowed.
func (st *Stream) checkPrefix(p []byte) *status.Status {
	if p[0] != 0 {
		return status.New(codes.Internal, "a compressed message without grpc-encoding")
	}
	limit := st.c.s.cfg.MaxRecvMsgSize
	if size := binary.BigEndian.Uint32(p[1:5]); int64(size) > int64(limit) {
		return status.Newf(codes.ResourceExhausted, "received message larger than max (%d vs. %d)", size, limit)
	}
	return nil
}

// fail ends the stream from the receive side with s, resetting it with
// code.
func (st *Stream) fail(code uint32, s *status.Status) { _ = st.writeStatus(s, code) }

// RecvMsg receives the next message into m: io.EOF once the client has
// closed its side, a status once the stream has ended.
func (st *Stream) RecvMsg(m any) error {
	for {
		st.rmu.Lock()
		st.waiting = false
		if len(st.inbox) > 0 {
			b, credit := st.take()
			st.rmu.Unlock()
			st.giveCredit(credit)
			return st.c.s.cfg.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m)
		}
		err, eof := st.recvErr, st.recvEOF
		if err == nil && !eof {
			st.waiting = true
		}
		credit := int64(0)
		if st.waiting {
			credit = st.grant()
		}
		st.rmu.Unlock()
		if err != nil {
			return err
		}
		if eof {
			return io.EOF
		}
		if credit > 0 {
			_ = st.c.write(appendUint32Frame(nil, frameWindowUpdate, st.id, uint32(credit)))
		}
		select {
		case <-st.ready:
		case <-st.ctx.Done():
			st.rmu.Lock()
			st.waiting = false
			err := st.recvErr
			st.rmu.Unlock()
			if err != nil {
				return err
			}
			return status.FromContextError(st.ctx.Err()).Err()
		}
	}
}

// take takes the next message waiting and the window it gives back; the
// caller holds rmu.
func (st *Stream) take() ([]byte, int64) {
	b := st.inbox[0]
	st.inbox[0] = nil
	if st.inbox = st.inbox[1:]; len(st.inbox) == 0 {
		st.inbox = nil
	}
	return b, st.consume(int64(5 + len(b)))
}

// giveCredit lets the client send n more bytes on the stream.
func (st *Stream) giveCredit(n int64) {
	if n > 0 {
		_ = st.c.write(appendUint32Frame(nil, frameWindowUpdate, st.id, uint32(n)))
	}
}

// consume counts n bytes handed to RecvMsg and returns the window to give
// back: once a quarter of the window is owed, the client may again send a
// whole window past what was read. The caller holds rmu.
func (st *Stream) consume(n int64) int64 {
	st.consumed += n
	window := int64(st.c.s.cfg.StreamWindow)
	if target := st.consumed + window; target-st.recvLimit >= window/4 {
		credit := target - st.recvLimit
		st.recvLimit = target
		return credit
	}
	return 0
}

// SendMsg sends m, waiting for the client's flow-control windows.
func (st *Stream) SendMsg(m any) error {
	data, err := st.c.s.cfg.Codec.Marshal(m)
	if err != nil {
		return status.Errorf(codes.Internal, "encode %T: %v", m, err)
	}
	p := make([]byte, 5+data.Len())
	binary.BigEndian.PutUint32(p[1:5], uint32(data.Len()))
	data.CopyTo(p[5:])
	data.Free()
	for len(p) > 0 {
		n, err := st.c.reserve(st, len(p))
		if err != nil {
			return err
		}
		if err := st.writeData(p[:n]); err != nil {
			st.c.giveBack(st, n) // the client never sees these bytes, so never credits them
			return err
		}
		p = p[n:]
	}
	return nil
}

// writeData writes one DATA frame, after the response headers when none
// were sent yet.
func (st *Stream) writeData(p []byte) error {
	c := st.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if st.done {
		return status.Error(codes.Canceled, "the stream has ended")
	}
	if c.werr != nil {
		return c.werr
	}
	// Straight into the queue: a task is copied once on its way out.
	if !st.headerSent {
		st.headerSent = true
		c.pend = appendHeaderBlock(c.pend, st.id, c.encode(headerFields(st.header)...), false, c.peerMaxFrame())
	}
	c.pend = appendFrameHeader(c.pend, frameData, 0, st.id, len(p))
	c.pend = append(c.pend, p...)
	c.flushLocked()
	return nil
}

// WriteStatus ends the stream with s: its trailers are written (after the
// headers when none were sent) and its context ends. Only the first call
// counts.
func (st *Stream) WriteStatus(s *status.Status) error { return st.writeStatus(s, errNo) }

// writeStatus writes s and resets the stream with code, or, when code is
// NO_ERROR, only if the client's side is still open (it need send no more).
func (st *Stream) writeStatus(s *status.Status, code uint32) error {
	c := st.c
	c.wmu.Lock()
	if st.done {
		c.wmu.Unlock()
		return nil
	}
	st.done = true
	// Out of the count of open streams before the client can see the end:
	// it may open the next stream the moment it does.
	c.mu.Lock()
	delete(c.streams, st.id)
	c.mu.Unlock()
	var b []byte
	if !st.headerSent && len(st.header) > 0 {
		// Headers set for the response go out in their own frame first.
		st.headerSent = true
		b = appendHeaderBlock(b, st.id, c.encode(headerFields(st.header)...), false, c.peerMaxFrame())
	}
	b = appendHeaderBlock(b, st.id, c.encode(trailerFields(s, st.trailer, !st.headerSent)...), true, c.peerMaxFrame())
	st.rmu.Lock()
	clientOpen := !st.recvEOF
	if st.recvErr == nil {
		st.recvErr = s.Err()
		if s.Code() == codes.OK {
			st.recvErr = status.Error(codes.Canceled, "the stream has ended")
		}
	}
	pump := st.kick()
	st.rmu.Unlock()
	if clientOpen || code != errNo {
		b = appendUint32Frame(b, frameRSTStream, st.id, code)
	}
	err := c.writeLocked(b)
	c.wmu.Unlock()
	if pump {
		st.pump() // done is told before the stream leaves its connection
	}
	st.end()
	return err
}

// abort ends the stream without writing anything: the client reset it, or
// the connection closed.
func (st *Stream) abort(err error) {
	c := st.c
	c.wmu.Lock()
	already := st.done
	st.done = true
	c.wmu.Unlock()
	st.rmu.Lock()
	if st.recvErr == nil {
		st.recvErr = err
	}
	pump := st.kick()
	st.rmu.Unlock()
	if pump {
		st.pump()
	}
	if !already {
		st.end()
	}
}

func (st *Stream) end() {
	st.c.mu.Lock()
	st.ended = true
	st.c.mu.Unlock()
	st.cancel()
	st.c.removed(st.id)
}

// Context is the call's context: it carries the caller's metadata, peer
// and deadline and what Admit added, and ends with the stream.
func (st *Stream) Context() context.Context { return st.ctx }

// Method is the call's full method.
func (st *Stream) Method() string { return st.method }

// SetHeader adds md to the response headers, until they are sent.
func (st *Stream) SetHeader(md metadata.MD) error {
	st.c.wmu.Lock()
	defer st.c.wmu.Unlock()
	if st.headerSent {
		return status.Error(codes.Internal, "the response headers were already sent")
	}
	st.header = metadata.Join(st.header, md)
	return nil
}

// SendHeader sends the response headers with md added.
func (st *Stream) SendHeader(md metadata.MD) error {
	c := st.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if st.headerSent || st.done {
		return status.Error(codes.Internal, "the response headers were already sent")
	}
	st.headerSent = true
	st.header = metadata.Join(st.header, md)
	return c.writeLocked(appendHeaderBlock(nil, st.id, c.encode(headerFields(st.header)...), false, c.peerMaxFrame()))
}

// SetTrailer adds md to the trailers.
func (st *Stream) SetTrailer(md metadata.MD) {
	st.c.wmu.Lock()
	defer st.c.wmu.Unlock()
	st.trailer = metadata.Join(st.trailer, md)
}

// headerFields are a response's headers.
func headerFields(md metadata.MD) []string {
	kv := []string{":status", "200", "content-type", "application/grpc"}
	return appendMetadata(kv, md)
}

// trailerFields are a response's trailers for s; withHeaders when no
// headers were sent (a trailers-only response).
func trailerFields(s *status.Status, md metadata.MD, withHeaders bool) []string {
	var kv []string
	if withHeaders {
		kv = append(kv, ":status", "200", "content-type", "application/grpc")
	}
	kv = append(kv, "grpc-status", strconv.Itoa(int(s.Code())))
	if m := s.Message(); m != "" {
		kv = append(kv, "grpc-message", encodeMessage(m))
	}
	if p := s.Proto(); len(p.GetDetails()) > 0 {
		if b, err := proto.Marshal(p); err == nil {
			kv = append(kv, "grpc-status-details-bin", base64.RawStdEncoding.EncodeToString(b))
		}
	}
	return appendMetadata(kv, md)
}

func appendMetadata(kv []string, md metadata.MD) []string {
	for k, vs := range md {
		if reserved(k) {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			kv = append(kv, k, v)
		}
	}
	return kv
}

// reserved names headers gRPC itself sets, which metadata does not carry.
func reserved(k string) bool {
	switch k {
	case "content-type", "grpc-message-type", "grpc-encoding", "grpc-message", "grpc-status",
		"grpc-timeout", "grpc-status-details-bin", "te", "grpc-accept-encoding":
		return true
	}
	return strings.HasPrefix(k, ":")
}

// metadataOf is a call's metadata from its headers, as grpc-go gives it to
// handlers: pseudo-headers and gRPC's own left out, :authority and
// content-type kept, binary values decoded.
func metadataOf(fields []hpack.HeaderField) (metadata.MD, error) {
	md := make(metadata.MD, len(fields))
	for _, f := range fields {
		k := strings.ToLower(f.Name)
		switch {
		case k == ":authority", k == "content-type":
		case reserved(k):
			continue
		}
		v := f.Value
		if strings.HasSuffix(k, "-bin") {
			b, err := decodeBinary(v)
			if err != nil {
				return nil, fmt.Errorf("metadata %q: not base64: %v", k, err)
			}
			v = string(b)
		}
		md[k] = append(md[k], v)
	}
	return md, nil
}

func decodeBinary(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// decodeTimeout reads a grpc-timeout header: up to 8 digits and a unit.
func decodeTimeout(s string) (time.Duration, error) {
	if len(s) < 2 || len(s) > 9 {
		return 0, fmt.Errorf("want 1 to 8 digits and a unit")
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, fmt.Errorf("unit %q is none of H, M, S, m, u, n", s[len(s)-1])
	}
	n, err := strconv.ParseUint(s[:len(s)-1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("digits %q: %v", s[:len(s)-1], err)
	}
	if unit == time.Hour && n > uint64(1<<63-1)/uint64(time.Hour) {
		return 1<<63 - 1, nil
	}
	return unit * time.Duration(n), nil
}

// encodeMessage percent-encodes a status message for grpc-message.
func encodeMessage(m string) string {
	plain := true
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < ' ' || c > '~' || c == '%' {
			plain = false
			break
		}
	}
	if plain {
		return m
	}
	var sb strings.Builder
	for i := 0; i < len(m); {
		r, size := utf8.DecodeRuneInString(m[i:])
		for _, b := range []byte(m[i : i+size]) {
			if size == 1 && r != utf8.RuneError && b >= ' ' && b <= '~' && b != '%' {
				sb.WriteByte(b)
			} else {
				fmt.Fprintf(&sb, "%%%02X", b)
			}
		}
		i += size
	}
	return sb.String()
}
