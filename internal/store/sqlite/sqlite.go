// Package sqlite is the embedded store: one SQLite file, opened in WAL mode,
// with a single writer connection, a pool of readers, and a checkpointer
// that copies the write-ahead log into the file beside the commits.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// The "sqlite" database/sql driver every connection opens is registered by
// the one driver_*.go file the build tags select (see DriverName).

// Store is a store.Store on one SQLite file.
type Store struct {
	path   string
	writer *sql.DB // exactly one connection: SQLite allows one writer at a time
	reader *sql.DB
	stmts  writeStmts
	mark   *mark
	// accepted is the loss Open found and was told to accept; nil if none.
	accepted *LossError
	ckpt     *checkpointer // copies the write-ahead log into the file; see checkpoint.go
	// synchronous is the mode every commit but a reaping one runs in.
	synchronous string
	lanes       laneIDs // the ids spilled activities are indexed by; see lane.go
	reapAt      reapCursors
	lock        *os.File // holds LockPath(path) until Close; nil where there is no lock (see lock.go)
}

// Option adjusts how Open opens the file.
type Option func(*options)

type options struct {
	synchronous string
	acceptLoss  bool
	ckpt        checkpointOptions
}

// WithSynchronous sets SQLite's synchronous mode: "full" (the default; a
// commit is on disk before it returns, so it survives power loss) or "normal"
// (in WAL mode a commit survives a crash of the process but the last commits
// may be lost on power loss or an operating-system crash). Any other value
// means full; the server's Config.Validate refuses it before Open is called.
func WithSynchronous(mode string) Option {
	return func(o *options) { o.synchronous = mode }
}

// WithAcceptDataLoss makes Open start on a database that is missing, empty,
// another one or behind its mark file, instead of refusing with a
// *LossError: the loss is then reported by AcceptedLoss and the mark file is
// rewritten for the database as found.
func WithAcceptDataLoss(accept bool) Option {
	return func(o *options) { o.acceptLoss = accept }
}

var _ store.Store = (*Store)(nil)

// maxReaders bounds the reading connections; reads beyond it wait for one.
const maxReaders = 4

// Open opens (creating if needed) the SQLite database at path and brings its
// schema up to date. The directory holding path is created when missing.
//
// One Store at a time holds a database: Open first takes an exclusive lock
// on LockPath(path), held until Close, and refuses with a *LockedError
// (wrapping ErrLocked) naming the directory and the holder's process id
// while another Store, in any process, holds it.
//
// Beside the database a mark file (MarkPath) records its identity and how
// many commits it had acknowledged. Before anything is written Open compares
// the two and refuses, with an error wrapping ErrDataLoss, a database that is
// missing or empty while the mark exists, that is another database, or that
// holds fewer commits than the mark records (a write-ahead log cut short or
// lost, or an older copy). Without a mark, a new database is created, or an
// existing one adopted, and the mark written.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	o := options{synchronous: "full"}
	for _, opt := range opts {
		opt(&o)
	}
	if o.synchronous != "normal" {
		o.synchronous = "full" // anything but an explicit "normal" keeps commits durable on power loss
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	// Locked before anything reads the database or its mark: a second
	// opener must be refused, not compare or migrate what another writes.
	lock, err := acquireLock(path)
	if errors.Is(err, ErrLocked) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	s, err := openLocked(ctx, path, o)
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return nil, err
	}
	s.lock = lock
	return s, nil
}

// openLocked is Open once the lock is held.
func openLocked(ctx context.Context, path string, o options) (*Store, error) {
	markID, recorded, loss, err := check(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	if loss != nil {
		if !o.acceptLoss {
			return nil, loss
		}
		if loss.gone {
			if err := setAside(path); err != nil {
				return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
			}
		}
	}
	// Memory is bounded by connection: each has its own page cache (16 MiB
	// for the writer, 4 MiB for each of the few readers; more cost memory
	// under a flood of large payloads and bought no throughput), and the
	// file is read, not memory-mapped, so its pages are not counted again
	// in every connection's mapping. No commit checkpoints
	// (wal_autocheckpoint=0): the checkpointer does, beside them.
	dsn := func(cacheKiB int) string {
		return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(" + o.synchronous + ")" +
			"&_pragma=busy_timeout(10000)&_pragma=foreign_keys(ON)" + fmt.Sprintf("&_pragma=cache_size(-%d)", cacheKiB) +
			"&_pragma=mmap_size(0)&_pragma=temp_store(MEMORY)&_pragma=wal_autocheckpoint(0)&_txlock=immediate"
	}
	writer, err := sql.Open("sqlite", dsn(16<<10))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	reader, err := sql.Open("sqlite", dsn(4<<10))
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	reader.SetMaxOpenConns(maxReaders)
	reader.SetMaxIdleConns(maxReaders)
	s := &Store{path: path, writer: writer, reader: reader, accepted: loss, synchronous: o.synchronous}
	id, counters, err := s.migrate(ctx)
	if err == nil {
		err = s.prepare(ctx)
	}
	if err == nil {
		err = s.lanes.load(ctx, s.writer)
	}
	if err == nil {
		if markID == id && loss == nil {
			s.mark, err = openMark(MarkPath(path), recorded)
			if err == nil {
				s.mark.advance(counters)
			}
		} else {
			s.mark, err = createMark(MarkPath(path), id, counters)
		}
	}
	if err == nil {
		err = s.startCheckpointer(ctx, dsn(checkpointCacheKiB), o.ckpt)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	return s, nil
}

// AcceptedLoss returns what Open found lost and accepted under
// WithAcceptDataLoss, or nil when the database was whole.
func (s *Store) AcceptedLoss() *LossError { return s.accepted }

// Synchronous reads back the synchronous mode ("off", "normal", "full" or
// "extra") of the connection every write commits on, as SQLite applies it,
// not as it was asked for.
func (s *Store) Synchronous(ctx context.Context) (string, error) {
	var level int
	if err := s.writer.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&level); err != nil {
		return "", fmt.Errorf("read synchronous mode of %q: %w", s.path, err)
	}
	modes := []string{"off", "normal", "full", "extra"}
	if level < 0 || level >= len(modes) {
		return "", fmt.Errorf("read synchronous mode of %q: unknown level %d", s.path, level)
	}
	return modes[level], nil
}

// Path returns the file the store lives in.
func (s *Store) Path() string { return s.path }

// Close stops the checkpointer and closes the connection pools and the mark
// file, whose last record is synced first. The writer is the last
// connection to close, so SQLite's checkpoint on closing copies what is left
// of the write-ahead log into the database file and removes the log. Last it
// releases the lock, so the database can be opened again.
func (s *Store) Close() error {
	cerr := s.ckpt.stop()
	var merr error
	if s.mark != nil {
		merr = s.mark.close()
	}
	// Calls run left to right: the checkpointer lets go of the log's index
	// only after the writer is closed.
	return errors.Join(cerr, s.stmts.close(), s.reader.Close(), s.writer.Close(), merr, s.ckpt.release(), s.unlock())
}

// migrations are applied in order; the database's user_version records how
// many have run. Append only: never edit one that has shipped.
var migrations = []string{
	`CREATE TABLE namespaces (
		name         TEXT PRIMARY KEY,
		origin       TEXT NOT NULL,
		placement    TEXT NOT NULL DEFAULT 'unplaced',
		nodes        TEXT NOT NULL DEFAULT '[]',
		created_at   INTEGER NOT NULL,
		last_seen_at INTEGER NOT NULL
	) STRICT`,
	`CREATE TABLE activities (
		seq           INTEGER PRIMARY KEY,
		namespace     TEXT NOT NULL,
		id            TEXT NOT NULL,
		task_queue    TEXT NOT NULL,
		activity_type TEXT NOT NULL,
		node          TEXT NOT NULL,
		payload       BLOB,
		fingerprint   TEXT NOT NULL,
		timeouts      TEXT NOT NULL,
		retry         TEXT NOT NULL,
		state         TEXT NOT NULL,
		attempt       INTEGER NOT NULL,
		result        BLOB,
		failure       TEXT,
		heartbeat     BLOB,
		scheduled_at  INTEGER NOT NULL,
		started_at    INTEGER NOT NULL,
		ready_at      INTEGER NOT NULL,
		closed_at     INTEGER NOT NULL,
		UNIQUE (namespace, id)
	) STRICT;
	CREATE INDEX activities_open ON activities (seq) WHERE state IN ('scheduled', 'running');
	CREATE INDEX activities_by_state ON activities (namespace, state, seq);
	CREATE TABLE attempts (
		namespace   TEXT NOT NULL,
		activity_id TEXT NOT NULL,
		number      INTEGER NOT NULL,
		worker_id   INTEGER NOT NULL,
		node        TEXT NOT NULL,
		started_at  INTEGER NOT NULL,
		ended_at    INTEGER NOT NULL,
		outcome     TEXT NOT NULL,
		failure     TEXT,
		PRIMARY KEY (namespace, activity_id, number)
	) STRICT, WITHOUT ROWID`,
	// One row: the database's identity, also kept in its mark file, and
	// counters every write transaction advances (see mark.go).
	`CREATE TABLE meta (
		id         INTEGER PRIMARY KEY CHECK (id = 1),
		identity   TEXT NOT NULL,
		commits    INTEGER NOT NULL,
		writes     INTEGER NOT NULL,
		activities INTEGER NOT NULL
	) STRICT`,
	// The activities table again, its bulky columns last: SQLite keeps a
	// large value in a chain of overflow pages and must walk the whole chain
	// to reach any column stored after it, so a listing that leaves payloads
	// out read every payload before this order.
	`CREATE TABLE activities_next (
		seq           INTEGER PRIMARY KEY,
		namespace     TEXT NOT NULL,
		id            TEXT NOT NULL,
		task_queue    TEXT NOT NULL,
		activity_type TEXT NOT NULL,
		node          TEXT NOT NULL,
		fingerprint   TEXT NOT NULL,
		timeouts      TEXT NOT NULL,
		retry         TEXT NOT NULL,
		state         TEXT NOT NULL,
		attempt       INTEGER NOT NULL,
		scheduled_at  INTEGER NOT NULL,
		started_at    INTEGER NOT NULL,
		ready_at      INTEGER NOT NULL,
		closed_at     INTEGER NOT NULL,
		failure       TEXT,
		heartbeat     BLOB,
		result        BLOB,
		payload       BLOB,
		UNIQUE (namespace, id)
	) STRICT;
	INSERT INTO activities_next (seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, failure, heartbeat, result, payload)
		SELECT seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, failure, heartbeat, result, payload
		FROM activities ORDER BY seq;
	DROP TABLE activities;
	ALTER TABLE activities_next RENAME TO activities;
	CREATE INDEX activities_open ON activities (seq) WHERE state IN ('scheduled', 'running');
	CREATE INDEX activities_by_state ON activities (namespace, state, seq)`,
	// Workflow runs and their histories. At most one run of a workflow id
	// is open (runs_open_workflow); the bulky columns come last, as in
	// activities. seq never reuses a number, so a listing's Before stays
	// valid whatever is deleted. Events keep a rowid table: they carry step
	// inputs and outputs of kilobytes, which a WITHOUT ROWID b-tree would
	// push into overflow pages from about 1 KiB, wasting most of each.
	`CREATE TABLE runs (
		seq                INTEGER PRIMARY KEY AUTOINCREMENT,
		namespace          TEXT NOT NULL,
		run_id             TEXT NOT NULL,
		workflow_id        TEXT NOT NULL,
		workflow_type      TEXT NOT NULL,
		task_queue         TEXT NOT NULL,
		build_id           TEXT NOT NULL,
		status             TEXT NOT NULL,
		fingerprint        TEXT NOT NULL,
		parent_workflow_id TEXT NOT NULL,
		parent_run_id      TEXT NOT NULL,
		parent_step        INTEGER NOT NULL,
		next_run_id        TEXT NOT NULL,
		history_length     INTEGER NOT NULL,
		started_at         INTEGER NOT NULL,
		closed_at          INTEGER NOT NULL,
		task_failure       TEXT NOT NULL,
		failure            TEXT,
		result             BLOB,
		input              BLOB,
		UNIQUE (namespace, run_id)
	) STRICT;
	CREATE UNIQUE INDEX runs_open_workflow ON runs (namespace, workflow_id) WHERE status = 'running';
	CREATE INDEX runs_open ON runs (seq) WHERE status = 'running';
	CREATE INDEX runs_by_workflow ON runs (namespace, workflow_id, seq);
	CREATE INDEX runs_by_namespace ON runs (namespace, seq);
	CREATE INDEX runs_by_status ON runs (namespace, status, seq);
	CREATE INDEX runs_by_type ON runs (namespace, workflow_type, seq);
	CREATE TABLE events (
		namespace TEXT NOT NULL,
		run_id    TEXT NOT NULL,
		seq       INTEGER NOT NULL,
		data      BLOB NOT NULL,
		PRIMARY KEY (namespace, run_id, seq)
	) STRICT`,
	// Activities gain a priority, kept before the bulky columns (see the
	// rebuild above): the table is rebuilt once more, every activity at the
	// default priority 3.
	`CREATE TABLE activities_next (
		seq           INTEGER PRIMARY KEY,
		namespace     TEXT NOT NULL,
		id            TEXT NOT NULL,
		task_queue    TEXT NOT NULL,
		activity_type TEXT NOT NULL,
		node          TEXT NOT NULL,
		fingerprint   TEXT NOT NULL,
		timeouts      TEXT NOT NULL,
		retry         TEXT NOT NULL,
		state         TEXT NOT NULL,
		attempt       INTEGER NOT NULL,
		scheduled_at  INTEGER NOT NULL,
		started_at    INTEGER NOT NULL,
		ready_at      INTEGER NOT NULL,
		closed_at     INTEGER NOT NULL,
		priority      INTEGER NOT NULL DEFAULT 3,
		failure       TEXT,
		heartbeat     BLOB,
		result        BLOB,
		payload       BLOB,
		UNIQUE (namespace, id)
	) STRICT;
	INSERT INTO activities_next (seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, failure, heartbeat, result, payload)
		SELECT seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, failure, heartbeat, result, payload
		FROM activities ORDER BY seq;
	DROP TABLE activities;
	ALTER TABLE activities_next RENAME TO activities;
	CREATE INDEX activities_open ON activities (seq) WHERE state IN ('scheduled', 'running');
	CREATE INDEX activities_by_state ON activities (namespace, state, seq)`,
	// Activities and runs gain the keys flow control shares pools by and
	// the schedule tick that started them, before their bulky columns:
	// both tables are rebuilt (runs keep their seq, and so their
	// AUTOINCREMENT high mark).
	`CREATE TABLE activities_next (
		seq             INTEGER PRIMARY KEY,
		namespace       TEXT NOT NULL,
		id              TEXT NOT NULL,
		task_queue      TEXT NOT NULL,
		activity_type   TEXT NOT NULL,
		node            TEXT NOT NULL,
		fingerprint     TEXT NOT NULL,
		timeouts        TEXT NOT NULL,
		retry           TEXT NOT NULL,
		state           TEXT NOT NULL,
		attempt         INTEGER NOT NULL,
		scheduled_at    INTEGER NOT NULL,
		started_at      INTEGER NOT NULL,
		ready_at        INTEGER NOT NULL,
		closed_at       INTEGER NOT NULL,
		priority        INTEGER NOT NULL DEFAULT 3,
		fairness_key    TEXT NOT NULL DEFAULT '',
		fairness_weight INTEGER NOT NULL DEFAULT 1,
		concurrency_key TEXT NOT NULL DEFAULT '',
		schedule_id     TEXT NOT NULL DEFAULT '',
		schedule_time   INTEGER NOT NULL DEFAULT 0,
		failure         TEXT,
		heartbeat       BLOB,
		result          BLOB,
		payload         BLOB,
		UNIQUE (namespace, id)
	) STRICT;
	INSERT INTO activities_next (seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, priority, failure, heartbeat, result, payload)
		SELECT seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, priority, failure, heartbeat, result, payload
		FROM activities ORDER BY seq;
	DROP TABLE activities;
	ALTER TABLE activities_next RENAME TO activities;
	CREATE INDEX activities_open ON activities (seq) WHERE state IN ('scheduled', 'running');
	CREATE INDEX activities_by_state ON activities (namespace, state, seq);
	CREATE TABLE runs_next (
		seq                INTEGER PRIMARY KEY AUTOINCREMENT,
		namespace          TEXT NOT NULL,
		run_id             TEXT NOT NULL,
		workflow_id        TEXT NOT NULL,
		workflow_type      TEXT NOT NULL,
		task_queue         TEXT NOT NULL,
		build_id           TEXT NOT NULL,
		status             TEXT NOT NULL,
		fingerprint        TEXT NOT NULL,
		parent_workflow_id TEXT NOT NULL,
		parent_run_id      TEXT NOT NULL,
		parent_step        INTEGER NOT NULL,
		next_run_id        TEXT NOT NULL,
		history_length     INTEGER NOT NULL,
		started_at         INTEGER NOT NULL,
		closed_at          INTEGER NOT NULL,
		task_failure       TEXT NOT NULL,
		priority           INTEGER NOT NULL DEFAULT 3,
		fairness_key       TEXT NOT NULL DEFAULT '',
		fairness_weight    INTEGER NOT NULL DEFAULT 1,
		concurrency_key    TEXT NOT NULL DEFAULT '',
		schedule_id        TEXT NOT NULL DEFAULT '',
		schedule_time      INTEGER NOT NULL DEFAULT 0,
		failure            TEXT,
		result             BLOB,
		input              BLOB,
		UNIQUE (namespace, run_id)
	) STRICT;
	INSERT INTO runs_next (seq, namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status, fingerprint,
		parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length, started_at, closed_at,
		task_failure, failure, result, input)
		SELECT seq, namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status, fingerprint,
		parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length, started_at, closed_at,
		task_failure, failure, result, input
		FROM runs ORDER BY seq;
	DROP TABLE runs;
	ALTER TABLE runs_next RENAME TO runs;
	CREATE UNIQUE INDEX runs_open_workflow ON runs (namespace, workflow_id) WHERE status = 'running';
	CREATE INDEX runs_open ON runs (seq) WHERE status = 'running';
	CREATE INDEX runs_by_workflow ON runs (namespace, workflow_id, seq);
	CREATE INDEX runs_by_namespace ON runs (namespace, seq);
	CREATE INDEX runs_by_status ON runs (namespace, status, seq);
	CREATE INDEX runs_by_type ON runs (namespace, workflow_type, seq)`,
	// Schedules: the definition and the scheduler's state as JSON, the
	// action's input beside them, a version for compare-and-set updates,
	// and when a scheduler must next look (0 for never), indexed for the
	// scheduler's scan.
	`CREATE TABLE schedules (
		namespace  TEXT NOT NULL,
		id         TEXT NOT NULL,
		version    INTEGER NOT NULL,
		next_due   INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		definition TEXT NOT NULL,
		state      TEXT NOT NULL,
		input      BLOB NOT NULL,
		PRIMARY KEY (namespace, id)
	) STRICT;
	CREATE INDEX schedules_due ON schedules (next_due) WHERE next_due <> 0`,
	// Flow limits: per namespace, kind and type, a concurrency limit per
	// concurrency key and a token-bucket rate.
	`CREATE TABLE flow_limits (
		namespace   TEXT NOT NULL,
		kind        TEXT NOT NULL,
		type        TEXT NOT NULL,
		concurrency INTEGER NOT NULL,
		rate        REAL NOT NULL,
		burst       INTEGER NOT NULL,
		per_key     INTEGER NOT NULL,
		updated_at  INTEGER NOT NULL,
		PRIMARY KEY (namespace, kind, type)
	) WITHOUT ROWID`,
	// Activities and runs gain the W3C trace context they were scheduled
	// or started with, before their bulky columns as the rebuilds above
	// keep them: a column added by ALTER TABLE would land after the
	// payload, and reading it would walk a large payload's overflow pages
	// on every dispatch read and recovery. Both tables are rebuilt once
	// more (runs keep their seq, and so their AUTOINCREMENT high mark).
	`CREATE TABLE activities_next (
		seq             INTEGER PRIMARY KEY,
		namespace       TEXT NOT NULL,
		id              TEXT NOT NULL,
		task_queue      TEXT NOT NULL,
		activity_type   TEXT NOT NULL,
		node            TEXT NOT NULL,
		fingerprint     TEXT NOT NULL,
		timeouts        TEXT NOT NULL,
		retry           TEXT NOT NULL,
		state           TEXT NOT NULL,
		attempt         INTEGER NOT NULL,
		scheduled_at    INTEGER NOT NULL,
		started_at      INTEGER NOT NULL,
		ready_at        INTEGER NOT NULL,
		closed_at       INTEGER NOT NULL,
		priority        INTEGER NOT NULL DEFAULT 3,
		fairness_key    TEXT NOT NULL DEFAULT '',
		fairness_weight INTEGER NOT NULL DEFAULT 1,
		concurrency_key TEXT NOT NULL DEFAULT '',
		schedule_id     TEXT NOT NULL DEFAULT '',
		schedule_time   INTEGER NOT NULL DEFAULT 0,
		traceparent     TEXT NOT NULL DEFAULT '',
		tracestate      TEXT NOT NULL DEFAULT '',
		failure         TEXT,
		heartbeat       BLOB,
		result          BLOB,
		payload         BLOB,
		UNIQUE (namespace, id)
	) STRICT;
	INSERT INTO activities_next (seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, priority, fairness_key, fairness_weight,
		concurrency_key, schedule_id, schedule_time, failure, heartbeat, result, payload)
		SELECT seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, priority, fairness_key, fairness_weight,
		concurrency_key, schedule_id, schedule_time, failure, heartbeat, result, payload
		FROM activities ORDER BY seq;
	DROP TABLE activities;
	ALTER TABLE activities_next RENAME TO activities;
	CREATE INDEX activities_open ON activities (seq) WHERE state IN ('scheduled', 'running');
	CREATE INDEX activities_by_state ON activities (namespace, state, seq);
	CREATE TABLE runs_next (
		seq                INTEGER PRIMARY KEY AUTOINCREMENT,
		namespace          TEXT NOT NULL,
		run_id             TEXT NOT NULL,
		workflow_id        TEXT NOT NULL,
		workflow_type      TEXT NOT NULL,
		task_queue         TEXT NOT NULL,
		build_id           TEXT NOT NULL,
		status             TEXT NOT NULL,
		fingerprint        TEXT NOT NULL,
		parent_workflow_id TEXT NOT NULL,
		parent_run_id      TEXT NOT NULL,
		parent_step        INTEGER NOT NULL,
		next_run_id        TEXT NOT NULL,
		history_length     INTEGER NOT NULL,
		started_at         INTEGER NOT NULL,
		closed_at          INTEGER NOT NULL,
		task_failure       TEXT NOT NULL,
		priority           INTEGER NOT NULL DEFAULT 3,
		fairness_key       TEXT NOT NULL DEFAULT '',
		fairness_weight    INTEGER NOT NULL DEFAULT 1,
		concurrency_key    TEXT NOT NULL DEFAULT '',
		schedule_id        TEXT NOT NULL DEFAULT '',
		schedule_time      INTEGER NOT NULL DEFAULT 0,
		traceparent        TEXT NOT NULL DEFAULT '',
		tracestate         TEXT NOT NULL DEFAULT '',
		failure            TEXT,
		result             BLOB,
		input              BLOB,
		UNIQUE (namespace, run_id)
	) STRICT;
	INSERT INTO runs_next (seq, namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status, fingerprint,
		parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length, started_at, closed_at,
		task_failure, priority, fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time,
		failure, result, input)
		SELECT seq, namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status, fingerprint,
		parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length, started_at, closed_at,
		task_failure, priority, fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time,
		failure, result, input
		FROM runs ORDER BY seq;
	DROP TABLE runs;
	ALTER TABLE runs_next RENAME TO runs;
	CREATE UNIQUE INDEX runs_open_workflow ON runs (namespace, workflow_id) WHERE status = 'running';
	CREATE INDEX runs_open ON runs (seq) WHERE status = 'running';
	CREATE INDEX runs_by_workflow ON runs (namespace, workflow_id, seq);
	CREATE INDEX runs_by_namespace ON runs (namespace, seq);
	CREATE INDEX runs_by_status ON runs (namespace, status, seq);
	CREATE INDEX runs_by_type ON runs (namespace, workflow_type, seq)`,
	// Runs gain their admission against their workflow type's concurrency
	// limit, and the admitted open runs of a key are counted through
	// runs_admitted. The column lands after the bulky ones without a
	// rebuild: only an admission reads it, never a listing.
	`ALTER TABLE runs ADD COLUMN admitted INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX runs_admitted ON runs (namespace, workflow_type, concurrency_key) WHERE status = 'running' AND admitted = 1`,
	// Namespaces gain a retention for their closed work (nanoseconds, 0
	// for the default), and closed activities and runs are indexed by
	// close time, so the reaper finds what has expired without reading
	// what has not.
	`ALTER TABLE namespaces ADD COLUMN retention INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX activities_closed ON activities (namespace, closed_at)
		WHERE state IN ('completed', 'failed', 'canceled', 'timed_out');
	CREATE INDEX runs_closed ON runs (namespace, closed_at) WHERE status <> 'running'`,
	waitingMigration,
	laneMigration,
	// Closed activities lose their index by close time: entering every
	// close into it cost a tenth of the throughput. The reaper finds them
	// through activities_by_state, which gains closed_at so that it can
	// pass over the unexpired ones without reading their rows (see
	// ReapActivities); every close rewrites that entry anyway.
	`DROP INDEX activities_closed;
	DROP INDEX activities_by_state;
	CREATE INDEX activities_by_state ON activities (namespace, state, seq, closed_at)`,
	closingAttemptMigration,
}

// migrate brings the schema up to date and gives the database its identity
// if it has none, in one transaction, and returns the identity and counters.
func (s *Store) migrate(ctx context.Context) (string, Counters, error) {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return "", Counters{}, fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return "", Counters{}, fmt.Errorf("migrate: read schema version: %w", err)
	}
	if version > len(migrations) {
		return "", Counters{}, fmt.Errorf("migrate: database schema version %d is newer than this binary knows (%d)", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return "", Counters{}, fmt.Errorf("migrate: step %d: %w", i+1, err)
		}
	}
	// PRAGMA takes no bind parameters; the value is an integer we control.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
		return "", Counters{}, fmt.Errorf("migrate: write schema version: %w", err)
	}
	// A database older than the meta table starts its activity count at what
	// it holds, so the count always means activities in the database.
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta (id, identity, commits, writes, activities)
		SELECT 1, ?, 0, 0, (SELECT count(*) FROM activities) WHERE NOT EXISTS (SELECT 1 FROM meta)`, newIdentity()); err != nil {
		return "", Counters{}, fmt.Errorf("migrate: write identity: %w", err)
	}
	id, c, err := readMeta(ctx, tx)
	if err != nil {
		return "", Counters{}, fmt.Errorf("migrate: read identity: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return "", Counters{}, fmt.Errorf("migrate: %w", err)
	}
	return id, c, nil
}

// bump counts one more commit, with its writes and new activities, inside
// the transaction that makes them; it returns the counters as they will be
// once that transaction commits.
func bump(ctx context.Context, st *sql.Stmt, writes, activities int) (Counters, error) {
	var c Counters
	if err := st.QueryRowContext(ctx, writes, activities).Scan(&c.Commits, &c.Writes, &c.Activities); err != nil {
		return Counters{}, fmt.Errorf("count commit: %w", err)
	}
	return c, nil
}

const bumpSQL = `UPDATE meta SET commits = commits + 1, writes = writes + ?, activities = activities + ?
	WHERE id = 1 RETURNING commits, writes, activities`

// RegisterNamespace implements store.NamespaceStore.
func (s *Store) RegisterNamespace(ctx context.Context, name string, origin store.Origin) (store.Namespace, bool, error) {
	if !origin.Valid() {
		return store.Namespace{}, false, fmt.Errorf("register namespace %q: unknown origin %q", name, origin)
	}
	now := time.Now().UnixNano()
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return store.Namespace{}, false, fmt.Errorf("register namespace %q: %w", name, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx,
		`INSERT INTO namespaces (name, origin, created_at, last_seen_at) VALUES (?, ?, ?, ?)
		 ON CONFLICT (name) DO NOTHING`, name, string(origin), now, now)
	if err != nil {
		return store.Namespace{}, false, fmt.Errorf("register namespace %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Namespace{}, false, fmt.Errorf("register namespace %q: %w", name, err)
	}
	created := n == 1
	if !created {
		if _, err := tx.ExecContext(ctx,
			`UPDATE namespaces SET last_seen_at = max(last_seen_at, ?) WHERE name = ?`, now, name); err != nil {
			return store.Namespace{}, false, fmt.Errorf("register namespace %q: %w", name, err)
		}
	}
	ns, err := getNamespace(ctx, tx, name)
	if err != nil {
		return store.Namespace{}, false, fmt.Errorf("register namespace %q: %w", name, err)
	}
	c, err := bump(ctx, tx.StmtContext(ctx, s.stmts.bump), 1, 0)
	if err != nil {
		return store.Namespace{}, false, fmt.Errorf("register namespace %q: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return store.Namespace{}, false, fmt.Errorf("register namespace %q: %w", name, err)
	}
	s.mark.advance(c)
	return ns, created, nil
}

// GetNamespace implements store.NamespaceStore.
func (s *Store) GetNamespace(ctx context.Context, name string) (store.Namespace, error) {
	ns, err := getNamespace(ctx, s.reader, name)
	if err != nil {
		return store.Namespace{}, fmt.Errorf("get namespace %q: %w", name, err)
	}
	return ns, nil
}

// ListNamespaces implements store.NamespaceStore.
func (s *Store) ListNamespaces(ctx context.Context) ([]store.Namespace, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+namespaceColumns+` FROM namespaces ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	defer rows.Close()
	var out []store.Namespace
	for rows.Next() {
		ns, err := scanNamespace(rows)
		if err != nil {
			return nil, fmt.Errorf("list namespaces: %w", err)
		}
		out = append(out, ns)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	return out, nil
}

// SetPlacement implements store.NamespaceStore.
func (s *Store) SetPlacement(ctx context.Context, name string, p store.Placement) (store.Namespace, error) {
	p = p.Normalize()
	if err := p.Validate(); err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, err)
	}
	nodes, err := json.Marshal(nonNil(p.Nodes))
	if err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, err)
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE namespaces SET placement = ?, nodes = ? WHERE name = ?`,
		string(p.Mode), string(nodes), name)
	if err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, err)
	} else if n == 0 {
		return store.Namespace{}, fmt.Errorf("set placement of %q: namespace %w", name, store.ErrNotFound)
	}
	ns, err := getNamespace(ctx, tx, name)
	if err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, err)
	}
	c, err := bump(ctx, tx.StmtContext(ctx, s.stmts.bump), 1, 0)
	if err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, err)
	}
	s.mark.advance(c)
	return ns, nil
}

const namespaceColumns = `name, origin, placement, nodes, created_at, last_seen_at, retention`

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type scanner interface {
	Scan(dest ...any) error
}

func getNamespace(ctx context.Context, q queryer, name string) (store.Namespace, error) {
	ns, err := scanNamespace(q.QueryRowContext(ctx, `SELECT `+namespaceColumns+` FROM namespaces WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Namespace{}, fmt.Errorf("namespace %w", store.ErrNotFound)
	}
	return ns, err
}

func scanNamespace(row scanner) (store.Namespace, error) {
	var (
		ns                store.Namespace
		origin, mode      string
		nodes             string
		created, lastSeen int64
		retention         int64
	)
	if err := row.Scan(&ns.Name, &origin, &mode, &nodes, &created, &lastSeen, &retention); err != nil {
		return store.Namespace{}, err
	}
	ns.Origin = store.Origin(origin)
	ns.Placement.Mode = store.PlacementMode(mode)
	if err := json.Unmarshal([]byte(nodes), &ns.Placement.Nodes); err != nil {
		return store.Namespace{}, fmt.Errorf("decode placement nodes of %q: %w", ns.Name, err)
	}
	ns.Placement = ns.Placement.Normalize()
	ns.CreatedAt = time.Unix(0, created).UTC()
	ns.LastSeenAt = time.Unix(0, lastSeen).UTC()
	ns.Retention = store.Retention(retention)
	return ns, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
