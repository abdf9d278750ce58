package cluster

import (
	"context"
	"encoding/json"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// The worker directory: every server publishes its workers to the store, so
// each can list and address the workers of all. The registry hooks queue
// writes that one goroutine applies in order, so a hook never waits on the
// database.

// usageEvery is how often changed slot usage of local workers is published.
const usageEvery = time.Second

func (m *Membership) enqueue(f func(context.Context) error) {
	m.dirMu.Lock()
	m.dirQueue = append(m.dirQueue, f)
	m.dirMu.Unlock()
	select {
	case m.dirWake <- struct{}{}:
	default:
	}
}

// WorkerChanged publishes a worker of this server that connected or began
// draining. It does not wait for the database.
func (m *Membership) WorkerChanged(w registry.WorkerInfo) {
	info, err := json.Marshal(w)
	if err != nil {
		m.log.Error("encode worker record", "worker", w.ID, "err", err)
		return
	}
	m.enqueue(func(ctx context.Context) error {
		if err := m.d.Store.PutWorker(ctx, store.WorkerRecord{ID: uint64(w.ID), Server: m.d.Self.ID, Info: info}); err != nil {
			return err
		}
		return m.d.Store.PublishNotice(ctx, store.Notice{Kind: store.NoticeTopology, Name: topologyChanged(m.d.Self.ID)})
	})
}

// WorkerLeft removes a worker of this server from the directory, telling the
// other servers why it left. It does not wait for the database.
func (m *Membership) WorkerLeft(w registry.WorkerInfo, reason registry.Reason) {
	m.enqueue(func(ctx context.Context) error {
		if err := m.d.Store.DeleteWorker(ctx, uint64(w.ID)); err != nil {
			return err
		}
		return m.d.Store.PublishNotice(ctx, store.Notice{Kind: store.NoticeTopology, Name: topologyGone(m.d.Self.ID, w.ID, reason)})
	})
}

// writeDirectory applies queued directory writes in order, and every
// usageEvery republishes local workers whose slot usage changed.
func (m *Membership) writeDirectory(ctx context.Context) {
	t := time.NewTicker(usageEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.dirWake:
		case <-t.C:
			m.publishUsage()
		}
		m.dirMu.Lock()
		q := m.dirQueue
		m.dirQueue = nil
		m.dirMu.Unlock()
		for _, f := range q {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				m.log.Warn("update the worker directory", "err", err)
			}
		}
	}
}

func (m *Membership) publishUsage() {
	live := map[registry.WorkerID]bool{}
	for _, w := range m.d.Registry.Workers() {
		live[w.ID] = true
		if used, ok := m.published[w.ID]; ok && used == w.SlotsInUse {
			continue
		}
		m.published[w.ID] = w.SlotsInUse
		info, err := json.Marshal(w)
		if err != nil {
			continue
		}
		m.enqueue(func(ctx context.Context) error {
			if !m.d.Registry.IsRegistered(w.ID) {
				return nil // it left meanwhile; its removal is queued before this
			}
			return m.d.Store.PutWorker(ctx, store.WorkerRecord{ID: uint64(w.ID), Server: m.d.Self.ID, Info: info})
		})
	}
	for id := range m.published {
		if !live[id] {
			delete(m.published, id)
		}
	}
}

// RemoteWorker is a worker connected to another server of the cluster.
type RemoteWorker struct {
	Server store.ServerID
	Info   registry.WorkerInfo
}

// otherWorkers reads the directory's workers of the other servers; an
// unreadable record is logged and left out.
func (m *Membership) otherWorkers(ctx context.Context) ([]RemoteWorker, error) {
	recs, err := m.d.Store.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	var out []RemoteWorker
	for _, r := range recs {
		if r.Server == m.d.Self.ID {
			continue
		}
		o := RemoteWorker{Server: r.Server}
		if err := json.Unmarshal(r.Info, &o.Info); err != nil {
			m.log.Warn("unreadable worker record", "worker", r.ID, "err", err)
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

// RemoteWorkers lists the workers connected to the other servers, as they
// last published them (slot usage at most about usageEvery old).
func (m *Membership) RemoteWorkers(ctx context.Context) ([]registry.WorkerInfo, error) {
	others, err := m.otherWorkers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]registry.WorkerInfo, len(others))
	for i, o := range others {
		out[i] = o.Info
	}
	return out, nil
}

// FindWorker finds a worker connected to another server; false when no
// other server has it.
func (m *Membership) FindWorker(ctx context.Context, id registry.WorkerID) (RemoteWorker, bool, error) {
	others, err := m.otherWorkers(ctx)
	if err != nil {
		return RemoteWorker{}, false, err
	}
	for _, o := range others {
		if o.Info.ID == id {
			return o, true, nil
		}
	}
	return RemoteWorker{}, false, nil
}
