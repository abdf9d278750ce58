package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/aion-run/aion/internal/clock"
)

// Checkpoints run beside the commits, not inside them. SQLite's own
// autocheckpoint runs inside whichever commit takes the write-ahead log past
// its threshold, so one commit, however small, waits while everyone's pages
// are copied into the database file. The writer turns it off
// (wal_autocheckpoint=0) and a checkpointer owned by the Store does the
// copying on a connection of its own:
//
//   - Every commit signals it (mark.notify, a send that never waits). When
//     the log holds at least frames pages not yet copied, it runs a PASSIVE
//     checkpoint, which takes no lock a commit needs and waits for no one.
//   - A PASSIVE checkpoint copies only what no reader still needs, and the
//     log restarts from its beginning only once all of it is copied and no
//     reader is inside it. Readers that keep overlapping can put that off
//     indefinitely, so past maxWAL bytes the checkpointer escalates to a
//     TRUNCATE checkpoint: it holds the write lock, lets the readers in the
//     log finish (at most wait), and cuts the file to zero. Commits wait
//     meanwhile, which is why it is the exception: one that cannot finish is
//     retried only after backoff.
//
// The checkpointer's connection has the writer's synchronous mode, so a
// checkpoint syncs the log before copying from it and the database file
// before the log is reused: what it moves is never only in the page cache.
//
// Loss detection (loss.go) is unchanged by when checkpoints run: a
// checkpoint copies whole commits, the meta row's counters with them, so the
// counters Open reads always belong to the state it finds, and what a log cut
// short or deleted takes away is only what was not yet copied. The
// checkpointer starts after Open has checked the database against its mark,
// so a refused database is left as it was found.
const (
	// defaultCheckpointFrames is SQLite's own autocheckpoint threshold.
	defaultCheckpointFrames = 1000
	// defaultMaxWAL bounds the log's file when readers keep PASSIVE
	// checkpoints from finishing.
	defaultMaxWAL = 64 << 20
	// defaultEscalateWait is the longest a TRUNCATE checkpoint waits for the
	// commit and the readers in its way; commits wait while it waits for
	// readers.
	defaultEscalateWait = 250 * time.Millisecond
	// defaultEscalateBackoff spaces TRUNCATE checkpoints that could not
	// finish, so a long reader holds commits back at most once per period.
	defaultEscalateBackoff = 5 * time.Second
	// checkpointCacheKiB is the page cache of the checkpointer's connection:
	// a checkpoint copies pages through a buffer of its own, not the cache.
	checkpointCacheKiB = 256
)

// checkpointOptions set the checkpointer; zero fields take the defaults.
type checkpointOptions struct {
	frames  uint32        // pages in the log not yet copied that start a PASSIVE checkpoint
	maxWAL  int64         // size of the log's file past which a TRUNCATE checkpoint runs
	wait    time.Duration // the longest a TRUNCATE checkpoint waits for locks
	backoff time.Duration // after a TRUNCATE that could not finish, the pause before the next
	clock   clock.Clock
	// hook, for tests, is called before every checkpoint with its mode.
	hook func(ctx context.Context, mode string)
}

func (o checkpointOptions) withDefaults() checkpointOptions {
	if o.frames == 0 {
		o.frames = defaultCheckpointFrames
	}
	if o.maxWAL <= 0 {
		o.maxWAL = defaultMaxWAL
	}
	if o.wait <= 0 {
		o.wait = defaultEscalateWait
	}
	if o.backoff <= 0 {
		o.backoff = defaultEscalateBackoff
	}
	if o.clock == nil {
		o.clock = clock.Real()
	}
	return o
}

// checkpointStats count what the checkpointer has done.
type checkpointStats struct {
	// Passive counts PASSIVE checkpoints run; Truncate the TRUNCATE ones
	// tried and Truncated those that finished.
	Passive, Truncate, Truncated int
	// Err is the last checkpoint that failed, other than by stopping.
	Err error
}

// checkpointer copies the write-ahead log into the database file on its own
// connection, prompted by commits; see the comment at the top of this file.
type checkpointer struct {
	opts    checkpointOptions
	db      *sql.DB
	conn    *sql.Conn // held for the checkpointer's life: its busy timeout is set once
	walPath string
	// shm is the log's shared-memory index, read to learn how much of the
	// log is not yet copied. It stays open until every SQLite connection of
	// the store is closed: closing any descriptor of a file drops all the
	// process's POSIX locks on it, SQLite's included.
	shm *os.File

	wake   chan struct{}      // capacity 1: signals sent while one waits are merged
	settle chan chan struct{} // tests: wait until every signal so far is handled
	cancel context.CancelFunc
	done   chan struct{}

	stopOnce sync.Once
	stopErr  error

	retryAt time.Time // run's own: no TRUNCATE before it

	mu    sync.Mutex
	stats checkpointStats
}

// startCheckpointer opens the checkpointer's connection with dsn, starts it,
// and has every commit the mark records signal it. Open calls it once the
// schema and the mark are in place.
func (s *Store) startCheckpointer(ctx context.Context, dsn string, opts checkpointOptions) error {
	opts = opts.withDefaults()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("start checkpointer: %w", err)
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err == nil {
		// PRAGMA takes no bind parameters; the value is an integer we control.
		_, err = conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, max(1, opts.wait.Milliseconds())))
		if err != nil {
			conn.Close()
		}
	}
	if err != nil {
		db.Close()
		return fmt.Errorf("start checkpointer: %w", err)
	}
	// Without the index every signal runs a PASSIVE checkpoint: more
	// copying, never less.
	shm, _ := os.Open(s.path + "-shm")
	runCtx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{
		opts: opts, db: db, conn: conn, walPath: s.path + "-wal", shm: shm,
		wake: make(chan struct{}, 1), settle: make(chan chan struct{}),
		cancel: cancel, done: make(chan struct{}),
	}
	go c.run(runCtx)
	c.kick() // the log Open found, or that the migrations wrote
	s.ckpt = c
	s.mark.notify = c.kick
	return nil
}

// kick tells the checkpointer a commit wrote to the log. It never waits.
func (c *checkpointer) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run(ctx context.Context) {
	defer close(c.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
			c.step(ctx)
		case reply := <-c.settle:
			select {
			case <-c.wake:
				c.step(ctx)
			default:
			}
			close(reply)
		}
	}
}

// step checkpoints as much as the log calls for.
func (c *checkpointer) step(ctx context.Context) {
	if frames, copied, ok := c.walIndex(); !ok || frames >= copied+c.opts.frames {
		c.checkpoint(ctx, "PASSIVE")
	}
	if c.walSize() <= c.opts.maxWAL {
		return
	}
	if now := c.opts.clock.Now(); !now.Before(c.retryAt) && !c.checkpoint(ctx, "TRUNCATE") {
		c.retryAt = now.Add(c.opts.backoff)
	}
}

// checkpoint runs one checkpoint of mode and reports whether it finished:
// every frame copied, and for TRUNCATE the log cut to zero.
func (c *checkpointer) checkpoint(ctx context.Context, mode string) bool {
	if ctx.Err() != nil {
		return false
	}
	if c.opts.hook != nil {
		if c.opts.hook(ctx, mode); ctx.Err() != nil {
			return false
		}
	}
	var busy, frames, copied int
	// mode is one of two constants; PRAGMA takes no bind parameters.
	err := c.conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(`+mode+`)`).Scan(&busy, &frames, &copied)
	c.mu.Lock()
	defer c.mu.Unlock()
	if mode == "PASSIVE" {
		c.stats.Passive++
	} else {
		c.stats.Truncate++
	}
	if err != nil {
		if ctx.Err() == nil {
			c.stats.Err = fmt.Errorf("%s checkpoint: %w", mode, err)
		}
		return false
	}
	if busy != 0 {
		return false
	}
	if mode != "PASSIVE" {
		c.stats.Truncated++
	}
	return true
}

// walIndex reads, from the log's shared-memory index, how many frames the
// log holds (mxFrame of the wal-index header) and how many of them a
// checkpoint has copied into the database file (nBackfill, just after the
// header's two copies). The layout is SQLite's wal-index format
// (https://sqlite.org/walformat.html), which every process sharing a
// database relies on and so does not change between versions; the fields
// are in the machine's byte order. ok is false when the index is missing,
// being rewritten, or not what it should be.
func (c *checkpointer) walIndex() (frames, copied uint32, ok bool) {
	if c.shm == nil {
		return 0, 0, false
	}
	const (
		hdrSize      = 48
		walIndexVer  = 3007000
		mxFrameAt    = 16
		isInitAt     = 12
		nBackfillAt  = 2 * hdrSize
		bytesToParse = nBackfillAt + 4
	)
	var b [bytesToParse]byte
	if _, err := c.shm.ReadAt(b[:], 0); err != nil {
		return 0, 0, false
	}
	// A writer updates the second copy, then the first: equal copies are
	// not torn.
	if !bytes.Equal(b[:hdrSize], b[hdrSize:2*hdrSize]) ||
		binary.NativeEndian.Uint32(b[:4]) != walIndexVer || b[isInitAt] != 1 {
		return 0, 0, false
	}
	frames = binary.NativeEndian.Uint32(b[mxFrameAt:])
	copied = binary.NativeEndian.Uint32(b[nBackfillAt:])
	return frames, min(copied, frames), true
}

// walSize is the size of the log's file, 0 when there is none.
func (c *checkpointer) walSize() int64 {
	fi, err := os.Stat(c.walPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// waitSettled returns once every commit signalled before the call has been
// handled: any checkpoint it called for has run.
func (c *checkpointer) waitSettled(ctx context.Context) error {
	reply := make(chan struct{})
	select {
	case c.settle <- reply:
	case <-c.done:
		return errors.New("checkpointer stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-reply:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *checkpointer) snapshot() checkpointStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// stop ends the checkpointer, interrupting a checkpoint under way, waits for
// it and closes its connection. The Store's final checkpoint is SQLite's,
// run when the writer, the last connection, closes.
func (c *checkpointer) stop() error {
	if c == nil {
		return nil
	}
	c.stopOnce.Do(func() {
		c.cancel()
		<-c.done
		if err := errors.Join(c.conn.Close(), c.db.Close()); err != nil {
			c.stopErr = fmt.Errorf("stop checkpointer: %w", err)
		}
	})
	return c.stopErr
}

// release closes the shared-memory index; call it after every connection
// of the store is closed.
func (c *checkpointer) release() error {
	if c == nil || c.shm == nil {
		return nil
	}
	err := c.shm.Close()
	if err != nil && !errors.Is(err, fs.ErrClosed) {
		return fmt.Errorf("close %q: %w", c.shm.Name(), err)
	}
	return nil
}
