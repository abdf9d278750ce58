package server_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Client speaks HTTP/2 frame by frame, so a test can send what no gRPC
// client would: a stream that ends before its request, half a message, a
// reset at any point.
type h2Client struct {
	t      *testing.T
	conn   net.Conn
	fr     *http2.Framer
	next   uint32 // the next stream id
	closed bool
}

// dialH2 opens a connection to addr and sends the client preface and an
// empty SETTINGS frame.
func dialH2(t *testing.T, addr string) *h2Client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &h2Client{t: t, conn: conn, fr: http2.NewFramer(conn, conn), next: 1}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatalf("write preface: %v", err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatalf("write settings: %v", err)
	}
	return c
}

// open starts a gRPC call of method, with END_STREAM on its HEADERS when
// endStream, and returns its stream id. Headers are written whole (one
// HEADERS frame), as every gRPC client does.
func (c *h2Client) open(method string, endStream bool) uint32 {
	c.t.Helper()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "aion.test"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	id := c.next
	c.next += 2
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(),
		EndHeaders: true, EndStream: endStream}); err != nil && !c.closed {
		c.t.Fatalf("write headers: %v", err)
	}
	return id
}

// message frames b as one gRPC message (uncompressed).
func message(b []byte) []byte {
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// write sends an operation's frame, ignoring a connection the server has
// closed: the server may end a call (and, on the lean transport, the
// connection) while the client still writes, and the test then reads why.
func (c *h2Client) write(f func() error) {
	if c.closed {
		return
	}
	if err := f(); err != nil {
		c.closed = true
	}
}

func (c *h2Client) data(id uint32, b []byte, endStream bool) {
	c.write(func() error { return c.fr.WriteData(id, endStream, b) })
}

func (c *h2Client) reset(id uint32, code http2.ErrCode) {
	c.write(func() error { return c.fr.WriteRSTStream(id, code) })
}

// end is how the server ended a stream: the grpc-status of its trailers, a
// reset, or (the zero end) the connection closing or going away.
type end struct {
	status string // grpc-status of the trailers ("none" when they had none)
	reset  bool
}

func (e end) String() string {
	switch {
	case e.status != "":
		return "grpc-status " + e.status
	case e.reset:
		return "RST_STREAM"
	default:
		return "connection ended"
	}
}

// await reads frames, acknowledging SETTINGS and PINGs and opening the
// connection's window for what the server sends, until stream id ends or
// the connection does.
func (c *h2Client) await(id uint32, within time.Duration) (end, error) {
	if err := c.conn.SetReadDeadline(time.Now().Add(within)); err != nil {
		return end{}, err
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return end{}, fmt.Errorf("stream %d: no end within %v", id, within)
			}
			return end{}, nil
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.write(c.fr.WriteSettingsAck)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.write(func() error { return c.fr.WritePing(true, f.Data) })
			}
		case *http2.DataFrame:
			if n := f.Length; n > 0 {
				c.write(func() error { return c.fr.WriteWindowUpdate(0, n) })
			}
		case *http2.GoAwayFrame:
			return end{}, nil
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return end{reset: true}, nil
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && f.StreamEnded() {
				return end{status: grpcStatus(f)}, nil
			}
		}
	}
}

// grpcStatus is the grpc-status of trailers, or "none".
func grpcStatus(f *http2.MetaHeadersFrame) string {
	for _, h := range f.Fields {
		if h.Name == "grpc-status" {
			return h.Value
		}
	}
	return "none"
}
