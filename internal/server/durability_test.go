package server_test

import (
	"context"
	"testing"

	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// The synchronous mode is read back from the running server's own store: the
// connection its commits run on, not a fresh one opened with defaults.
func TestServerCommitsWithTheConfiguredSynchronousMode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		sync string
		want string
	}{
		{"defaults", server.Defaults().SQLiteSync, "full"},
		{"unset", "", "full"},
		{"full", "full", "full"},
		{"normal", "normal", "normal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *server.Config) { c.SQLiteSync = tc.sync })
			st, ok := server.StoreOf(b.srv).(*sqlite.Store)
			if !ok {
				t.Fatalf("store of a server without --store is %T, want *sqlite.Store", server.StoreOf(b.srv))
			}
			got, err := st.Synchronous(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("SQLiteSync %q: the server commits with synchronous=%s, want %s", tc.sync, got, tc.want)
			}
		})
	}
}
