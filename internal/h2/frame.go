package h2

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
)

// HTTP/2 frame types, flags, settings and error codes (RFC 9113) that this
// transport reads or writes.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	settingHeaderTableSize      = 0x1
	settingMaxConcurrentStreams = 0x3
	settingInitialWindowSize    = 0x4
	settingMaxFrameSize         = 0x5
	settingMaxHeaderListSize    = 0x6

	errNo              = 0x0
	errProtocol        = 0x1
	errFlowControl     = 0x3
	errStreamClosed    = 0x5
	errFrameSize       = 0x6
	errRefusedStream   = 0x7
	errCancel          = 0x8
	errCompression     = 0x9
	errEnhanceYourCalm = 0xb
)

// preface is what every HTTP/2 client sends first.
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Protocol defaults a peer starts from before its SETTINGS say otherwise.
const (
	defaultWindow    = 65535
	defaultFrameSize = 16384
	headerLen        = 9
	maxWindow        = 1<<31 - 1
)

// header is one frame's header.
type header struct {
	length uint32
	typ    uint8
	flags  uint8
	stream uint32
}

func (h header) has(f uint8) bool { return h.flags&f != 0 }

func (h header) String() string {
	return fmt.Sprintf("frame type %d, flags %#x, stream %d, %d bytes", h.typ, h.flags, h.stream, h.length)
}

// payloads lends frame payloads for the time one frame is handled: a
// connection keeps no read buffer of its own between frames, so an idle one
// holds none.
var payloads = sync.Pool{New: func() any { b := make([]byte, defaultFrameSize); return &b }}

// readFrame reads one frame's header into hdr and its payload into a buffer
// lent from payloads, to be given back with release. A frame longer than
// maxSize is a connection error.
func readFrame(r io.Reader, hdr *[headerLen]byte, maxSize uint32) (header, *[]byte, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return header{}, nil, err
	}
	h := header{
		length: uint32(hdr[0])<<16 | uint32(hdr[1])<<8 | uint32(hdr[2]),
		typ:    hdr[3],
		flags:  hdr[4],
		stream: binary.BigEndian.Uint32(hdr[5:]) & (1<<31 - 1),
	}
	if h.length > maxSize {
		return h, nil, connError{errFrameSize, fmt.Sprintf("%v: longer than the %d bytes allowed", h, maxSize)}
	}
	buf := payloads.Get().(*[]byte)
	*buf = (*buf)[:h.length]
	if _, err := io.ReadFull(r, *buf); err != nil {
		release(buf)
		return h, nil, err
	}
	return h, buf, nil
}

func release(b *[]byte) {
	if b != nil {
		*b = (*b)[:cap(*b)]
		payloads.Put(b)
	}
}

// connError is a connection error: the connection ends with a GOAWAY
// carrying code.
type connError struct {
	code uint32
	msg  string
}

func (e connError) Error() string { return fmt.Sprintf("http2 connection error %d: %s", e.code, e.msg) }

// appendFrameHeader appends a frame header for a payload of n bytes.
func appendFrameHeader(b []byte, typ, flags uint8, stream uint32, n int) []byte {
	return append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

// appendUint32Frame appends a frame whose payload is one 32-bit value:
// WINDOW_UPDATE and RST_STREAM.
func appendUint32Frame(b []byte, typ uint8, stream, v uint32) []byte {
	b = appendFrameHeader(b, typ, 0, stream, 4)
	return binary.BigEndian.AppendUint32(b, v)
}

// appendHeaderBlock appends block as a HEADERS frame followed by as many
// CONTINUATION frames as frames of maxFrame bytes need.
func appendHeaderBlock(b []byte, stream uint32, block []byte, endStream bool, maxFrame int) []byte {
	typ, flags := uint8(frameHeaders), uint8(0)
	if endStream {
		flags |= flagEndStream
	}
	for {
		n := min(len(block), maxFrame)
		f := flags
		if n == len(block) {
			f |= flagEndHeaders
		}
		b = appendFrameHeader(b, typ, f, stream, n)
		b = append(b, block[:n]...)
		block = block[n:]
		if len(block) == 0 {
			return b
		}
		typ, flags = frameContinuation, 0
	}
}

// appendSettings appends a SETTINGS frame with the given id/value pairs.
func appendSettings(b []byte, kv ...uint32) []byte {
	b = appendFrameHeader(b, frameSettings, 0, 0, len(kv)/2*6)
	for i := 0; i+1 < len(kv); i += 2 {
		b = binary.BigEndian.AppendUint16(b, uint16(kv[i]))
		b = binary.BigEndian.AppendUint32(b, kv[i+1])
	}
	return b
}

// appendGoAway appends a GOAWAY frame.
func appendGoAway(b []byte, last, code uint32, debug string) []byte {
	b = appendFrameHeader(b, frameGoAway, 0, 0, 8+len(debug))
	b = binary.BigEndian.AppendUint32(b, last)
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, debug...)
}

// unpad strips a padded frame's padding (DATA and HEADERS).
func unpad(h header, p []byte) ([]byte, error) {
	if !h.has(flagPadded) {
		return p, nil
	}
	if len(p) == 0 || int(p[0]) >= len(p) {
		return nil, connError{errProtocol, fmt.Sprintf("%v: padding longer than the frame", h)}
	}
	return p[1 : len(p)-int(p[0])], nil
}
