package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockSuffix names the lock file beside the database. It is named after the
// database, as the mark is, so two databases in one directory do not
// exclude each other; the server keeps one, aion.db, per data directory.
const lockSuffix = ".lock"

// LockPath is the lock file that guards the database at dbPath: the path
// with ".lock" appended. While a Store is open it holds an exclusive lock on
// the file, which names the holder's process id; the file left behind after
// the Store closes or its process dies holds nothing.
func LockPath(dbPath string) string { return dbPath + lockSuffix }

// ErrLocked reports a database that another open Store holds, in another
// process or in this one. Open refuses it: two stores on one database would
// each dispatch the same work.
var ErrLocked = errors.New("data directory is in use")

// LockedError is Open's refusal of a database another Store holds. It names
// the directory and the process holding it, and wraps ErrLocked.
type LockedError struct {
	// Dir is the directory holding the database, made absolute when it can be.
	Dir string
	// PID is the holding process's id; 0 when it could not be read.
	PID int
	// Unread says why PID could not be read; empty when PID is set.
	Unread string
}

func (e *LockedError) Error() string {
	switch {
	case e.PID == 0:
		return fmt.Sprintf("data directory %q is in use by another aion process (its pid could not be read: %s)", e.Dir, e.Unread)
	case e.PID == os.Getpid():
		return fmt.Sprintf("data directory %q is in use by this process (pid %d): a store on it is still open", e.Dir, e.PID)
	}
	return fmt.Sprintf("data directory %q is in use by another aion process (pid %d)", e.Dir, e.PID)
}

// Unwrap returns ErrLocked.
func (e *LockedError) Unwrap() error { return ErrLocked }

// errHeld is what lockFile returns when another open file holds the lock.
var errHeld = errors.New("lock is held")

// acquireLock takes the lock guarding the database at dbPath for this process,
// refusing with a *LockedError when another Store holds it. It returns nil
// where the platform has no lock (see lock_other.go).
func acquireLock(dbPath string) (*os.File, error) {
	path := LockPath(dbPath)
	f, err := lockFile(path)
	if errors.Is(err, errHeld) {
		dir, aerr := filepath.Abs(filepath.Dir(dbPath))
		if aerr != nil {
			dir = filepath.Dir(dbPath)
		}
		e := &LockedError{Dir: dir}
		e.PID, e.Unread = holder(path)
		return nil, e
	}
	if err != nil {
		return nil, fmt.Errorf("lock %q: %w", path, err)
	}
	return f, nil
}

// holder reads the process id the holder of the lock file wrote, or says
// why it cannot.
func holder(path string) (int, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err.Error()
	}
	text := strings.TrimSpace(string(b))
	if text == "" {
		return 0, fmt.Sprintf("%q is empty", path)
	}
	pid, err := strconv.Atoi(text)
	if err != nil || pid <= 0 {
		return 0, fmt.Sprintf("%q holds %q, not a process id", path, text)
	}
	return pid, ""
}

// unlock releases the lock taken by acquireLock, if any, once.
func (s *Store) unlock() error {
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close()
	s.lock = nil
	return err
}
