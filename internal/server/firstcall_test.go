package server

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
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
				got := scanPending
				for rest := b; len(rest) > 0 && got == scanPending; {
					n := min(step, len(rest))
					got = s.feed(rest[:n])
					rest = rest[n:]
				}
				if got != tc.want {
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
		s := &frameScan{limit: limit}
		got := scanPending
		n := max(int(step), 1)
		for rest := frames; len(rest) > 0 && got == scanPending; {
			k := min(n, len(rest))
			got = s.feed(rest[:k])
			rest = rest[k:]
		}
		if got != want {
			t.Fatalf("fed %d bytes at a time: %v, x/net/http2's frame headers say %v", n, got, want)
		}
	})
}
