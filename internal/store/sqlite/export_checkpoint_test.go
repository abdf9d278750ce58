package sqlite

import (
	"context"
	"time"

	"github.com/aion-run/aion/internal/clock"
)

// CheckpointConfig sets the checkpointer for a test; zero fields keep the
// defaults.
type CheckpointConfig struct {
	// Frames are the pages in the log not yet copied that start a PASSIVE
	// checkpoint; MaxWAL is the log's size past which a TRUNCATE runs.
	Frames uint32
	MaxWAL int64
	// Wait bounds a TRUNCATE's wait for locks; Backoff spaces TRUNCATEs
	// that could not finish, by Clock.
	Wait, Backoff time.Duration
	Clock         clock.Clock
	// Hook is called before every checkpoint with its mode.
	Hook func(ctx context.Context, mode string)
}

// WithCheckpoints sets the checkpointer as c says.
func WithCheckpoints(c CheckpointConfig) Option {
	return func(o *options) {
		o.ckpt = checkpointOptions{frames: c.Frames, maxWAL: c.MaxWAL, wait: c.Wait, backoff: c.Backoff, clock: c.Clock, hook: c.Hook}
	}
}

// CheckpointStats count what the checkpointer has done.
type CheckpointStats = checkpointStats

// CheckpointStats returns what the checkpointer has done so far.
func (s *Store) CheckpointStats() CheckpointStats { return s.ckpt.snapshot() }

// SettleCheckpoints returns once every commit made before the call has
// been handled by the checkpointer.
func (s *Store) SettleCheckpoints(ctx context.Context) error { return s.ckpt.waitSettled(ctx) }

// WALIndex returns the frames the write-ahead log holds and how many of
// them are copied into the database file, as its shared-memory index says.
func (s *Store) WALIndex() (frames, copied uint32, ok bool) { return s.ckpt.walIndex() }

// WriterAutocheckpoint reads wal_autocheckpoint on the writer connection.
func (s *Store) WriterAutocheckpoint(ctx context.Context) (int, error) {
	var n int
	err := s.writer.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&n)
	return n, err
}
