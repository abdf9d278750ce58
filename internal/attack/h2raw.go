package attack

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// rawConn is an HTTP/2 client connection to the server under attack,
// written frame by frame: the attacks here send what no client library
// sends (streams cut short, requests never made, streams past the limit).
// One goroutine uses it at a time.
type rawConn struct {
	nc net.Conn
	bw *bufio.Writer
	fr *http2.Framer
	// read and wrote count the bytes read from and written to the
	// connection.
	read  *countingReader
	wrote *countingWriter

	enc  *hpack.Encoder
	hbuf bytes.Buffer

	lastID uint32

	// ctx is the dial's: once it ends, a deadline in the past stops every
	// read and write (set by the function stop cancels, which closes ended
	// when it has run), unless settle has been called.
	ctx     context.Context
	stop    func() bool
	ended   chan struct{}
	settled bool
}

// rawWriteBuffer batches the frames of a flood into large writes.
const rawWriteBuffer = 16 << 10

// dialRaw connects to addr (the server under attack) with a receive buffer
// of rcvbuf bytes when rcvbuf > 0, and writes the client preface and an
// empty SETTINGS frame. Once ctx ends every read and write on it fails.
func dialRaw(ctx context.Context, addr string, rcvbuf int) (*rawConn, error) {
	if !isLoopback(addr) {
		return nil, fmt.Errorf("dial %s: not a loopback address", addr)
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if rcvbuf > 0 {
		if err := nc.(*net.TCPConn).SetReadBuffer(rcvbuf); err != nil {
			nc.Close()
			return nil, fmt.Errorf("set the receive buffer: %w", err)
		}
	}
	c := &rawConn{nc: nc, read: &countingReader{r: nc}, wrote: &countingWriter{w: nc}, ctx: ctx, ended: make(chan struct{})}
	c.bw = bufio.NewWriterSize(c.wrote, rawWriteBuffer)
	c.fr = http2.NewFramer(c.bw, c.read)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.stop = context.AfterFunc(ctx, func() {
		_ = nc.SetDeadline(time.Now())
		close(c.ended)
	})
	if _, err := c.bw.WriteString(http2.ClientPreface); err != nil {
		c.close()
		return nil, err
	}
	if err := c.fr.WriteSettings(); err != nil {
		c.close()
		return nil, err
	}
	if err := c.flush(); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *rawConn) close() {
	c.stop()
	c.nc.Close()
}

// settle lets the connection outlive the dial's context: the deadline the
// context's end sets is cancelled, or waited for when it is being set, so
// it overwrites no later one.
func (c *rawConn) settle() {
	if c.settled {
		return
	}
	c.settled = true
	if !c.stop() {
		<-c.ended
	}
}

// readBy and writeBy set the read or write deadline to t (none when zero),
// or to now once the dial's context has ended.
func (c *rawConn) readBy(t time.Time)  { c.by(c.nc.SetReadDeadline, t) }
func (c *rawConn) writeBy(t time.Time) { c.by(c.nc.SetWriteDeadline, t) }

func (c *rawConn) by(set func(time.Time) error, t time.Time) {
	_ = set(t)
	// The context's end is visible before its deadline is set: either that
	// deadline comes after t, or this sees the end.
	if !c.settled && c.ctx.Err() != nil {
		_ = set(time.Now())
	}
}

// flush writes the frames buffered so far, within 10 seconds.
func (c *rawConn) flush() error {
	if c.bw.Buffered() == 0 {
		return nil
	}
	c.writeBy(time.Now().Add(10 * time.Second))
	return c.bw.Flush()
}

// stream returns the id of a new stream.
func (c *rawConn) stream() uint32 {
	if c.lastID == 0 {
		c.lastID = 1
	} else {
		c.lastID += 2
	}
	return c.lastID
}

// maxStreamID is the largest stream id a client may open.
const maxStreamID = 1<<31 - 1

// headers buffers a HEADERS frame carrying fields on stream id, ending the
// stream's sending side when endStream.
func (c *rawConn) headers(id uint32, fields []hpack.HeaderField, endStream bool) error {
	block, err := c.block(fields)
	if err != nil {
		return err
	}
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: endStream, EndHeaders: true})
}

// block encodes fields with the connection's encoder; the block is valid
// until the next call.
func (c *rawConn) block(fields []hpack.HeaderField) ([]byte, error) {
	c.hbuf.Reset()
	for _, f := range fields {
		if err := c.enc.WriteField(f); err != nil {
			return nil, fmt.Errorf("encode %s: %w", f.Name, err)
		}
	}
	return c.hbuf.Bytes(), nil
}

// connectFields are the headers of a worker's Connect call with key,
// sent as contentType.
func connectFields(authority, key, contentType string) []hpack.HeaderField {
	return []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: connectMethod},
		{Name: ":authority", Value: authority},
		{Name: "content-type", Value: contentType},
		{Name: "te", Value: "trailers"},
		{Name: "authorization", Value: "Bearer " + key},
	}
}

// grpcMessage returns a gRPC message's length prefix and its first n bytes
// of a body of size bytes: with n < size, half a message.
func grpcMessage(size, n int) []byte {
	b := make([]byte, 5+n)
	b[1], b[2], b[3], b[4] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	return b
}

// serverSettings reads the server's frames up to its first SETTINGS, within
// wait, and returns its MAX_CONCURRENT_STREAMS (0 when it announced none).
func (c *rawConn) serverSettings(wait time.Duration) (uint32, error) {
	c.readBy(time.Now().Add(wait))
	defer c.readBy(time.Time{})
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return 0, fmt.Errorf("read the server's settings: %w", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			n, _ := sf.Value(http2.SettingMaxConcurrentStreams)
			return n, nil
		}
	}
}

// await reads frames until the server ends stream id (trailers or
// RST_STREAM), the connection ends, or wait passes, answering the server's
// pings and settings meanwhile, and names how the stream ended: a gRPC
// code (see streamStatus), "RST_STREAM CANCEL", "connection closed", "no
// answer within 5s". With barrier set it returns as soon as the server
// acknowledges a ping carrying barrier, sent after what the stream did:
// whatever the server answered by then, or "no answer".
func (c *rawConn) await(id uint32, wait time.Duration, barrier *[8]byte) string {
	c.readBy(time.Now().Add(wait))
	httpStatus := ""
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			switch {
			case isTimeout(err):
				return fmt.Sprintf("no answer within %v", wait)
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
				return "connection closed"
			}
			var se http2.StreamError
			if errors.As(err, &se) && se.StreamID == id {
				return "unreadable answer: " + se.Code.String()
			}
			return "connection closed: " + outcome(err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			if s := f.PseudoValue("status"); s != "" {
				httpStatus = s
			}
			if !f.StreamEnded() {
				continue // response headers; the trailers follow
			}
			return streamStatus(f, httpStatus)
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			// The connection ends once its streams have; read on.
		case *http2.PingFrame:
			if f.IsAck() && barrier != nil && f.Data == *barrier {
				return "no answer"
			}
			if !f.IsAck() {
				_ = c.fr.WritePing(true, f.Data)
				_ = c.flush()
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.fr.WriteSettingsAck()
				_ = c.flush()
			}
		case *http2.DataFrame:
			if n := f.Length; n > 0 {
				_ = c.fr.WriteWindowUpdate(0, n)
				_ = c.flush()
			}
		}
	}
}

// streamStatus names how the HEADERS f ended its stream: by the gRPC code
// of its grpc-status, else by the HTTP status of the response (given when
// it came in an earlier HEADERS).
func streamStatus(f *http2.MetaHeadersFrame, httpStatus string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == "grpc-status" {
			return grpcCode(hf.Value)
		}
	}
	if s := f.PseudoValue("status"); s != "" {
		httpStatus = s
	}
	return "HTTP " + httpStatus + " without grpc-status"
}

// drain reads what the server sent, for up to wait or limit bytes, and
// counts its answers to streams by label (see streamStatus; "RST_STREAM
// REFUSED_STREAM", "GOAWAY NO_ERROR"); closed reports whether the
// connection ended before the wait or the limit did.
func (c *rawConn) drain(wait time.Duration, limit int64) (answers map[string]int64, closed bool) {
	c.settle()
	_ = c.nc.SetDeadline(time.Now().Add(wait))
	answers = make(map[string]int64)
	start := c.read.n.Load()
	for c.read.n.Load()-start < limit {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				answers["unreadable answer: "+se.Code.String()]++
				continue
			}
			return answers, !isTimeout(err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				answers[streamStatus(f, "")]++
			}
		case *http2.RSTStreamFrame:
			answers["RST_STREAM "+f.ErrCode.String()]++
		case *http2.GoAwayFrame:
			answers["GOAWAY "+f.ErrCode.String()]++
		}
	}
	return answers, false
}

// grpcCode names a grpc-status value.
func grpcCode(v string) string {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return fmt.Sprintf("grpc-status %q", v)
	}
	return codes.Code(n).String()
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.n.Add(int64(n))
	return n, err
}

// isTimeout reports whether err is a deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
