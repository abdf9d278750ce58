package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/aion-run/aion/internal/store/sqlite"
)

func TestCommitsRunWithTheSynchronousModeAskedFor(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts []sqlite.Option
		want string
	}{
		{"default", nil, "full"},
		{"full", []sqlite.Option{sqlite.WithSynchronous("full")}, "full"},
		{"normal", []sqlite.Option{sqlite.WithSynchronous("normal")}, "normal"},
		// Settings are checked by server.Config.Validate; a mode the store
		// does not offer can never lower durability below full.
		{"off is not offered", []sqlite.Option{sqlite.WithSynchronous("off")}, "full"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "aion.db"), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			// Read back after writes too: the mode belongs to the connection
			// the writes commit on, not to the file.
			for i := range 2 {
				got, err := s.Synchronous(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Fatalf("read back %d: synchronous=%s, want %s", i, got, tc.want)
				}
				schedule(t, s, i*10, i*10+10, 5)
			}
		})
	}
}
