package server

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/credentials"
)

// maxBeforeFirstCall is how many bytes of HTTP/2 frames a gRPC connection
// may send after its preface and before its first call. An honest client
// sends its SETTINGS, a WINDOW_UPDATE and acknowledgements first, well under
// a KiB; PINGs are not counted (keepalive enforcement polices them). A
// connection past it is closed: without it, a connection that never makes a
// call could have the server parse frames for as long as the idle timeout
// (2,000 such connections sending 120 KiB of PRIORITY frames each kept both
// cores busy).
const maxBeforeFirstCall = 16 << 10

// errNoCall ends a connection that sent too much before its first call.
var errNoCall = errors.New("connection closed: too many HTTP/2 frames before its first call")

// firstCallCreds are the gRPC server's credentials with every connection,
// once its handshake is done, held to maxBeforeFirstCall.
type firstCallCreds struct {
	credentials.TransportCredentials
}

func (c firstCallCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	return &firstCallConn{Conn: conn, scan: &frameScan{preface: len(http2.ClientPreface), limit: maxBeforeFirstCall}}, info, nil
}

func (c firstCallCreds) Clone() credentials.TransportCredentials {
	return firstCallCreds{c.TransportCredentials.Clone()}
}

// firstCallConn watches what a connection sends until its first call.
// Only the transport's reader calls Read, so it needs no lock.
type firstCallConn struct {
	net.Conn
	scan *frameScan // nil once the first call began
}

func (c *firstCallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.scan == nil || n == 0 {
		return n, err
	}
	switch c.scan.feed(p[:n]) {
	case scanCall:
		c.scan = nil
	case scanOver:
		c.scan = nil
		c.Conn.Close()
		return 0, fmt.Errorf("%w (%d bytes allowed)", errNoCall, maxBeforeFirstCall)
	}
	return n, err
}

// scanResult is what frameScan.feed found.
type scanResult int

const (
	scanPending scanResult = iota // no call yet, within the limit
	scanCall                      // a HEADERS frame began: the first call
	scanOver                      // the frames before any call passed the limit
)

// frameScan follows the frame boundaries of a client's HTTP/2 byte stream:
// it skips the preface, reads each frame's 9-byte header and skips its
// payload, counting the bytes of every frame but PINGs, until a HEADERS
// frame begins. It decodes nothing else: the transport parses and checks
// every frame itself.
type frameScan struct {
	preface int     // preface bytes still to skip
	hdr     [9]byte // the frame header being gathered
	have    int     // bytes of hdr gathered
	skip    int     // payload bytes still to skip
	counted int
	limit   int
}

func (s *frameScan) feed(b []byte) scanResult {
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
				return scanPending
			}
			s.have = 0
			length := int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			switch http2.FrameType(s.hdr[3]) {
			case http2.FrameHeaders:
				return scanCall
			case http2.FramePing:
			default:
				s.counted += len(s.hdr) + length
				if s.counted > s.limit {
					return scanOver
				}
			}
			s.skip = length
		}
	}
	return scanPending
}
