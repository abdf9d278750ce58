package attack

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

func TestOnlyLoopbackAddressesAreTargets(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:50051": true, "[::1]:8080": true, "127.0.0.2:1": true,
		"0.0.0.0:50051": false, "[::]:1": false, "10.0.0.1:50051": false, "example.com:80": false,
		"localhost:1": false, // a name is resolved elsewhere; the server logs an IP
		"127.0.0.1":   false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestChildEnvironmentHasNoAionSettings(t *testing.T) {
	t.Parallel()
	got := childEnv([]string{"PATH=/bin", "AION_GRPC_ADDR=0.0.0.0:50051", "AION_AUTH=none", "HOME=/root", "XAION=1"})
	if want := []string{"PATH=/bin", "HOME=/root", "XAION=1"}; !slices.Equal(got, want) {
		t.Fatalf("childEnv = %q, want %q", got, want)
	}
}

func TestUndecidedPreambleIsThePrefaceSettingsAndPriorityFramesOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bytes, frames int
	}{{14, 1}, {1, 1}, {4 << 10, 292}, {120 << 10, 8777}} {
		b, n := undecidedPreamble(tc.bytes)
		if n != tc.frames || len(b) != len(http2.ClientPreface)+9+n*priorityFrameSize {
			t.Errorf("%d bytes: %d frames in %d bytes, want %d frames", tc.bytes, n, len(b), tc.frames)
		}
		if !bytes.HasPrefix(b, []byte(http2.ClientPreface)) {
			t.Fatalf("%d bytes: no client preface", tc.bytes)
		}
		fr := http2.NewFramer(nil, bytes.NewReader(b[len(http2.ClientPreface):]))
		var got []http2.FrameType
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("%d bytes: %v", tc.bytes, err)
				}
				break
			}
			got = append(got, f.Header().Type)
		}
		if len(got) != n+1 || got[0] != http2.FrameSettings || slices.ContainsFunc(got[1:], func(t http2.FrameType) bool { return t != http2.FramePriority }) {
			t.Errorf("%d bytes: frames %v, want SETTINGS then %d PRIORITY", tc.bytes, got, n)
		}
	}
}

func TestGRPCMessagePromisesMoreThanItCarries(t *testing.T) {
	t.Parallel()
	b := grpcMessage(1024, 16)
	if len(b) != 5+16 || b[0] != 0 || binary.BigEndian.Uint32(b[1:5]) != 1024 {
		t.Fatalf("grpcMessage(1024, 16) = %x: want an uncompressed prefix of 1024 and 16 bytes", b)
	}
}

// TestHonestTenantCutShortReportsWhatRanAndEnds starts a server and the
// honest tenant's process as Run does, starts a long load, and closes the
// child's stdin a second in, as Run does when interrupted: the child
// reports the operations it offered and ends of its own accord.
func TestHonestTenantCutShortReportsWhatRanAndEnds(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o := Defaults()
	o.Command, o.Env = []string{exe}, []string{"ATTACK_TEST_RUN_AION=1"}
	srv, err := startChild(o)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop(10 * time.Second)
	h, err := startHonest(context.Background(), o, srv)
	if err != nil {
		t.Fatal(err)
	}
	defer h.stop(10 * time.Second)
	if err := h.begin(time.Hour); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	cut := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // as an interrupted run: the child's stdin is closed at once
	r, err := h.figures(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r.Offered == 0 || r.Offered < r.Completed+r.Errors || r.Rate != o.Rate {
		t.Errorf("figures %+v: want the operations offered in the second it ran, at rate %v", r, o.Rate)
	}
	if err := h.stop(10 * time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	// Its last operations were cut off, not waited for: HonestTimeout (10 s)
	// is far more than the child takes to end.
	if took := time.Since(cut); took > 8*time.Second {
		t.Errorf("the child took %v to report and end after its stdin closed", took)
	}
}
