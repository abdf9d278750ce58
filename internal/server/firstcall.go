package server

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/credentials"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/tokenbucket"
)

// maxBeforeFirstCall is how many bytes of HTTP/2 frames a gRPC connection
// may send after its preface and before its first call. An honest client
// sends its SETTINGS, a WINDOW_UPDATE and acknowledgements first, well under
// a KiB; PINGs are not counted (keepalive enforcement polices them). A
// connection past it is closed: without it, a connection that never makes a
// call could have the server parse frames for as long as the idle timeout
// (2,000 such connections sending 120 KiB of PRIORITY frames each: a peak
// of 134 MB, and honest calls' p99 past a second).
const maxBeforeFirstCall = 4 << 10

// streamBurst is how many calls a connection may open at once above its
// rate (--grpc-max-stream-rate).
const streamBurst = 1000

// errNoCall ends a connection that sent too much before its first call.
var errNoCall = errors.New("connection closed: too many HTTP/2 frames before its first call")

// guardedCreds are the gRPC server's credentials with every connection,
// once its handshake is done, held to maxBeforeFirstCall and to a rate of
// new calls: past the rate, the connection's frames are read only as fast
// as the rate allows, so a client opening calls as fast as it can write
// them (refused past the stream limit, or of a wrong content-type) spends
// its own connection's time, not the server's cores.
type guardedCreds struct {
	credentials.TransportCredentials
	// rate of new calls a second on one connection; 0 for no limit.
	rate  float64
	clock clock.Clock
}

// guarded holds every connection creds shake hands with to the server's
// bounds before the first call and on the rate of new calls.
func (s *Server) guarded(creds credentials.TransportCredentials) guardedCreds {
	return guardedCreds{TransportCredentials: creds, rate: float64(s.cfg.Conn.GRPCMaxStreamRate), clock: clock.Real()}
}

func (c guardedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	g := &guardedConn{Conn: conn, scan: frameScan{preface: len(http2.ClientPreface), limit: maxBeforeFirstCall},
		clock: c.clock, closed: make(chan struct{})}
	if c.rate > 0 {
		g.limit = tokenbucket.Limit{Rate: c.rate, Burst: streamBurst}
		g.bucket = tokenbucket.Full(g.limit, c.clock.Now())
	}
	return g, info, nil
}

func (c guardedCreds) Clone() credentials.TransportCredentials {
	return guardedCreds{TransportCredentials: c.TransportCredentials.Clone(), rate: c.rate, clock: c.clock}
}

// guardedConn follows what a client sends, frame header by frame header.
// Only the transport's reader calls Read; Close may come from anywhere.
type guardedConn struct {
	net.Conn
	scan   frameScan
	limit  tokenbucket.Limit // zero Rate: no limit on new calls
	bucket tokenbucket.Bucket
	clock  clock.Clock

	closeOnce sync.Once
	closed    chan struct{}
}

func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	opened, over := c.scan.feed(p[:n])
	if over {
		c.Close()
		return 0, fmt.Errorf("%w (%d bytes allowed)", errNoCall, maxBeforeFirstCall)
	}
	if opened > 0 && c.limit.Rate > 0 && !c.pace(opened) {
		return 0, net.ErrClosed
	}
	return n, err
}

// pace takes a token for each call opened and, when the bucket runs short,
// waits until the rate has made up the debt before the transport sees the
// frames: meanwhile nothing more is read from this connection. It reports
// false when the connection was closed meanwhile.
func (c *guardedConn) pace(opened int) bool {
	now := c.clock.Now()
	c.bucket.Refill(c.limit, now)
	c.bucket.Tokens -= float64(opened)
	if c.bucket.Tokens >= 0 {
		return true
	}
	wait := time.Duration(-c.bucket.Tokens / c.limit.Rate * float64(time.Second))
	t := c.clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-c.closed:
		return false
	}
}

func (c *guardedConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// frameScan follows the frame boundaries of a client's HTTP/2 byte stream:
// it skips the preface, reads each frame's 9-byte header and skips its
// payload. Until the first HEADERS frame it counts the bytes of every frame
// but PINGs; after, it counts the HEADERS frames that open a new stream. It
// decodes nothing else: the transport parses and checks every frame itself.
type frameScan struct {
	preface int     // preface bytes still to skip
	hdr     [9]byte // the frame header being gathered
	have    int     // bytes of hdr gathered
	skip    int     // payload bytes still to skip

	called  bool // a HEADERS frame came: the first call
	counted int  // bytes before the first call
	limit   int
	last    uint32 // the highest stream id a HEADERS frame opened
}

// feed reads b and returns how many new streams its HEADERS frames open,
// and whether the frames before the first call passed the limit (then the
// rest of b is not read).
func (s *frameScan) feed(b []byte) (opened int, over bool) {
	for len(b) > 0 {
		switch {
		case s.preface > 0:
			n := min(s.preface, len(b))
			s.preface -= n
			b = b[n:]
		case s.skip > 0:
			n := min(s.skip, len(b))
			s.skip -= n
			b = b[n:]
		default:
			n := copy(s.hdr[s.have:], b)
			s.have += n
			b = b[n:]
			if s.have < len(s.hdr) {
				return opened, false
			}
			s.have = 0
			length := int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			s.skip = length
			switch http2.FrameType(s.hdr[3]) {
			case http2.FrameHeaders:
				s.called = true
				id := (uint32(s.hdr[5])<<24 | uint32(s.hdr[6])<<16 | uint32(s.hdr[7])<<8 | uint32(s.hdr[8])) & (1<<31 - 1)
				if id > s.last {
					s.last = id
					opened++
				}
			case http2.FramePing:
			default:
				if !s.called {
					s.counted += len(s.hdr) + length
					if s.counted > s.limit {
						return opened, true
					}
				}
			}
		}
	}
	return opened, false
}
