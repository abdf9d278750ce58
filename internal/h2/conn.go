package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// conn is one connection. Its goroutine reads and handles frames; streams'
// handlers and senders write to it under wmu; the server's watch checks it
// for silence.
type conn struct {
	s  *Server
	nc net.Conn // closed to end the connection
	rw net.Conn // read and written: nc, or the TLS connection over it

	// Read side, the connection's goroutine only. br is small: it lets the
	// frame header and a small frame (a ping, a result) come in one read;
	// a larger payload is read past it, straight into its buffer.
	br         *bufio.Reader
	hdr        [headerLen]byte
	dec        *hpack.Decoder
	fields     []hpack.HeaderField
	fieldsSize uint32
	fieldsOver bool
	lastID     uint32 // highest stream id the client opened
	recvAvail  int64  // connection receive window left
	recvOwed   int64  // bytes received and not yet credited back

	mu       sync.Mutex
	cond     sync.Cond // on mu: a send window grew, or a stream or the connection ended
	streams  map[uint32]*Stream
	sendWin  int64 // connection send window
	peerInit int64 // the client's initial stream window
	peerMax  int   // the client's largest frame
	accepted uint32
	kept     bool
	goneAway bool
	closed   bool
	handed   bool

	// On wmu: the header encoder, the bytes queued for the flusher, whether
	// one runs, the first write error, and whether the connection closes
	// once the queue is written.
	wmu         sync.Mutex
	enc         *hpack.Encoder
	encBuf      bytes.Buffer
	pend        []byte
	pendControl int // bytes of pend that answer pings and settings
	flushing    bool
	closing     bool
	werr        error

	active atomic.Bool // a frame arrived since the last watch
	// The watch's own.
	silentSince, idleSince, pingAt time.Time
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:           s,
		nc:          nc,
		rw:          nc,
		recvAvail:   defaultWindow,
		sendWin:     defaultWindow,
		peerInit:    defaultWindow,
		peerMax:     defaultFrameSize,
		silentSince: s.cfg.Clock.Now(),
	}
	c.cond.L = &c.mu
	c.dec = hpack.NewDecoder(4096, c.emit)
	c.dec.SetMaxStringLength(int(s.cfg.MaxHeaderListSize))
	return c
}

// emit collects a decoded header field, up to the header list size.
func (c *conn) emit(f hpack.HeaderField) {
	c.fieldsSize += f.Size()
	if c.fieldsSize > c.s.cfg.MaxHeaderListSize {
		c.fieldsOver = true
		return
	}
	c.fields = append(c.fields, f)
}

// serve runs the connection: the handshake, then frames until it ends.
func (c *conn) serve() {
	defer c.s.forget(c)
	first, handed, err := c.handshake()
	if handed {
		return
	}
	if err == nil {
		err = c.open(first)
	}
	for err == nil {
		var (
			h   header
			buf *[]byte
		)
		h, buf, err = readFrame(c.br, &c.hdr, defaultFrameSize)
		if err != nil {
			break
		}
		c.active.Store(true)
		err = c.handle(h, *buf)
		release(buf)
	}
	var ce connError
	if errors.As(err, &ce) {
		c.goAway(ce.code, ce.msg)
	}
	c.close(err)
}

// recorder keeps every byte read through it, for a hand-off to replay.
type recorder struct {
	r   io.Reader
	buf []byte
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

// replayConn reads the bytes read before a hand-off, then the connection.
type replayConn struct {
	net.Conn
	buf []byte
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.buf) == 0 {
		return r.Conn.Read(p)
	}
	n := copy(p, r.buf)
	if r.buf = r.buf[n:]; len(r.buf) == 0 {
		r.buf = nil
	}
	return n, nil
}

// TLSInfo is the TLS state of a connection the server handed off or kept,
// as gRPC reports a peer's, when it came over TLS: a grpc.Server taking
// handed-off connections gives it in place of a second handshake.
func TLSInfo(c net.Conn) (credentials.TLSInfo, bool) {
	if r, ok := c.(*replayConn); ok {
		c = r.Conn
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return credentials.TLSInfo{}, false
	}
	return credentials.TLSInfo{State: tc.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, true
}

// callHeaders is a call's HEADERS, decoded.
type callHeaders struct {
	h      header
	fields []hpack.HeaderField
	over   bool
}

// undecidedBytes bounds, with the largest header list, what a connection
// may send before its first call's headers: past it the connection is
// handed off.
const undecidedBytes = 64 << 10

// readBuffer is the size of a kept connection's read buffer.
const readBuffer = 512

// handshake reads the preface and the frames up to the first call's
// headers, then keeps the connection (the call is to Method) or hands it
// off with everything read so far. Until it decides it writes nothing but
// the SETTINGS a grpc.Server would write too, so a client handed off sees
// the same settings twice.
func (c *conn) handshake() (*callHeaders, bool, error) {
	cfg := &c.s.cfg
	rec := &recorder{r: c.rw}
	handoff := func() (*callHeaders, bool, error) {
		_ = c.rw.SetDeadline(time.Time{})
		c.mu.Lock()
		closed := c.closed
		c.handed = !closed
		c.mu.Unlock()
		if closed {
			return nil, false, net.ErrClosed
		}
		cfg.Handoff(&replayConn{Conn: c.rw, buf: rec.buf})
		return nil, true, nil
	}
	if cfg.HandshakeTimeout > 0 {
		_ = c.nc.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	}
	if c.s.tls != nil {
		tc := tls.Server(c.nc, c.s.tls)
		if err := tc.Handshake(); err != nil {
			return nil, false, fmt.Errorf("tls handshake: %w", err)
		}
		_ = c.nc.SetWriteDeadline(time.Time{})
		c.rw = tc
		rec.r = tc
	}
	var pre [len(preface)]byte
	if _, err := io.ReadFull(rec, pre[:]); err != nil {
		return nil, false, err
	}
	if string(pre[:]) != preface {
		return handoff()
	}
	// Written at once, not queued: a connection handed off must have it
	// on the wire before grpc-go writes its own.
	_ = c.rw.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
	if _, err := c.rw.Write(c.settings()); err != nil {
		return nil, false, err
	}
	type early struct {
		h header
		p []byte
	}
	var pending []early
	settled := false
	for {
		h, buf, err := readFrame(rec, &c.hdr, defaultFrameSize)
		if err != nil {
			if errors.As(err, new(connError)) {
				return handoff() // grpc-go answers what is not ours to judge
			}
			return nil, false, err
		}
		if len(rec.buf) > int(cfg.MaxHeaderListSize)+undecidedBytes {
			release(buf)
			return handoff() // grpc-go's policies judge a client this talkative
		}
		switch h.typ {
		case frameSettings, frameWindowUpdate, framePing, 0x2: // 0x2: PRIORITY
			if h.typ == frameSettings && !settled {
				settled = true
				deadline := time.Time{}
				if cfg.IdleTimeout > 0 {
					deadline = time.Now().Add(cfg.IdleTimeout)
				}
				_ = c.rw.SetReadDeadline(deadline)
			}
			pending = append(pending, early{h, bytes.Clone(*buf)})
			release(buf)
			continue
		case frameHeaders:
		default:
			release(buf)
			return handoff()
		}
		if !settled {
			release(buf)
			return handoff()
		}
		first, err := c.readHeaders(rec, h, *buf)
		release(buf)
		if err != nil || first.path() != cfg.Method {
			return handoff()
		}
		_ = c.rw.SetReadDeadline(time.Time{})
		c.br = bufio.NewReaderSize(c.rw, readBuffer)
		c.mu.Lock()
		c.kept = !c.closed
		c.mu.Unlock()
		for _, f := range pending {
			if err := c.handle(f.h, f.p); err != nil {
				return nil, false, err
			}
		}
		if extra := int64(cfg.ConnWindow) - defaultWindow; extra > 0 {
			c.recvAvail += extra
			if err := c.write(appendUint32Frame(nil, frameWindowUpdate, 0, uint32(extra))); err != nil {
				return nil, false, err
			}
		}
		return first, false, nil
	}
}

// settings is the server's SETTINGS frame, as a grpc.Server with the same
// configuration writes it.
func (c *conn) settings() []byte {
	cfg := &c.s.cfg
	kv := []uint32{settingMaxFrameSize, defaultFrameSize}
	if cfg.MaxStreams != math.MaxUint32 {
		kv = append(kv, settingMaxConcurrentStreams, cfg.MaxStreams)
	}
	if cfg.StreamWindow != defaultWindow {
		kv = append(kv, settingInitialWindowSize, cfg.StreamWindow)
	}
	kv = append(kv, settingMaxHeaderListSize, cfg.MaxHeaderListSize)
	return appendSettings(nil, kv...)
}

// readHeaders decodes a HEADERS frame's block, reading its CONTINUATION
// frames from r.
func (c *conn) readHeaders(r io.Reader, h header, p []byte) (*callHeaders, error) {
	if h.stream == 0 {
		return nil, connError{errProtocol, "HEADERS on stream 0"}
	}
	block, err := unpad(h, p)
	if err != nil {
		return nil, err
	}
	if h.has(flagPriority) {
		if len(block) < 5 {
			return nil, connError{errProtocol, fmt.Sprintf("%v: too short for its priority", h)}
		}
		block = block[5:]
	}
	c.fields, c.fieldsSize, c.fieldsOver = nil, 0, false
	size, most := len(block), int(c.s.cfg.MaxHeaderListSize)+defaultFrameSize
	if _, err := c.dec.Write(block); err != nil {
		return nil, connError{errCompression, fmt.Sprintf("%v: %v", h, err)}
	}
	for end := h.has(flagEndHeaders); !end; {
		ch, buf, err := readFrame(r, &c.hdr, defaultFrameSize)
		if err != nil {
			return nil, err
		}
		if ch.typ != frameContinuation || ch.stream != h.stream {
			release(buf)
			return nil, connError{errProtocol, fmt.Sprintf("%v while the headers of stream %d continue", ch, h.stream)}
		}
		end = ch.has(flagEndHeaders)
		if size += len(*buf); size > most {
			release(buf)
			return nil, connError{errEnhanceYourCalm, fmt.Sprintf("the headers of stream %d run past %d bytes", h.stream, most)}
		}
		_, err = c.dec.Write(*buf)
		release(buf)
		if err != nil {
			return nil, connError{errCompression, fmt.Sprintf("%v: %v", ch, err)}
		}
	}
	if err := c.dec.Close(); err != nil {
		return nil, connError{errCompression, fmt.Sprintf("%v: %v", h, err)}
	}
	f := &callHeaders{h: h, fields: c.fields, over: c.fieldsOver}
	c.fields = nil
	return f, nil
}

func (f *callHeaders) get(name string) string {
	for _, hf := range f.fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

func (f *callHeaders) path() string { return f.get(":path") }

// handle acts on one frame after the handshake.
func (c *conn) handle(h header, p []byte) error {
	switch h.typ {
	case frameData:
		return c.handleData(h, p)
	case frameHeaders:
		call, err := c.readHeaders(c.br, h, p)
		if err != nil {
			return err
		}
		return c.open(call)
	case frameRSTStream:
		if len(p) != 4 || h.stream == 0 {
			return connError{errFrameSize, fmt.Sprintf("%v: RST_STREAM is 4 bytes on a stream", h)}
		}
		if st := c.stream(h.stream); st != nil {
			st.abort(status.Errorf(codes.Canceled, "the client reset the stream (code %d)", binary.BigEndian.Uint32(p)))
		}
		return nil
	case frameSettings:
		return c.handleSettings(h, p)
	case framePing:
		if len(p) != 8 || h.stream != 0 {
			return connError{errFrameSize, fmt.Sprintf("%v: PING is 8 bytes on stream 0", h)}
		}
		if h.has(flagAck) {
			return nil // any frame counts as an answer (see check)
		}
		b := appendFrameHeader(nil, framePing, flagAck, 0, 8)
		return c.writeControl(append(b, p...))
	case frameWindowUpdate:
		return c.handleWindowUpdate(h, p)
	case framePushPromise:
		return connError{errProtocol, "a client sent PUSH_PROMISE"}
	case frameContinuation:
		return connError{errProtocol, fmt.Sprintf("%v without HEADERS before it", h)}
	}
	return nil // GOAWAY, PRIORITY and unknown types need nothing
}

func (c *conn) stream(id uint32) *Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

func (c *conn) handleSettings(h header, p []byte) error {
	if h.stream != 0 || len(p)%6 != 0 {
		return connError{errFrameSize, fmt.Sprintf("%v: not a SETTINGS frame", h)}
	}
	if h.has(flagAck) {
		return nil
	}
	c.mu.Lock()
	for ; len(p) > 0; p = p[6:] {
		id, v := binary.BigEndian.Uint16(p), binary.BigEndian.Uint32(p[2:])
		switch id {
		case settingInitialWindowSize:
			if v > maxWindow {
				c.mu.Unlock()
				return connError{errFlowControl, fmt.Sprintf("initial window size %d", v)}
			}
			delta := int64(v) - c.peerInit
			c.peerInit = int64(v)
			for _, st := range c.streams {
				st.sendWin += delta
			}
		case settingMaxFrameSize:
			if v < defaultFrameSize || v > 1<<24-1 {
				c.mu.Unlock()
				return connError{errProtocol, fmt.Sprintf("max frame size %d", v)}
			}
			c.peerMax = int(v)
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	return c.writeControl(appendFrameHeader(nil, frameSettings, flagAck, 0, 0))
}

// maxControlQueued bounds the answers to pings and settings waiting to be
// written: a client that sends them faster than it reads the answers is
// cut off rather than queued for.
const maxControlQueued = 16 << 10

// writeControl queues an answer to a ping or settings.
func (c *conn) writeControl(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.pendControl += len(b); c.pendControl > maxControlQueued {
		return connError{errEnhanceYourCalm, "pings or settings sent faster than their answers are read"}
	}
	return c.writeLocked(b)
}

func (c *conn) handleWindowUpdate(h header, p []byte) error {
	if len(p) != 4 {
		return connError{errFrameSize, fmt.Sprintf("%v: WINDOW_UPDATE is 4 bytes", h)}
	}
	inc := int64(binary.BigEndian.Uint32(p) & maxWindow)
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.stream == 0 {
		if c.sendWin += inc; c.sendWin > maxWindow {
			return connError{errFlowControl, "connection window past 2^31-1"}
		}
	} else if st := c.streams[h.stream]; st != nil {
		st.sendWin += inc
	}
	c.cond.Broadcast()
	return nil
}

// handleData counts a DATA frame against the connection's window, crediting
// the connection back once a quarter of it is used (the streams' own windows
// bound what waits unread), and hands its bytes to the stream.
func (c *conn) handleData(h header, p []byte) error {
	if h.stream == 0 {
		return connError{errProtocol, "DATA on stream 0"}
	}
	n := int64(h.length)
	if n > c.recvAvail {
		return connError{errFlowControl, fmt.Sprintf("%v: past the connection's window of %d bytes", h, c.recvAvail)}
	}
	c.recvAvail -= n
	c.recvOwed += n
	if c.recvOwed >= int64(c.s.cfg.ConnWindow)/4 {
		owed := c.recvOwed
		c.recvAvail += owed
		c.recvOwed = 0
		if err := c.write(appendUint32Frame(nil, frameWindowUpdate, 0, uint32(owed))); err != nil {
			return err
		}
	}
	st := c.stream(h.stream)
	if st == nil {
		if h.stream > c.lastID {
			return connError{errProtocol, fmt.Sprintf("%v: the stream was never opened", h)}
		}
		return nil // a stream that ended: its bytes are dropped
	}
	data, err := unpad(h, p)
	if err != nil {
		return err
	}
	st.received(n, data, h.has(flagEndStream))
	return nil
}

// open starts a stream from its headers, or refuses it with a status when
// they are not a call the server takes.
func (c *conn) open(call *callHeaders) error {
	cfg := &c.s.cfg
	id := call.h.stream
	if id <= c.lastID || id%2 == 0 {
		c.mu.Lock()
		st := c.streams[id]
		c.mu.Unlock()
		if st != nil && call.h.has(flagEndStream) {
			st.received(0, nil, true) // trailers end what the client sends
			return nil
		}
		if id%2 == 0 || st == nil && id > c.lastID {
			return connError{errProtocol, fmt.Sprintf("stream id %d after %d", id, c.lastID)}
		}
		return nil
	}
	c.lastID = id
	c.mu.Lock()
	gone, n := c.goneAway, uint32(len(c.streams))
	c.mu.Unlock()
	if gone {
		return c.write(appendUint32Frame(nil, frameRSTStream, id, errRefusedStream))
	}
	method := call.path()
	if n >= cfg.MaxStreams {
		return c.write(appendUint32Frame(nil, frameRSTStream, id, errRefusedStream))
	}
	endStream := call.h.has(flagEndStream)
	refuse := func(st *status.Status) error { return c.refuse(id, st, endStream) }
	if call.over {
		return refuse(status.Newf(codes.ResourceExhausted, "the call's headers are larger than the %d bytes allowed", cfg.MaxHeaderListSize))
	}
	if m := call.get(":method"); m != "POST" {
		return refuse(status.Newf(codes.Unimplemented, ":method %q: gRPC calls are POST", m))
	}
	if ct := call.get("content-type"); ct != "application/grpc" && !hasPrefix(ct, "application/grpc+") && !hasPrefix(ct, "application/grpc;") {
		return refuse(status.Newf(codes.InvalidArgument, "content-type %q is not gRPC", ct))
	}
	if enc := call.get("grpc-encoding"); enc != "" && enc != "identity" {
		return refuse(status.Newf(codes.Unimplemented, "grpc-encoding %q: compressed messages are not accepted", enc))
	}
	md, err := metadataOf(call.fields)
	if err != nil {
		return refuse(status.New(codes.InvalidArgument, err.Error()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	if t := call.get("grpc-timeout"); t != "" {
		d, err := decodeTimeout(t)
		if err != nil {
			cancel()
			return refuse(status.Newf(codes.InvalidArgument, "grpc-timeout %q: %v", t, err))
		}
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, d)
		base := cancel
		cancel = func() { cancelT(); base() }
	}
	st := &Stream{c: c, id: id, method: method, cancel: cancel, ready: make(chan struct{}, 1)}
	st.recvLimit = int64(cfg.StreamWindow)
	p := &peer.Peer{Addr: c.nc.RemoteAddr(), LocalAddr: c.nc.LocalAddr()}
	if info, ok := TLSInfo(c.rw); ok {
		p.AuthInfo = info
	}
	ctx = peer.NewContext(ctx, p)
	ctx = metadata.NewIncomingContext(ctx, md)
	ctx = grpc.NewContextWithServerTransportStream(ctx, transportStream{st})
	ctx, err = cfg.Admit(ctx, method, md)
	if err != nil {
		cancel()
		return refuse(status.Convert(err))
	}
	st.ctx = ctx
	st.recvEOF = endStream
	c.mu.Lock()
	if c.closed || c.goneAway {
		c.mu.Unlock()
		cancel()
		return nil
	}
	if c.streams == nil {
		c.streams = make(map[uint32]*Stream)
	}
	st.sendWin = c.peerInit
	c.streams[id] = st
	c.accepted = id
	c.s.wg.Add(1)
	c.mu.Unlock()
	go st.run()
	return nil
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// refuse ends a call that never became a stream with st, as trailers only.
func (c *conn) refuse(id uint32, st *status.Status, clientDone bool) error {
	c.wmu.Lock()
	b := appendHeaderBlock(nil, id, c.encode(trailerFields(st, nil, true)...), true, c.peerMaxFrame())
	if !clientDone {
		b = appendUint32Frame(b, frameRSTStream, id, errNo)
	}
	err := c.writeLocked(b)
	c.wmu.Unlock()
	return err
}

func (c *conn) peerMaxFrame() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerMax
}

// encode encodes header fields, given as name/value pairs, into a block;
// the caller holds wmu, and the block is valid until the next call. The
// encoder keeps no dynamic table: a connection's few response headers are
// not worth a table per connection.
func (c *conn) encode(kv ...string) []byte {
	if c.enc == nil {
		c.enc = hpack.NewEncoder(&c.encBuf)
		c.enc.SetMaxDynamicTableSizeLimit(0)
	}
	c.encBuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return c.encBuf.Bytes()
}

// write queues b for the connection's flusher.
func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(b)
}

// writeLocked queues b, in order, and starts a flusher unless one runs:
// frames queued while it writes go out together in its next write, as a
// burst of tasks to one worker does. It fails once a write has failed.
func (c *conn) writeLocked(b []byte) error {
	if c.werr != nil {
		return c.werr
	}
	c.pend = append(c.pend, b...)
	c.flushLocked()
	return nil
}

// flushLocked starts the flusher for what is queued, unless one runs; the
// caller holds wmu.
func (c *conn) flushLocked() {
	if !c.flushing {
		c.flushing = true
		c.s.wg.Add(1)
		go c.flush()
	}
}

// flush writes what is queued until nothing is, then ends; a connection
// that closed meanwhile is closed once its last bytes are out.
func (c *conn) flush() {
	defer c.s.wg.Done()
	for {
		c.wmu.Lock()
		b := c.pend
		c.pend, c.pendControl = nil, 0
		if len(b) == 0 {
			c.flushing = false
			closing := c.closing
			c.wmu.Unlock()
			if closing {
				_ = c.nc.Close()
			}
			return
		}
		c.wmu.Unlock()
		_ = c.rw.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		if _, err := c.rw.Write(b); err != nil {
			c.wmu.Lock()
			c.werr = fmt.Errorf("write: %w", err)
			c.pend, c.flushing = nil, false
			c.wmu.Unlock()
			_ = c.nc.Close()
			c.close(err)
			return
		}
	}
}

// reserve waits until st may send up to want bytes and takes them from the
// windows; it fails once st or the connection has ended.
func (c *conn) reserve(st *Stream, want int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		if c.closed {
			return 0, status.Error(codes.Unavailable, "the connection closed")
		}
		if st.ended {
			return 0, status.Error(codes.Canceled, "the stream has ended")
		}
		if err := st.ctx.Err(); err != nil {
			return 0, status.FromContextError(err).Err()
		}
		n := min(int64(want), st.sendWin, c.sendWin, int64(c.peerMax))
		if n > 0 {
			st.sendWin -= n
			c.sendWin -= n
			return int(n), nil
		}
		if stop == nil {
			stop = context.AfterFunc(st.ctx, func() {
				c.mu.Lock()
				c.cond.Broadcast()
				c.mu.Unlock()
			})
		}
		c.cond.Wait()
	}
}

// giveBack returns n bytes reserve took for st but never wrote.
func (c *conn) giveBack(st *Stream, n int) {
	c.mu.Lock()
	st.sendWin += int64(n)
	c.sendWin += int64(n)
	c.cond.Broadcast()
	c.mu.Unlock()
}

// goAway tells the client that no stream after the last accepted one is
// taken; the connection closes once its streams have ended.
func (c *conn) goAway(code uint32, debug string) {
	c.mu.Lock()
	if c.goneAway || c.closed || c.handed {
		c.mu.Unlock()
		return
	}
	c.goneAway = true
	last, empty, kept := c.accepted, len(c.streams) == 0, c.kept
	c.mu.Unlock()
	if kept {
		_ = c.write(appendGoAway(nil, last, code, debug))
	}
	if empty || !kept {
		c.close(errors.New("gone away: " + debug))
	}
}

// close closes the connection and ends its streams; the first call wins.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.closed || c.handed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	streams := make([]*Stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.wmu.Lock()
	c.closing = c.flushing // the flusher closes it once its bytes (a GOAWAY) are out
	c.wmu.Unlock()
	if !c.closing {
		_ = c.nc.Close()
	}
	msg := "the connection closed"
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		msg += ": " + err.Error()
	}
	for _, st := range streams {
		st.abort(status.New(codes.Unavailable, msg).Err())
	}
}

// kill closes the connection at once, without waiting for a flusher to
// write what is queued.
func (c *conn) kill(err error) {
	c.close(err)
	c.mu.Lock()
	handed := c.handed
	c.mu.Unlock()
	if !handed {
		_ = c.nc.Close()
	}
}

// removed drops an ended stream; a connection gone away closes with its
// last stream.
func (c *conn) removed(id uint32) {
	c.mu.Lock()
	delete(c.streams, id)
	last := c.goneAway && len(c.streams) == 0
	c.cond.Broadcast()
	c.mu.Unlock()
	if last {
		c.close(errors.New("gone away and its last stream ended"))
	}
}

// check runs on the server's watch: it pings a silent connection, closes
// one whose ping went unanswered, and one idle past the idle timeout.
func (c *conn) check(now time.Time) {
	cfg := &c.s.cfg
	if c.active.Swap(false) {
		c.silentSince, c.pingAt = now, time.Time{}
	}
	c.mu.Lock()
	kept, n, done := c.kept, len(c.streams), c.closed || c.goneAway
	c.mu.Unlock()
	if !kept || done {
		return
	}
	switch {
	case n > 0:
		c.idleSince = time.Time{}
	case c.idleSince.IsZero():
		c.idleSince = now
	case cfg.IdleTimeout > 0 && now.Sub(c.idleSince) >= cfg.IdleTimeout:
		c.s.wg.Go(func() { c.goAway(errNo, "idle") })
		return
	}
	if !c.pingAt.IsZero() {
		if now.Sub(c.pingAt) >= cfg.KeepaliveTimeout {
			c.s.wg.Go(func() { c.close(errors.New("keepalive: the client did not answer a ping")) })
		}
		return
	}
	if now.Sub(c.silentSince) >= cfg.KeepaliveTime {
		c.pingAt = now
		ping := append(appendFrameHeader(nil, framePing, 0, 0, 8), 0, 0, 0, 0, 0, 0, 0, 0)
		c.s.wg.Go(func() { _ = c.write(ping) })
	}
}
