// Package postgres is the store of a cluster: several aion servers share one
// PostgreSQL database, each through a pgx connection pool. It implements
// store.Cluster besides store.Store, and translates database errors into the
// store's sentinels (see dbErr).
//
// Times are stored as bigint Unix nanoseconds (0 for the zero time), exactly
// like the SQLite backend, so every time round-trips without losing the
// nanoseconds a timestamptz would drop. Structured values (timeouts, retry
// policies, failures, placement nodes) are jsonb.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is a store.Store on one PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
	pres *presence
	// conns holds the backend process IDs of the pool's connections, so a
	// notice this store sent is told from one another store sent.
	conns    *backends
	stats    planStats // of activities
	runStats planStats // of runs
}

var _ store.Store = (*Store)(nil)

// Open connects to the database named by dsn (a postgres:// URL or a
// key=value string; pgxpool settings such as pool_max_conns are honoured) and
// brings its schema up to date. Several servers may open the same database at
// once: migrations are serialized by an advisory lock.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx redacts any password from the text of a parse error.
		return nil, fmt.Errorf("open postgres store: %w", dbErr(err))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// An unreachable database should fail a call, not hang it.
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		// pgx's default, the larger of 4 and the CPU count, is too few on a
		// small machine: the group committer, the claim loop, the chores and
		// the reads of requests would queue for connections rather than for
		// the database.
		cfg.MaxConns = defaultMaxConns
	}
	conns := &backends{pids: make(map[uint32]int)}
	after, before := cfg.AfterConnect, cfg.BeforeClose
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, c); err != nil {
				return err
			}
		}
		conns.add(c.PgConn().PID())
		return nil
	}
	cfg.BeforeClose = func(c *pgx.Conn) {
		conns.remove(c.PgConn().PID())
		if before != nil {
			before(c)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: %w", dbErr(err))
	}
	s := &Store{pool: pool, pres: &presence{cfg: cfg.ConnConfig}, conns: conns}
	s.stats.init(pool, "activities")
	s.runStats.init(pool, "runs")
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store: %w", dbErr(err))
	}
	return s, nil
}

// backends is a set of backend process IDs. PostgreSQL gives each live
// session its own, so the set names this pool's sessions exactly.
type backends struct {
	mu   sync.Mutex
	pids map[uint32]int
}

func (b *backends) add(pid uint32) {
	b.mu.Lock()
	b.pids[pid]++
	b.mu.Unlock()
}

func (b *backends) remove(pid uint32) {
	b.mu.Lock()
	if b.pids[pid]--; b.pids[pid] <= 0 {
		delete(b.pids, pid)
	}
	b.mu.Unlock()
}

func (b *backends) has(pid uint32) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pids[pid] > 0
}

// defaultMaxConns is the connection pool's size unless the DSN sets
// pool_max_conns.
const defaultMaxConns = 16

// Close closes the connection pool and ends the presence of the servers
// this store joined without leaving: a restart under their names may take
// over at once.
func (s *Store) Close() error {
	s.stats.close()
	s.runStats.close()
	s.pres.close()
	s.pool.Close()
	return nil
}

// analyzeFirst and analyzeLast bound the store's own analyzes of a table
// it inserts into fast: at analyzeFirst inserted rows, then each time that
// count has grown tenfold, up to analyzeLast.
const (
	analyzeFirst = 1000
	analyzeLast  = 1000000
)

// planStats keeps one table's planner statistics up with a table that
// grows fast from empty. PostgreSQL plans a prepared statement afresh for
// its first five runs on a connection, then keeps a generic plan until the
// table's statistics change, and autovacuum (when it is on) first analyzes
// a new table after its next pass, up to a minute later, then after every
// tenth of the table changed, at most once a pass. A plan made for a few
// rows (a claim that updates its rows through a scan of the whole table, a
// look-up of one run through an index of the whole namespace) or from
// statistics of a table a tenth the size is kept while the table grows
// past it. So the store analyzes the table itself at analyzeFirst inserted
// rows and at each tenfold of that, in the background; new statistics
// replace every connection's plans. Past analyzeLast autovacuum keeps up.
type planStats struct {
	pool  *pgxpool.Pool
	table string
	rows  atomic.Int64 // inserted so far
	// next is the count of inserted rows at which the next analyze runs.
	next   atomic.Int64
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	// done is closed once the first analyze has run.
	done chan struct{}
	// analyzed, when set (by tests, before the first write), is told the
	// count each analyze ran at.
	analyzed func(at int64)
}

func (p *planStats) init(pool *pgxpool.Pool, table string) {
	p.pool, p.table = pool, table
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.done = make(chan struct{})
	p.next.Store(analyzeFirst)
}

// inserted notes n new rows of the table; an analyze they make due runs in
// the background, so no write waits for it.
func (p *planStats) inserted(n int) {
	total := p.rows.Add(int64(n))
	next := p.next.Load()
	if n == 0 || next > analyzeLast || total < next || !p.next.CompareAndSwap(next, 10*next) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
		defer cancel()
		// Best effort: should it fail, autovacuum analyzes the table later.
		_, _ = p.pool.Exec(ctx, `ANALYZE `+p.table)
		if next == analyzeFirst {
			close(p.done)
		}
		if p.analyzed != nil {
			p.analyzed(next)
		}
	}()
}

func (p *planStats) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

// migrationLockKey identifies the advisory lock held while migrating
// ("aion" "mig" as bytes). Advisory locks are per database, so stores on
// different databases of one server do not contend.
const migrationLockKey int64 = 0x61696f6e_6d6967

// migrations are applied in order; schema_migrations records each version
// (its index + 1) that has run. Append only: never edit one that has shipped.
// A migration may hold several statements: it runs over the simple protocol.
var migrations = []string{
	`CREATE TABLE namespaces (
		name         text PRIMARY KEY,
		origin       text NOT NULL,
		placement    text NOT NULL DEFAULT 'unplaced',
		nodes        jsonb NOT NULL DEFAULT '[]',
		created_at   bigint NOT NULL,
		last_seen_at bigint NOT NULL
	)`,
	`CREATE TABLE activities (
		seq           bigserial PRIMARY KEY,
		namespace     text NOT NULL,
		id            text NOT NULL,
		task_queue    text NOT NULL,
		activity_type text NOT NULL,
		node          text NOT NULL,
		payload       bytea,
		fingerprint   text NOT NULL,
		timeouts      jsonb NOT NULL,
		retry         jsonb NOT NULL,
		state         text NOT NULL,
		attempt       integer NOT NULL,
		result        bytea,
		failure       jsonb,
		heartbeat     bytea,
		scheduled_at  bigint NOT NULL,
		started_at    bigint NOT NULL,
		ready_at      bigint NOT NULL,
		closed_at     bigint NOT NULL,
		UNIQUE (namespace, id)
	);
	CREATE INDEX activities_open ON activities (seq) WHERE state IN ('scheduled', 'running');
	CREATE INDEX activities_by_state ON activities (namespace, state, seq);
	CREATE TABLE attempts (
		namespace   text NOT NULL,
		activity_id text NOT NULL,
		number      integer NOT NULL,
		worker_id   bigint NOT NULL,
		node        text NOT NULL,
		started_at  bigint NOT NULL,
		ended_at    bigint NOT NULL,
		outcome     text NOT NULL,
		failure     jsonb,
		PRIMARY KEY (namespace, activity_id, number)
	)`,
	// Cluster mode: claims, owners and leases, the worker directory and
	// server-to-server messages.
	`ALTER TABLE activities ADD COLUMN owner bigint NOT NULL DEFAULT 0,
		ADD COLUMN attempt_started_at bigint NOT NULL DEFAULT 0,
		ADD COLUMN attempt_worker bigint NOT NULL DEFAULT 0,
		ADD COLUMN attempt_node text NOT NULL DEFAULT '',
		ADD COLUMN cancel_reason text,
		ADD COLUMN wait_deadline bigint NOT NULL DEFAULT ` + noDeadline + `;
	CREATE INDEX activities_claim ON activities (namespace, task_queue, activity_type, seq) WHERE state = 'scheduled';
	CREATE INDEX activities_owned ON activities (owner) WHERE owner <> 0;
	CREATE TABLE servers (
		id          bigserial PRIMARY KEY,
		name        text NOT NULL,
		addr        text NOT NULL,
		started_at  bigint NOT NULL,
		lease_until bigint NOT NULL
	);
	CREATE TABLE workers (
		id     bigint PRIMARY KEY,
		server bigint NOT NULL,
		info   bytea NOT NULL
	);
	CREATE INDEX workers_by_server ON workers (server);
	CREATE TABLE server_messages (
		id          bigserial PRIMARY KEY,
		to_server   bigint NOT NULL,
		from_server bigint NOT NULL,
		kind        text NOT NULL,
		body        bytea,
		call_id     bigint NOT NULL DEFAULT 0
	);
	CREATE INDEX server_messages_to ON server_messages (to_server);
	CREATE INDEX activities_wait_deadline ON activities (wait_deadline) WHERE state = 'scheduled';
	-- Earlier versions left a first attempt's ready time at 0; waiting
	-- deadlines are now measured from it.
	UPDATE activities SET ready_at = scheduled_at WHERE ready_at = 0 AND state = 'scheduled';
	UPDATE activities SET wait_deadline = ` + waitDeadline("timeouts", "scheduled_at", "ready_at") + ` WHERE state = 'scheduled'`,
	// Workflow runs and their histories. At most one run of a workflow id
	// is open (runs_open_workflow). owner is the server that holds an open
	// run in cluster mode, 0 for none.
	`CREATE TABLE runs (
		seq                bigserial PRIMARY KEY,
		namespace          text NOT NULL,
		run_id             text NOT NULL,
		workflow_id        text NOT NULL,
		workflow_type      text NOT NULL,
		task_queue         text NOT NULL,
		build_id           text NOT NULL,
		status             text NOT NULL,
		fingerprint        text NOT NULL,
		parent_workflow_id text NOT NULL,
		parent_run_id      text NOT NULL,
		parent_step        bigint NOT NULL,
		next_run_id        text NOT NULL,
		history_length     bigint NOT NULL,
		started_at         bigint NOT NULL,
		closed_at          bigint NOT NULL,
		owner              bigint NOT NULL DEFAULT 0,
		task_failure       text NOT NULL,
		failure            jsonb,
		result             bytea,
		input              bytea,
		UNIQUE (namespace, run_id)
	);
	CREATE UNIQUE INDEX runs_open_workflow ON runs (namespace, workflow_id) WHERE status = 'running';
	CREATE INDEX runs_open ON runs (seq) WHERE status = 'running';
	CREATE INDEX runs_by_workflow ON runs (namespace, workflow_id, seq);
	CREATE INDEX runs_by_namespace ON runs (namespace, seq);
	CREATE INDEX runs_by_status ON runs (namespace, status, seq);
	CREATE INDEX runs_by_type ON runs (namespace, workflow_type, seq);
	CREATE TABLE events (
		namespace text NOT NULL,
		run_id    text NOT NULL,
		seq       bigint NOT NULL,
		data      bytea NOT NULL,
		PRIMARY KEY (namespace, run_id, seq)
	)`,
	// Cluster mode: the runs no server holds, by what claims them, and each
	// run's inbox of events posted by servers that do not hold it.
	`CREATE INDEX runs_unowned ON runs (namespace, task_queue, workflow_type, seq) WHERE status = 'running' AND owner = 0;
	CREATE INDEX runs_owned ON runs (owner) WHERE owner <> 0;
	CREATE TABLE run_inbox (
		id        bigserial PRIMARY KEY,
		namespace text NOT NULL,
		run_id    text NOT NULL,
		data      bytea NOT NULL
	);
	CREATE INDEX run_inbox_by_run ON run_inbox (namespace, run_id, id)`,
	// Activities gain a priority (1 first, 5 last); claims take the most
	// urgent ready work of a triple first, then the oldest.
	`ALTER TABLE activities ADD COLUMN priority smallint NOT NULL DEFAULT 3;
	DROP INDEX activities_claim;
	CREATE INDEX activities_claim ON activities (namespace, task_queue, activity_type, priority, seq) WHERE state = 'scheduled'`,
	// Activities and runs gain the keys flow control shares pools by, and
	// the schedule tick that started them.
	`ALTER TABLE activities ADD COLUMN fairness_key text NOT NULL DEFAULT '',
		ADD COLUMN fairness_weight integer NOT NULL DEFAULT 1,
		ADD COLUMN concurrency_key text NOT NULL DEFAULT '',
		ADD COLUMN schedule_id text NOT NULL DEFAULT '',
		ADD COLUMN schedule_time bigint NOT NULL DEFAULT 0;
	ALTER TABLE runs ADD COLUMN priority smallint NOT NULL DEFAULT 3,
		ADD COLUMN fairness_key text NOT NULL DEFAULT '',
		ADD COLUMN fairness_weight integer NOT NULL DEFAULT 1,
		ADD COLUMN concurrency_key text NOT NULL DEFAULT '',
		ADD COLUMN schedule_id text NOT NULL DEFAULT '',
		ADD COLUMN schedule_time bigint NOT NULL DEFAULT 0`,
	// Schedules: the definition and the scheduler's state as JSON, the
	// action's input beside them, a version for compare-and-set updates
	// by the servers of a cluster, and when a scheduler must next look (0
	// for never), indexed for the schedulers' scans.
	`CREATE TABLE schedules (
		namespace  text NOT NULL,
		id         text NOT NULL,
		version    bigint NOT NULL,
		next_due   bigint NOT NULL,
		created_at bigint NOT NULL,
		updated_at bigint NOT NULL,
		definition jsonb NOT NULL,
		state      jsonb NOT NULL,
		input      bytea NOT NULL,
		PRIMARY KEY (namespace, id)
	);
	CREATE INDEX schedules_due ON schedules (next_due) WHERE next_due <> 0`,
	// Flow limits per namespace, kind and type; the token buckets of their
	// rates (key '' for a rate of the whole type), which claims update; and
	// the running activities by concurrency key, which claims count.
	`CREATE TABLE flow_limits (
		namespace   text NOT NULL,
		kind        text NOT NULL,
		type        text NOT NULL,
		concurrency integer NOT NULL,
		rate        double precision NOT NULL,
		burst       integer NOT NULL,
		per_key     boolean NOT NULL,
		updated_at  bigint NOT NULL,
		PRIMARY KEY (namespace, kind, type)
	);
	CREATE TABLE flow_buckets (
		namespace text NOT NULL,
		kind      text NOT NULL,
		type      text NOT NULL,
		key       text NOT NULL,
		tokens    double precision NOT NULL,
		at        bigint NOT NULL,
		full_at   bigint NOT NULL,
		PRIMARY KEY (namespace, kind, type, key)
	);
	CREATE INDEX flow_buckets_full ON flow_buckets (full_at);
	CREATE INDEX activities_running_key ON activities (namespace, activity_type, concurrency_key) WHERE state = 'running'`,
	// Claims share a triple's waiting work between fairness keys: they
	// find the keys waiting (one probe each) and read each key's oldest
	// rows through activities_claim_fair, and weigh in the slots each key
	// holds through activities_running_fair. activities_claim stays for
	// reads in (priority, seq) order.
	`CREATE INDEX activities_claim_fair ON activities (namespace, task_queue, activity_type, priority, fairness_key, seq)
		WHERE state = 'scheduled';
	CREATE INDEX activities_running_fair ON activities (namespace, task_queue, activity_type, fairness_key, fairness_weight)
		WHERE state = 'running'`,
	// Activities and runs gain the W3C trace context they were scheduled
	// or started with (PostgreSQL adds a column with a constant default
	// without rewriting the table, and keeps large values out of line, so
	// where the column lands does not matter).
	`ALTER TABLE activities ADD COLUMN traceparent text NOT NULL DEFAULT '',
		ADD COLUMN tracestate text NOT NULL DEFAULT '';
	ALTER TABLE runs ADD COLUMN traceparent text NOT NULL DEFAULT '',
		ADD COLUMN tracestate text NOT NULL DEFAULT ''`,
	// Runs gain their admission against their workflow type's concurrency
	// limit, and the admitted open runs of a key are counted through
	// runs_admitted.
	`ALTER TABLE runs ADD COLUMN admitted boolean NOT NULL DEFAULT false;
	CREATE INDEX runs_admitted ON runs (namespace, workflow_type, concurrency_key) WHERE status = 'running' AND admitted`,
	// Namespaces gain a retention for their closed work (nanoseconds, 0
	// for the default), and closed activities and runs are indexed by
	// close time, so the reaper finds what has expired without reading
	// what has not.
	`ALTER TABLE namespaces ADD COLUMN retention bigint NOT NULL DEFAULT 0;
	CREATE INDEX activities_closed ON activities (namespace, closed_at)
		WHERE state IN ('completed', 'failed', 'canceled', 'timed_out');
	CREATE INDEX runs_closed ON runs (namespace, closed_at) WHERE status <> 'running'`,
	// presence: the server holds its presence lock (see presence), so a free
	// lock proves it gone.
	`ALTER TABLE servers ADD COLUMN presence boolean NOT NULL DEFAULT false`,
	// Run claims share a pool's waiting runs between fairness keys, as
	// activity claims do: they find the keys waiting (one probe each) and
	// read each key's oldest runs through runs_claim_fair.
	`CREATE INDEX runs_claim_fair ON runs (namespace, task_queue, workflow_type, priority, fairness_key, seq)
		WHERE status = 'running' AND owner = 0`,
	// activities_by_state leads with the state: led by the namespace alone,
	// it tied with the (namespace, id) key in the plan of every look-up of
	// one activity (an ending, a read) that PostgreSQL prepares while the
	// table is new and has no statistics, and it kept that plan, which reads
	// the whole namespace, as the table grew.
	`DROP INDEX activities_by_state;
	CREATE INDEX activities_by_state ON activities (state, namespace, seq)`,
	closingAttemptMigration,
	statisticsMigration,
	sparseIndexMigration,
	// activities_open held every waiting and running row version by seq,
	// for the recovery of open work that a server on PostgreSQL never
	// does (open work stays in the store): two index entries of about
	// sixteen in the life of an activity that waits. The count of open
	// work per namespace reads activities_by_state instead.
	`DROP INDEX activities_open`,
}

// sparseIndexMigration leaves out of the index of waiting deadlines the
// waiting work that has none (no schedule-to-start or schedule-to-close
// timeout), and out of the index of running work by concurrency key the
// work that has no key: no query looks for either there, and each entry
// is written with every row version in those states. That is two index
// entries fewer for the common activity, of about eighteen in its life.
const sparseIndexMigration = `DROP INDEX activities_wait_deadline;
	CREATE INDEX activities_wait_deadline ON activities (wait_deadline)
		WHERE state = 'scheduled' AND wait_deadline < ` + noDeadline + `;
	DROP INDEX activities_running_key;
	CREATE INDEX activities_running_key ON activities (namespace, activity_type, concurrency_key)
		WHERE state = 'running' AND concurrency_key <> ''`

// statisticsMigration keeps analyzing activities cheap. With the default
// target every analyze (the store's own, and autovacuum's as the table
// grows) sampled up to 30,000 rows of every column, payloads and results
// included: 0.4 s of a core at 20,000 rows on a 2-core machine, a stall of
// dispatch each time. Plans need statistics only of the columns queries
// filter and order by, and a sample of 3,000 rows of those (a target of
// 10) tells them apart; the wide columns no query filters on get none.
const statisticsMigration = `ALTER TABLE activities
	ALTER COLUMN payload SET STATISTICS 0, ALTER COLUMN result SET STATISTICS 0,
	ALTER COLUMN failure SET STATISTICS 0, ALTER COLUMN heartbeat SET STATISTICS 0,
	ALTER COLUMN timeouts SET STATISTICS 0, ALTER COLUMN retry SET STATISTICS 0,
	ALTER COLUMN fingerprint SET STATISTICS 0, ALTER COLUMN traceparent SET STATISTICS 0,
	ALTER COLUMN tracestate SET STATISTICS 0, ALTER COLUMN closing_failure SET STATISTICS 0,
	ALTER COLUMN closing_node SET STATISTICS 0, ALTER COLUMN closing_outcome SET STATISTICS 0,
	ALTER COLUMN attempt_node SET STATISTICS 0, ALTER COLUMN schedule_id SET STATISTICS 0,
	ALTER COLUMN seq SET STATISTICS 10, ALTER COLUMN namespace SET STATISTICS 10,
	ALTER COLUMN id SET STATISTICS 10, ALTER COLUMN task_queue SET STATISTICS 10,
	ALTER COLUMN activity_type SET STATISTICS 10, ALTER COLUMN node SET STATISTICS 10,
	ALTER COLUMN state SET STATISTICS 10, ALTER COLUMN attempt SET STATISTICS 10,
	ALTER COLUMN scheduled_at SET STATISTICS 10, ALTER COLUMN started_at SET STATISTICS 10,
	ALTER COLUMN ready_at SET STATISTICS 10, ALTER COLUMN closed_at SET STATISTICS 10,
	ALTER COLUMN owner SET STATISTICS 10, ALTER COLUMN attempt_started_at SET STATISTICS 10,
	ALTER COLUMN attempt_worker SET STATISTICS 10, ALTER COLUMN cancel_reason SET STATISTICS 10,
	ALTER COLUMN wait_deadline SET STATISTICS 10, ALTER COLUMN priority SET STATISTICS 10,
	ALTER COLUMN fairness_key SET STATISTICS 10, ALTER COLUMN fairness_weight SET STATISTICS 10,
	ALTER COLUMN concurrency_key SET STATISTICS 10, ALTER COLUMN schedule_time SET STATISTICS 10,
	ALTER COLUMN closing_number SET STATISTICS 10, ALTER COLUMN closing_worker_id SET STATISTICS 10,
	ALTER COLUMN closing_started_at SET STATISTICS 10, ALTER COLUMN closing_ended_at SET STATISTICS 10`

// closingAttemptMigration gives activities the record of the attempt that
// closed them, kept in the row instead of the attempts table: a close is
// then one row's update, not also an insert into attempts and its key. The
// attempts table keeps the attempts that did not close their activity
// (those a retry followed, and those of a lost server).
const closingAttemptMigration = `ALTER TABLE activities
	ADD COLUMN closing_number integer NOT NULL DEFAULT 0,
	ADD COLUMN closing_worker_id bigint NOT NULL DEFAULT 0,
	ADD COLUMN closing_node text NOT NULL DEFAULT '',
	ADD COLUMN closing_started_at bigint NOT NULL DEFAULT 0,
	ADD COLUMN closing_ended_at bigint NOT NULL DEFAULT 0,
	ADD COLUMN closing_outcome text NOT NULL DEFAULT '',
	ADD COLUMN closing_failure jsonb`

// noDeadline is the wait deadline of work that may wait for ever.
const noDeadline = "9223372036854775807"

// waitDeadline is the SQL for when waiting work times out: the earlier of
// its schedule-to-close and schedule-to-start deadlines (noDeadline when it
// has neither), from SQL expressions for its timeouts (jsonb), scheduled
// time and ready time. The sweep finds due work through an index on it
// instead of reading every waiting activity's timeouts.
func waitDeadline(timeouts, scheduled, ready string) string {
	s2c := "(" + timeouts + "->>'schedule_to_close')::bigint"
	s2s := "(" + timeouts + "->>'schedule_to_start')::bigint"
	return "least(CASE WHEN " + s2c + " > 0 THEN " + scheduled + " + " + s2c + " ELSE " + noDeadline + " END, " +
		"CASE WHEN " + s2s + " > 0 THEN " + ready + " + " + s2s + " ELSE " + noDeadline + " END)"
}

// migrate applies every migration the database lacks, in one transaction
// that first takes a transaction-scoped advisory lock: a server that starts
// while another migrates waits for it, then finds nothing left to do.
func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
			return fmt.Errorf("migrate: take lock: %w", dbErr(err))
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return fmt.Errorf("migrate: create schema_migrations: %w", dbErr(err))
		}
		var version int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
			return fmt.Errorf("migrate: read schema version: %w", dbErr(err))
		}
		if version > len(migrations) {
			return fmt.Errorf("migrate: database schema version %d is newer than this binary knows (%d)", version, len(migrations))
		}
		for i := version; i < len(migrations); i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migrate: step %d: %w", i+1, dbErr(err))
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, now())`, i+1); err != nil {
				return fmt.Errorf("migrate: record step %d: %w", i+1, dbErr(err))
			}
		}
		return nil
	})
}

// RegisterNamespace implements store.NamespaceStore.
func (s *Store) RegisterNamespace(ctx context.Context, name string, origin store.Origin) (store.Namespace, bool, error) {
	if !origin.Valid() {
		return store.Namespace{}, false, fmt.Errorf("register namespace %q: unknown origin %q", name, origin)
	}
	now := time.Now().UnixNano()
	var (
		ns      store.Namespace
		created bool
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Concurrent first inserts of one name queue on the unique index: the
		// first commits its row, the others then see a conflict and insert
		// nothing, so exactly one caller gets a row back.
		var inserted string
		err := tx.QueryRow(ctx, `INSERT INTO namespaces (name, origin, created_at, last_seen_at)
			VALUES ($1, $2, $3, $3) ON CONFLICT (name) DO NOTHING RETURNING name`, name, string(origin), now).Scan(&inserted)
		switch {
		case err == nil:
			created = true
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if !created {
			if _, err := tx.Exec(ctx,
				`UPDATE namespaces SET last_seen_at = greatest(last_seen_at, $1) WHERE name = $2`, now, name); err != nil {
				return err
			}
		}
		ns, err = getNamespace(ctx, tx, name)
		return err
	})
	if err != nil {
		return store.Namespace{}, false, fmt.Errorf("register namespace %q: %w", name, dbErr(err))
	}
	return ns, created, nil
}

// GetNamespace implements store.NamespaceStore.
func (s *Store) GetNamespace(ctx context.Context, name string) (store.Namespace, error) {
	ns, err := getNamespace(ctx, s.pool, name)
	if err != nil {
		return store.Namespace{}, fmt.Errorf("get namespace %q: %w", name, dbErr(err))
	}
	return ns, nil
}

// ListNamespaces implements store.NamespaceStore.
func (s *Store) ListNamespaces(ctx context.Context) ([]store.Namespace, error) {
	// COLLATE "C" orders by bytes, as SQLite does, whatever the database's
	// default collation.
	rows, err := s.pool.Query(ctx, `SELECT `+namespaceColumns+` FROM namespaces ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", dbErr(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Namespace, error) { return scanNamespace(row) })
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", dbErr(err))
	}
	return out, nil
}

// SetPlacement implements store.NamespaceStore.
func (s *Store) SetPlacement(ctx context.Context, name string, p store.Placement) (store.Namespace, error) {
	p = p.Normalize()
	if err := p.Validate(); err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, dbErr(err))
	}
	nodes, err := json.Marshal(nonNil(p.Nodes))
	if err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, dbErr(err))
	}
	ns, err := scanNamespace(s.pool.QueryRow(ctx, `UPDATE namespaces SET placement = $1, nodes = $2::jsonb
		WHERE name = $3 RETURNING `+namespaceColumns, string(p.Mode), string(nodes), name))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Namespace{}, fmt.Errorf("set placement of %q: namespace %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Namespace{}, fmt.Errorf("set placement of %q: %w", name, dbErr(err))
	}
	return ns, nil
}

const namespaceColumns = `name, origin, placement, nodes, created_at, last_seen_at, retention`

type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type scanner interface {
	Scan(dest ...any) error
}

func getNamespace(ctx context.Context, q queryer, name string) (store.Namespace, error) {
	ns, err := scanNamespace(q.QueryRow(ctx, `SELECT `+namespaceColumns+` FROM namespaces WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Namespace{}, fmt.Errorf("namespace %w", store.ErrNotFound)
	}
	return ns, err
}

func scanNamespace(row scanner) (store.Namespace, error) {
	var (
		ns                store.Namespace
		origin, mode      string
		nodes             []byte
		created, lastSeen int64
		retention         int64
	)
	if err := row.Scan(&ns.Name, &origin, &mode, &nodes, &created, &lastSeen, &retention); err != nil {
		return store.Namespace{}, err
	}
	ns.Origin = store.Origin(origin)
	ns.Placement.Mode = store.PlacementMode(mode)
	if err := json.Unmarshal(nodes, &ns.Placement.Nodes); err != nil {
		return store.Namespace{}, fmt.Errorf("decode placement nodes of %q: %w", ns.Name, dbErr(err))
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
