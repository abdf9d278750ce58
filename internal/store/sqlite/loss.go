package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// ErrDataLoss reports a database that is missing, empty, not the one that
// was here, or behind what its mark file records: work it acknowledged has
// vanished. Open refuses such a database unless WithAcceptDataLoss is given.
var ErrDataLoss = errors.New("acknowledged data is missing")

// LossError says how a database differs from what its mark file records. It
// wraps ErrDataLoss.
type LossError struct {
	// Path is the database file.
	Path string
	// Problem says what is wrong, as the rest of a sentence about Path.
	Problem string
	// Recorded are the counters the mark file holds; Found are those of the
	// database, zero when it is missing, empty or another database.
	Recorded, Found Counters
	// gone: the file is missing or empty, so whatever write-ahead log is
	// left belongs to a database that is no longer there.
	gone bool
}

// Lost is what the mark records beyond what the database holds: the
// acknowledged work that is gone, as far as can be told.
func (e *LossError) Lost() Counters {
	if e.Found.Commits >= e.Recorded.Commits {
		return Counters{}
	}
	return Counters{
		Commits:    e.Recorded.Commits - e.Found.Commits,
		Writes:     max(0, e.Recorded.Writes-e.Found.Writes),
		Activities: max(0, e.Recorded.Activities-e.Found.Activities),
	}
}

func (e *LossError) Error() string {
	s := fmt.Sprintf("database %q %s", e.Path, e.Problem)
	if l := e.Lost(); l.Commits > 0 {
		s += fmt.Sprintf(": %d acknowledged commits (%d writes, %d activities) are gone", l.Commits, l.Writes, l.Activities)
	}
	return s
}

// Unwrap returns ErrDataLoss.
func (e *LossError) Unwrap() error { return ErrDataLoss }

// check compares the database at path with its mark file before anything
// writes to either. It returns the mark's identity and counters (id empty
// when there is no mark: a new data directory, or one written before marks
// existed), and a *LossError when the database is not what the mark records.
func check(ctx context.Context, path string) (string, Counters, *LossError, error) {
	markPath := MarkPath(path)
	id, recorded, err := readMark(markPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", Counters{}, nil, nil
	case errors.Is(err, errMarkDamaged):
		return "", Counters{}, &LossError{Path: path,
			Problem: fmt.Sprintf("cannot be checked: its mark %q is damaged (%v)", markPath, err)}, nil
	case err != nil:
		return "", Counters{}, nil, fmt.Errorf("read mark %q: %w", markPath, err)
	}
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return id, recorded, &LossError{Path: path, Recorded: recorded, gone: true,
			Problem: fmt.Sprintf("is missing, though its mark %q records it", markPath)}, nil
	case err != nil:
		return "", Counters{}, nil, fmt.Errorf("stat %q: %w", path, err)
	case info.Size() == 0:
		return id, recorded, &LossError{Path: path, Recorded: recorded, gone: true,
			Problem: fmt.Sprintf("is empty (0 bytes), though its mark %q records it", markPath)}, nil
	}
	foundID, found, err := inspect(ctx, path)
	if err != nil {
		return "", Counters{}, nil, err
	}
	switch {
	case foundID == "":
		return id, recorded, &LossError{Path: path, Recorded: recorded,
			Problem: fmt.Sprintf("has no identity, though its mark %q records one: it is another database, or its write-ahead log %q, which held its beginning, was cut short or lost",
				markPath, path+"-wal")}, nil
	case foundID != id:
		return id, recorded, &LossError{Path: path, Recorded: recorded,
			Problem: fmt.Sprintf("is database %s, not %s that its mark %q records", foundID, id, markPath)}, nil
	case found.Commits < recorded.Commits:
		return id, recorded, &LossError{Path: path, Recorded: recorded, Found: found,
			Problem: fmt.Sprintf("is behind its mark %q (its write-ahead log %q was cut short or lost, or the file was replaced by an older copy)",
				markPath, path+"-wal")}, nil
	}
	return id, recorded, nil, nil
}

// inspect reads the identity and counters of the database at path on a
// read-only connection, which recovers the write-ahead log as any opening
// does but neither writes nor checkpoints it, so a refused database is left
// as it was found. A database without the meta table has an empty identity.
func inspect(ctx context.Context, path string) (string, Counters, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return "", Counters{}, fmt.Errorf("inspect %q: %w", path, err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'meta'`).Scan(&tables); err != nil {
		return "", Counters{}, fmt.Errorf("inspect %q: %w", path, err)
	}
	if tables == 0 {
		return "", Counters{}, nil
	}
	id, c, err := readMeta(ctx, db)
	if errors.Is(err, sql.ErrNoRows) {
		return "", Counters{}, nil
	}
	if err != nil {
		return "", Counters{}, fmt.Errorf("inspect %q: %w", path, err)
	}
	return id, c, nil
}

func readMeta(ctx context.Context, q queryer) (string, Counters, error) {
	var id string
	var c Counters
	err := q.QueryRowContext(ctx, `SELECT identity, commits, writes, activities FROM meta WHERE id = 1`).
		Scan(&id, &c.Commits, &c.Writes, &c.Activities)
	return id, c, err
}

// setAside renames a leftover write-ahead log and shared-memory file of a
// database that is gone, so SQLite does not replay them onto the new one.
func setAside(path string) error {
	stamp := time.Now().UTC().Format("20060102T150405Z")
	for _, suffix := range []string{"-wal", "-shm"} {
		err := os.Rename(path+suffix, path+suffix+".lost-"+stamp)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("set aside %q: %w", path+suffix, err)
		}
	}
	return nil
}
