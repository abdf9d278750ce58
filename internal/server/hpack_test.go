package server_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// TestServerAsksCallersToKeepNoHeaderTable reads the HTTP/2 settings the
// gRPC port opens a connection with: a header table size of 0, so a
// connection keeps none of its callers' headers (the bearer token among
// them) for its life.
func TestServerAsksCallersToKeepNoHeaderTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := net.Dial("tcp", b.srv.GRPCAddr())
	if err != nil {
		t.Fatalf("dial the gRPC port: %v", err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The server writes its SETTINGS frame first: a 9-byte header (24-bit
	// length, type 4, flags, stream 0), then 6-byte settings.
	r := bufio.NewReader(c)
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatalf("read the first frame's header: %v", err)
	}
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	if h[3] != 4 || n%6 != 0 {
		t.Fatalf("first frame: type %d, %d bytes; want SETTINGS (4) of 6-byte entries", h[3], n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatalf("read the settings: %v", err)
	}
	const headerTableSize = 0x1
	for i := 0; i < n; i += 6 {
		if binary.BigEndian.Uint16(body[i:]) == headerTableSize {
			if v := binary.BigEndian.Uint32(body[i+2:]); v != 0 {
				t.Fatalf("SETTINGS_HEADER_TABLE_SIZE = %d; want 0", v)
			}
			return
		}
	}
	t.Fatalf("settings % x: no SETTINGS_HEADER_TABLE_SIZE; want one of 0 (the default is 4096)", body)
}
