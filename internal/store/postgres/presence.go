package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
)

// presenceClass is the first key of every presence lock ("aion" as bytes);
// the second is the server's ID. Two-key advisory locks do not share a key
// space with the one-key locks of migrations and flow limits.
const presenceClass int32 = 0x61696f6e

// presenceKey is a server's presence lock key: its ID, which fits in 31 bits
// for the first two billion joins of a database (past that, two servers may
// share a key, which only makes a restart wait out a lease).
func presenceKey(id store.ServerID) int32 { return int32(id & 0x7fffffff) }

// presence holds, on a connection of its own, a session-level advisory lock
// for every server this store joined and has not left. PostgreSQL releases
// the locks the moment that session ends, and a server's session ends with
// its process: so a free presence lock of a member whose lease has not run
// out proves its process gone (killed, or cut off from the database, where
// fencing on its ID refuses whatever it still writes), and a restart under
// its name may take over at once instead of waiting out the lease.
type presence struct {
	cfg *pgx.ConnConfig

	mu   sync.Mutex
	conn *pgx.Conn
	ids  map[store.ServerID]bool
}

// hold takes id's presence lock.
func (p *presence) hold(ctx context.Context, id store.ServerID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connectLocked(ctx); err != nil {
		return err
	}
	if err := p.lockLocked(ctx, id); err != nil {
		return err
	}
	if p.ids == nil {
		p.ids = make(map[store.ServerID]bool)
	}
	p.ids[id] = true
	return nil
}

func (p *presence) lockLocked(ctx context.Context, id store.ServerID) error {
	var ok bool
	if err := p.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::integer, $2::integer)`,
		presenceClass, presenceKey(id)).Scan(&ok); err != nil {
		p.dropLocked()
		return fmt.Errorf("take the presence lock of server %d: %w", id, dbErr(err))
	}
	if !ok {
		return fmt.Errorf("take the presence lock of server %d: another session holds it", id)
	}
	return nil
}

func (p *presence) connectLocked(ctx context.Context) error {
	if p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	p.dropLocked()
	conn, err := pgx.ConnectConfig(ctx, p.cfg.Copy())
	if err != nil {
		return fmt.Errorf("connect for presence locks: %w", dbErr(err))
	}
	p.conn = conn
	return nil
}

func (p *presence) dropLocked() {
	if p.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = p.conn.Close(ctx)
		cancel()
		p.conn = nil
	}
}

// let releases id's presence lock, closing the connection once it holds
// none.
func (p *presence) let(ctx context.Context, id store.ServerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ids[id] {
		return
	}
	delete(p.ids, id)
	if len(p.ids) == 0 {
		p.dropLocked()
		return
	}
	if p.conn != nil {
		if _, err := p.conn.Exec(ctx, `SELECT pg_advisory_unlock($1::integer, $2::integer)`,
			presenceClass, presenceKey(id)); err != nil {
			p.dropLocked() // a new session holds the others again at the next renewal
		}
	}
}

// check makes sure id's presence lock is still held, taking it again on a
// new connection when the old one broke (a database restart, a network
// cut). It runs with each lease renewal.
func (p *presence) check(ctx context.Context, id store.ServerID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ids[id] {
		return nil
	}
	if p.conn != nil && !p.conn.IsClosed() {
		if _, err := p.conn.Exec(ctx, `SELECT 1`); err == nil {
			return nil
		}
	}
	if err := p.connectLocked(ctx); err != nil {
		return err
	}
	for held := range p.ids {
		if err := p.lockLocked(ctx, held); err != nil {
			return err
		}
	}
	return nil
}

// only reports whether id is the one server this store joined and has not
// left.
func (p *presence) only(id store.ServerID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids) == 1 && p.ids[id]
}

// close ends the session, releasing every presence lock.
func (p *presence) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropLocked()
	p.ids = nil
}
