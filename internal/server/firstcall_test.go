package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/aion-run/aion/internal/clock"
)

// clientBytes is what a client writes: the preface, then frames written by
// x/net/http2's Framer.
func clientBytes(t testing.TB, write func(fr *http2.Framer)) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	write(http2.NewFramer(&b, nil))
	return b.Bytes()
}

// scanResult is what a frameScan found in a client's bytes.
type scanResult int

const (
	scanPending scanResult = iota // no call yet, within the limit
	scanCall                      // a HEADERS frame: the first call
	scanOver                      // the frames before any call passed the limit
)

// scanInPieces feeds b to s step bytes at a time until it finds a call or
// the limit is passed.
func scanInPieces(s *frameScan, b []byte, step int) scanResult {
	for rest := b; len(rest) > 0; {
		n := min(step, len(rest))
		if _, over := s.feed(rest[:n]); over {
			return scanOver
		}
		if s.called {
			return scanCall
		}
		rest = rest[n:]
	}
	return scanPending
}

func TestFrameScanFindsTheFirstCallAndBoundsWhatComesBefore(t *testing.T) {
	t.Parallel()
	headers := func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x83}, EndHeaders: true})
	}
	priorities := func(n int) func(fr *http2.Framer) {
		return func(fr *http2.Framer) {
			for range n {
				_ = fr.WritePriority(1, http2.PriorityParam{Weight: 15})
			}
		}
	}
	cases := []struct {
		name  string
		write func(fr *http2.Framer)
		want  scanResult
	}{
		{"a client's opening and its first call", func(fr *http2.Framer) {
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
			_ = fr.WriteWindowUpdate(0, 1<<20)
			_ = fr.WriteSettingsAck()
			headers(fr)
		}, scanCall},
		{"a payload holding a HEADERS frame's bytes is skipped", func(fr *http2.Framer) {
			_ = fr.WriteSettings()
			_ = fr.WriteRawFrame(http2.FrameType(0xfe), 0, 0, clientBytes(t, headers)[len(http2.ClientPreface):])
			_ = fr.WriteData(1, false, []byte{0, 0, 4, 1, 4, 0, 0, 0, 1})
		}, scanPending},
		{"frames up to the limit", priorities(maxBeforeFirstCall / 14), scanPending},
		{"one frame past the limit", priorities(maxBeforeFirstCall/14 + 1), scanOver},
		{"PINGs are not counted", func(fr *http2.Framer) {
			for range 4 * maxBeforeFirstCall / 17 {
				_ = fr.WritePing(false, [8]byte{})
			}
			headers(fr)
		}, scanCall},
		{"a large frame past the limit", func(fr *http2.Framer) {
			_ = fr.WriteRawFrame(http2.FrameType(0xfe), 0, 0, make([]byte, maxBeforeFirstCall))
		}, scanOver},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := clientBytes(t, tc.write)
			for _, step := range []int{len(b), 1, 7, 9, 4096} {
				s := &frameScan{preface: len(http2.ClientPreface), limit: maxBeforeFirstCall}
				if got := scanInPieces(s, b, step); got != tc.want {
					t.Fatalf("fed %d bytes at a time: %v, want %v", step, got, tc.want)
				}
			}
		})
	}
}

// FuzzFrameScan holds frameScan to x/net/http2's own parser: for any bytes
// after the preface, fed in any pieces, it finds a call exactly when the
// Framer reads a HEADERS frame before the frames ahead of it pass the limit,
// and refuses exactly when they pass it first.
func FuzzFrameScan(f *testing.F) {
	f.Add(clientBytes(f, func(fr *http2.Framer) {
		_ = fr.WriteSettings()
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x83}, EndHeaders: true})
	})[len(http2.ClientPreface):], uint8(3))
	f.Add(clientBytes(f, func(fr *http2.Framer) {
		for range 40 {
			_ = fr.WritePriority(1, http2.PriorityParam{Weight: 1})
		}
	})[len(http2.ClientPreface):], uint8(1))
	f.Fuzz(func(t *testing.T, frames []byte, step uint8) {
		const limit = 256
		want := scanPending
		// The reference: walk the frames by their headers as the Framer
		// reads them.
		rest := frames
		counted := 0
		for len(rest) >= 9 {
			fh, err := http2.ReadFrameHeader(bytes.NewReader(rest))
			if err != nil {
				break
			}
			if fh.Type == http2.FrameHeaders {
				want = scanCall
				break
			}
			if fh.Type != http2.FramePing {
				counted += 9 + int(fh.Length)
				if counted > limit {
					want = scanOver
					break
				}
			}
			if len(rest) < 9+int(fh.Length) {
				break
			}
			rest = rest[9+int(fh.Length):]
		}
		n := max(int(step), 1)
		if got := scanInPieces(&frameScan{limit: limit}, frames, n); got != want {
			t.Fatalf("fed %d bytes at a time: %v, x/net/http2's frame headers say %v", n, got, want)
		}
	})
}

// TestNewCallsPastTheRateWaitForItBeforeTheTransportSeesThem opens a
// burst's worth of calls and then more on one connection: the burst is
// read at once, the next call only once the clock has moved on by the
// time the rate takes to make up for it.
func TestNewCallsPastTheRateWaitForItBeforeTheTransportSeesThem(t *testing.T) {
	t.Parallel()
	const rate = 100
	calls := func(from, n int) []byte {
		var b bytes.Buffer
		fr := http2.NewFramer(&b, nil)
		for i := range n {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*(from+i) + 1), BlockFragment: []byte{0x83}, EndHeaders: true})
		}
		return b.Bytes()
	}
	client, srv := net.Pipe()
	t.Cleanup(func() { client.Close() })
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	creds := guardedCreds{TransportCredentials: insecure.NewCredentials(), rate: rate, clock: fake}
	conn, _, err := creds.ServerHandshake(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	burst := append([]byte(http2.ClientPreface), calls(0, streamBurst)...)
	go func() {
		_, _ = client.Write(burst)
		_, _ = client.Write(calls(streamBurst, 10)) // ten past the burst
	}()
	if _, err := io.ReadFull(conn, make([]byte, len(burst))); err != nil {
		t.Fatalf("reading the burst: %v", err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(conn, make([]byte, len(calls(streamBurst, 10))))
		read <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fake.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("ten calls past the burst did not wait for the rate: %v", err)
	}
	select {
	case err := <-read:
		t.Fatalf("the calls past the burst were read before the clock moved: %v", err)
	default:
	}
	fake.Advance(10 * time.Second / rate)
	if err := <-read; err != nil {
		t.Fatalf("after the rate made up for them: %v", err)
	}
}

// TestCloseEndsAWaitForTheRate closes a connection whose reader waits for
// its rate: the read returns at once.
func TestCloseEndsAWaitForTheRate(t *testing.T) {
	t.Parallel()
	client, srv := net.Pipe()
	t.Cleanup(func() { client.Close() })
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	conn, _, err := guardedCreds{TransportCredentials: insecure.NewCredentials(), rate: 1, clock: fake}.ServerHandshake(srv)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	for i := range streamBurst + 5 {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: []byte{0x83}, EndHeaders: true})
	}
	go func() { _, _ = client.Write(b.Bytes()) }()
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(conn, make([]byte, b.Len()))
		read <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fake.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("the reader did not wait for the rate: %v", err)
	}
	conn.Close()
	if err := <-read; err == nil {
		t.Fatal("a read of a closed connection succeeded")
	}
}
