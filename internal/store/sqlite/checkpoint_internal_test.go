package sqlite

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// walIndex trusts only a whole header: two equal copies, the version SQLite
// writes, marked initialised.
func TestWALIndexTrustsOnlyAWholeHeader(t *testing.T) {
	t.Parallel()
	header := func(frames uint32) []byte {
		h := make([]byte, 48)
		binary.NativeEndian.PutUint32(h[0:], 3007000)
		h[12] = 1
		binary.NativeEndian.PutUint16(h[14:], 4096)
		binary.NativeEndian.PutUint32(h[16:], frames)
		return h
	}
	index := func(first, second []byte, copied uint32) []byte {
		b := append(append([]byte{}, first...), second...)
		return binary.NativeEndian.AppendUint32(b, copied)
	}
	uninitialised := header(10)
	uninitialised[12] = 0
	otherVersion := header(10)
	binary.NativeEndian.PutUint32(otherVersion[0:], 3007001)
	cases := []struct {
		name           string
		content        []byte
		frames, copied uint32
		ok             bool
	}{
		{"whole", index(header(10), header(10), 4), 10, 4, true},
		{"torn between the copies", index(header(11), header(10), 4), 0, 0, false},
		{"not initialised", index(uninitialised, uninitialised, 0), 0, 0, false},
		{"another version", index(otherVersion, otherVersion, 0), 0, 0, false},
		{"too short", index(header(10), header(10), 4)[:60], 0, 0, false},
		{"copied past the end", index(header(10), header(10), 12), 10, 10, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "aion.db-shm")
			if err := os.WriteFile(path, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			frames, copied, ok := (&checkpointer{shm: f}).walIndex()
			if frames != tc.frames || copied != tc.copied || ok != tc.ok {
				t.Fatalf("got %d frames, %d copied, ok %v; want %d, %d, %v", frames, copied, ok, tc.frames, tc.copied, tc.ok)
			}
		})
	}
	frames, copied, ok := (&checkpointer{}).walIndex()
	if ok || frames != 0 || copied != 0 {
		t.Fatalf("without an index: %d, %d, %v; want nothing", frames, copied, ok)
	}
}
