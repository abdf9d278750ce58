package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/aion-run/aion/internal/store"
)

// laneMigration gives each lane an integer id (table lanes) and indexes
// spilled activities by it: the column spilled becomes lane, 0 for an
// activity the server holds in memory and the lane's id for one it spilled.
// The waiting index's key shrinks from eight columns, four of them text,
// to three integers, which every spilled insert and close maintains.
var laneMigration = `CREATE TABLE lanes (
		id            INTEGER PRIMARY KEY,
		namespace     TEXT NOT NULL,
		task_queue    TEXT NOT NULL,
		activity_type TEXT NOT NULL,
		node          TEXT NOT NULL,
		priority      INTEGER NOT NULL,
		fairness_key  TEXT NOT NULL,
		UNIQUE (namespace, task_queue, activity_type, node, priority, fairness_key)
	) STRICT;
	INSERT INTO lanes (namespace, task_queue, activity_type, node, priority, fairness_key)
		SELECT DISTINCT namespace, task_queue, activity_type, node, priority, fairness_key FROM activities
		WHERE state = 'scheduled' AND spilled = 1;
	DROP INDEX activities_waiting;
	DROP INDEX activities_waiting_deadline;
	DROP INDEX activities_held;
	ALTER TABLE activities RENAME COLUMN spilled TO lane;
	UPDATE activities SET lane = (SELECT l.id FROM lanes l WHERE l.namespace = activities.namespace
		AND l.task_queue = activities.task_queue AND l.activity_type = activities.activity_type
		AND l.node = activities.node AND l.priority = activities.priority AND l.fairness_key = activities.fairness_key)
		WHERE state = 'scheduled' AND lane = 1;
	CREATE INDEX activities_waiting ON activities (lane, ready_at, seq) WHERE state = 'scheduled' AND lane > 0;
	CREATE INDEX activities_waiting_deadline ON activities (wait_deadline, seq) WHERE state = 'scheduled' AND lane > 0;
	CREATE INDEX activities_held ON activities (seq) WHERE state IN ('scheduled', 'running') AND lane = 0`

// laneIDs maps lanes to their ids in the lanes table and back. Only
// committed lanes enter it, so a lane a rolled-back transaction created is
// created again by the next one that needs it.
type laneIDs struct {
	mu    sync.RWMutex
	ids   map[store.Lane]int64
	lanes map[int64]store.Lane
}

// load reads every lane; Open calls it before any write.
func (l *laneIDs) load(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT id, namespace, task_queue, activity_type, node, priority, fairness_key FROM lanes`)
	if err != nil {
		return fmt.Errorf("load lanes: %w", err)
	}
	defer rows.Close()
	found := make(map[store.Lane]int64)
	for rows.Next() {
		var (
			id   int64
			lane store.Lane
		)
		if err := rows.Scan(&id, &lane.Namespace, &lane.TaskQueue, &lane.ActivityType, &lane.Node, &lane.Priority,
			&lane.FairnessKey); err != nil {
			return fmt.Errorf("load lanes: %w", err)
		}
		found[lane] = id
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load lanes: %w", err)
	}
	l.add(found)
	return nil
}

// add records committed lanes.
func (l *laneIDs) add(found map[store.Lane]int64) {
	if len(found) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ids == nil {
		l.ids, l.lanes = make(map[store.Lane]int64), make(map[int64]store.Lane)
	}
	for lane, id := range found {
		l.ids[lane], l.lanes[id] = id, lane
	}
}

// id is lane's id; false if no committed write created it (so no activity
// waits in it).
func (l *laneIDs) id(lane store.Lane) (int64, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	id, ok := l.ids[lane]
	return id, ok
}

// lane is the lane with id.
func (l *laneIDs) lane(id int64) (store.Lane, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	lane, ok := l.lanes[id]
	return lane, ok
}

// laneID is lane's id inside tx, creating the lane when it is new; a lane
// created here is added to created, for the cache once tx commits.
func (s *Store) laneID(ctx context.Context, tx *sql.Tx, lane store.Lane, created *map[store.Lane]int64) (int64, error) {
	if id, ok := s.lanes.id(lane); ok {
		return id, nil
	}
	if id, ok := (*created)[lane]; ok {
		return id, nil
	}
	args := []any{lane.Namespace, lane.TaskQueue, lane.ActivityType, lane.Node, lane.Priority, lane.FairnessKey}
	if _, err := tx.ExecContext(ctx, `INSERT INTO lanes (namespace, task_queue, activity_type, node, priority, fairness_key)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, args...); err != nil {
		return 0, fmt.Errorf("create lane %+v: %w", lane, err)
	}
	var id int64
	if err := tx.QueryRowContext(ctx, `SELECT id FROM lanes WHERE namespace = ? AND task_queue = ? AND activity_type = ?
		AND node = ? AND priority = ? AND fairness_key = ?`, args...).Scan(&id); err != nil {
		return 0, fmt.Errorf("create lane %+v: %w", lane, err)
	}
	if *created == nil {
		*created = make(map[store.Lane]int64)
	}
	(*created)[lane] = id
	return id, nil
}
