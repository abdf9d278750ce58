//go:build unix

package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/aion-run/aion/internal/store/sqlite"
)

// A database one Store holds is refused to every other Open, however it is
// reached and whatever it accepts, with an error naming the directory and
// the holding process; the refusal leaves the holder working and its files
// as they were, and once the holder closes the database opens again.
func TestSecondOpenOfADataDirectoryIsRefusedNamingTheHolder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// second returns the path the second Open is given for the
		// database at path, and its options.
		second func(t *testing.T, path string) (string, []sqlite.Option)
	}{
		{"same path", func(t *testing.T, path string) (string, []sqlite.Option) {
			return path, nil
		}},
		{"accepting data loss", func(t *testing.T, path string) (string, []sqlite.Option) {
			return path, []sqlite.Option{sqlite.WithAcceptDataLoss(true)}
		}},
		{"through a symlinked directory", func(t *testing.T, path string) (string, []sqlite.Option) {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(filepath.Dir(path), link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, filepath.Base(path)), nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "aion.db")
			first, err := sqlite.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { first.Close() }()
			schedule(t, first, 0, 10, 10)
			mark := fileBytes(t, sqlite.MarkPath(path))

			second, opts := tc.second(t, path)
			s, err := sqlite.Open(ctx, second, opts...)
			if err == nil {
				s.Close()
				t.Fatalf("second open of %s while the first is open: succeeded, want a refusal", second)
			}
			var locked *sqlite.LockedError
			if !errors.As(err, &locked) || !errors.Is(err, sqlite.ErrLocked) {
				t.Fatalf("second open: %v, want a *LockedError wrapping ErrLocked", err)
			}
			if want := filepath.Dir(second); locked.Dir != want || locked.PID != os.Getpid() {
				t.Fatalf("refusal names directory %q and pid %d, want %q and %d", locked.Dir, locked.PID, want, os.Getpid())
			}
			if msg := err.Error(); !strings.Contains(msg, strconv.Quote(locked.Dir)) || !strings.Contains(msg, "pid "+strconv.Itoa(os.Getpid())) {
				t.Fatalf("refusal %q does not name the directory and the pid", msg)
			}

			if after := fileBytes(t, sqlite.MarkPath(path)); !bytes.Equal(mark, after) {
				t.Fatal("the refused open changed the mark")
			}
			schedule(t, first, 10, 20, 10) // the holder goes on writing
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			reopened, err := sqlite.Open(ctx, second, opts...)
			if err != nil {
				t.Fatalf("open after the holder closed: %v", err)
			}
			defer reopened.Close()
			if n := countActivities(t, reopened); n != 20 {
				t.Fatalf("after reopening: %d activities, want the 20 the holder wrote", n)
			}
		})
	}
}

// The lock is the kernel's, not the file's: a lock file left behind by a
// process that died, with its pid still in it, holds nothing.
func TestLockFileLeftBehindHoldsNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aion.db")
	if err := os.WriteFile(sqlite.LockPath(path), []byte("999999999\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	if got := strings.TrimSpace(string(fileBytes(t, sqlite.LockPath(path)))); got != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q, want this process's pid %d", got, os.Getpid())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A holder whose pid cannot be read is refused all the same, saying so
// rather than naming pid 0.
func TestRefusalSaysWhenTheHoldersPIDCannotBeRead(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, content, says string
	}{
		{"empty lock file", "", "is empty"},
		{"no number", "aion\n", "not a process id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "aion.db")
			f, err := os.OpenFile(sqlite.LockPath(path), os.O_RDWR|os.O_CREATE, 0o640)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(tc.content); err != nil {
				t.Fatal(err)
			}
			s, err := sqlite.Open(context.Background(), path)
			if err == nil {
				s.Close()
				t.Fatal("open of a held database succeeded, want a refusal")
			}
			var locked *sqlite.LockedError
			if !errors.As(err, &locked) || locked.PID != 0 {
				t.Fatalf("open: %v, want a *LockedError without a pid", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "pid could not be read") || !strings.Contains(msg, tc.says) ||
				strings.Contains(msg, "pid 0") {
				t.Fatalf("refusal %q does not say why the pid is unknown (%q)", msg, tc.says)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the refused open created the database: %v", err)
			}
		})
	}
}
