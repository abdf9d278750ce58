package sqlite

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// The mark file sits beside the database and records, outside SQLite, that
// the database exists, which database it is, and how far it had got: the
// start compares the database with it. It is text, readable with cat: a
// header block written once (the identity), then two fixed blocks holding the
// counters, overwritten in turn so that one always holds a whole record even
// if the machine dies in the middle of a write.
const (
	markSuffix  = ".mark"
	markBlock   = 512
	markVersion = "aion-mark 1"
	// markSyncEvery is how often the counters are forced to disk. Between
	// syncs they sit in the operating system's page cache, which a killed
	// process does not lose; only an operating-system crash or power loss
	// can leave the file that far behind.
	markSyncEvery = time.Second
)

// MarkPath is the mark file that records the database at dbPath: the path
// with ".mark" appended.
func MarkPath(dbPath string) string { return dbPath + markSuffix }

// Counters count what a database has committed since it was created;
// Commits and Writes only grow.
type Counters struct {
	// Commits is the number of write transactions.
	Commits int64
	// Writes is the number of writes in them that changed something.
	Writes int64
	// Activities is the number of activities the database holds (inserted
	// and not yet reaped).
	Activities int64
}

// errMarkDamaged reports a mark file that does not parse.
var errMarkDamaged = errors.New("mark file is damaged")

// newIdentity returns a random database identity.
func newIdentity() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

func markHeader(id string) []byte {
	return pad(fmt.Sprintf("%s\nid %s\n", markVersion, id))
}

func markSlot(c Counters) []byte {
	line := fmt.Sprintf("commits %d writes %d activities %d", c.Commits, c.Writes, c.Activities)
	return pad(fmt.Sprintf("%s crc %08x\n", line, crc32.ChecksumIEEE([]byte(line))))
}

// pad fills s to a whole block with spaces, ending in a newline.
func pad(s string) []byte {
	b := bytes.Repeat([]byte{' '}, markBlock)
	copy(b, s)
	b[markBlock-1] = '\n'
	return b
}

// readMark returns the identity and the higher of the two counter records of
// the mark file at path. A missing file is an error wrapping os.ErrNotExist;
// one that does not parse wraps errMarkDamaged.
func readMark(path string) (string, Counters, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", Counters{}, err
	}
	if len(raw) != 3*markBlock {
		return "", Counters{}, fmt.Errorf("%w: %d bytes, want %d", errMarkDamaged, len(raw), 3*markBlock)
	}
	header := strings.Fields(string(raw[:markBlock]))
	if len(header) != 4 || header[0]+" "+header[1] != markVersion || header[2] != "id" || len(header[3]) != 32 {
		return "", Counters{}, fmt.Errorf("%w: header %q", errMarkDamaged, bytes.TrimRight(raw[:markBlock], " \n"))
	}
	id := header[3]
	var best Counters
	found := false
	for i := 1; i <= 2; i++ {
		c, ok := parseSlot(raw[i*markBlock : (i+1)*markBlock])
		if ok && (!found || c.Commits > best.Commits) {
			best, found = c, true
		}
	}
	if !found {
		return "", Counters{}, fmt.Errorf("%w: no whole counter record", errMarkDamaged)
	}
	return id, best, nil
}

func parseSlot(b []byte) (Counters, bool) {
	var c Counters
	var crc uint32
	if _, err := fmt.Sscanf(string(b), "commits %d writes %d activities %d crc %x", &c.Commits, &c.Writes, &c.Activities, &crc); err != nil {
		return Counters{}, false
	}
	line := fmt.Sprintf("commits %d writes %d activities %d", c.Commits, c.Writes, c.Activities)
	return c, crc32.ChecksumIEEE([]byte(line)) == crc && c.Commits >= 0 && c.Writes >= 0 && c.Activities >= 0
}

// mark is an open mark file that follows the database's counters.
type mark struct {
	path string
	f    *os.File

	mu    sync.Mutex
	last  Counters
	slot  int // the block the next record goes to: 1 or 2
	dirty bool
	err   error // the first failed write or sync

	// notify, when set, is called after every advance, outside the lock:
	// each commit advances the mark, so the checkpointer hears of it. It
	// must not block.
	notify func()

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// createMark writes a new mark file at path durably (a temporary file,
// synced, renamed over path, and the directory synced) and opens it.
func createMark(path, id string, c Counters) (*mark, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, fmt.Errorf("create mark %q: %w", path, err)
	}
	content := slices.Concat(markHeader(id), markSlot(c), markSlot(c))
	_, werr := f.Write(content)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("create mark %q: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("create mark %q: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("create mark %q: %w", path, err)
	}
	return openMark(path, c)
}

// openMark opens the existing mark file at path, whose higher record is c.
func openMark(path string, c Counters) (*mark, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open mark %q: %w", path, err)
	}
	m := &mark{path: path, f: f, last: c, slot: 1, stop: make(chan struct{}), done: make(chan struct{})}
	go m.syncLoop()
	return m, nil
}

// advance records c if it is ahead of what the file holds. It writes to the
// page cache only; syncLoop and close force it to disk.
func (m *mark) advance(c Counters) {
	if m.notify != nil {
		defer m.notify()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.Commits <= m.last.Commits {
		return
	}
	if _, err := m.f.WriteAt(markSlot(c), int64(m.slot*markBlock)); err != nil {
		if m.err == nil {
			m.err = fmt.Errorf("write mark %q: %w", m.path, err)
		}
		return
	}
	m.last = c
	m.slot = 3 - m.slot
	m.dirty = true
}

func (m *mark) syncLoop() {
	defer close(m.done)
	t := time.NewTicker(markSyncEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.sync()
		}
	}
}

func (m *mark) sync() {
	m.mu.Lock()
	dirty := m.dirty
	m.dirty = false
	m.mu.Unlock()
	if !dirty {
		return
	}
	if err := m.f.Sync(); err != nil {
		m.mu.Lock()
		if m.err == nil {
			m.err = fmt.Errorf("sync mark %q: %w", m.path, err)
		}
		m.mu.Unlock()
	}
}

// close syncs the last record and closes the file; it reports the first
// write or sync that failed while the mark was open.
func (m *mark) close() error {
	m.closeOnce.Do(func() {
		close(m.stop)
		<-m.done
		m.sync()
		cerr := m.f.Close()
		m.mu.Lock()
		defer m.mu.Unlock()
		m.closeErr = errors.Join(m.err, cerr)
	})
	return m.closeErr
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
