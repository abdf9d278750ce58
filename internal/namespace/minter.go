package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// AutoCreate is the policy for namespaces nobody created explicitly.
type AutoCreate string

// The auto-create policies.
const (
	// Open mints a namespace on its first authorized use.
	Open AutoCreate = "open"
	// Closed refuses namespaces that do not exist yet.
	Closed AutoCreate = "closed"
)

// ParseAutoCreate reads a policy name as given on a flag or in config.
func ParseAutoCreate(s string) (AutoCreate, error) {
	switch p := AutoCreate(s); p {
	case Open, Closed:
		return p, nil
	}
	return "", fmt.Errorf("auto-create %q: want %q or %q", s, Open, Closed)
}

// Minter applies the auto-create policy and placement admission on top of a
// namespace store. Callers authorize first: the minter trusts that every name
// it is handed was already granted to the caller, so it can never be used to
// mint a namespace for someone who may not use it.
type Minter struct {
	store  store.NamespaceStore
	policy AutoCreate
	// created is told about every namespace this minter created; nil is fine.
	created func(store.Namespace)

	// known caches records, so a busy server does not write a namespace's
	// last-seen time on every registration; it refreshes it at most once
	// per refreshEvery. Placement changes go through the minter and update it.
	mu    sync.Mutex
	known map[string]cached
}

type cached struct {
	ns     store.Namespace
	seenAt time.Time
}

// refreshEvery bounds how stale a namespace's last-seen time may be.
const refreshEvery = time.Minute

func (m *Minter) cachedRecord(name string) (store.Namespace, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.known[name]
	if !ok || time.Since(c.seenAt) > refreshEvery {
		return store.Namespace{}, false
	}
	return c.ns, true
}

func (m *Minter) remember(ns store.Namespace) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.known == nil {
		m.known = make(map[string]cached)
	}
	m.known[ns.Name] = cached{ns: ns, seenAt: time.Now()}
}

// Note caches a namespace record learned elsewhere: another server of the
// cluster created it or changed its placement.
func (m *Minter) Note(ns store.Namespace) { m.remember(ns) }

// SetPlacement changes a namespace's placement durably and in the cache;
// a missing namespace is an error wrapping store.ErrNotFound.
func (m *Minter) SetPlacement(ctx context.Context, name string, p store.Placement) (store.Namespace, error) {
	ns, err := m.store.SetPlacement(ctx, name, p)
	if err != nil {
		return store.Namespace{}, err
	}
	m.remember(ns)
	return ns, nil
}

// NewMinter returns a minter over s with the given policy. onCreate, when not
// nil, is called once for every namespace record this minter creates.
func NewMinter(s store.NamespaceStore, policy AutoCreate, onCreate func(store.Namespace)) *Minter {
	return &Minter{store: s, policy: policy, created: onCreate}
}

// Policy returns the minter's auto-create policy.
func (m *Minter) Policy() AutoCreate { return m.policy }

// Ensure makes every namespace in names usable: under Open it records each
// one (with origin, when new); under Closed it refuses the first that does
// not exist and creates nothing.
func (m *Minter) Ensure(ctx context.Context, names []string, origin store.Origin) ([]store.Namespace, error) {
	out := make([]store.Namespace, 0, len(names))
	if m.policy == Closed {
		for _, name := range names {
			if ns, ok := m.cachedRecord(name); ok {
				out = append(out, ns)
				continue
			}
			ns, err := m.store.GetNamespace(ctx, name)
			if errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("namespace %q does not exist and auto-create is closed: %w", name, ErrUnknown)
			}
			if err != nil {
				return nil, fmt.Errorf("look up namespace %q: %w", name, err)
			}
			m.remember(ns)
			out = append(out, ns)
		}
		return out, nil
	}
	for _, name := range names {
		if ns, ok := m.cachedRecord(name); ok {
			out = append(out, ns)
			continue
		}
		ns, err := m.register(ctx, name, origin)
		if err != nil {
			return nil, err
		}
		out = append(out, ns)
	}
	return out, nil
}

// Create records a namespace explicitly; it works under either policy and is
// idempotent. created reports whether this call made the record.
func (m *Minter) Create(ctx context.Context, name string) (store.Namespace, bool, error) {
	if name == "" {
		return store.Namespace{}, false, fmt.Errorf("create namespace: name: empty: %w", ErrInvalid)
	}
	ns, created, err := m.store.RegisterNamespace(ctx, name, store.OriginExplicit)
	if err != nil {
		return store.Namespace{}, false, fmt.Errorf("create namespace %q: %w", name, err)
	}
	m.remember(ns)
	if created && m.created != nil {
		m.created(ns)
	}
	return ns, created, nil
}

func (m *Minter) register(ctx context.Context, name string, origin store.Origin) (store.Namespace, error) {
	ns, created, err := m.store.RegisterNamespace(ctx, name, origin)
	if err != nil {
		return store.Namespace{}, fmt.Errorf("mint namespace %q: %w", name, err)
	}
	m.remember(ns)
	if created && m.created != nil {
		m.created(ns)
	}
	return ns, nil
}

// AdmitWorker runs the namespace plane's part of a worker registration for an
// already-authorized namespace set: it mints or gates each namespace, then
// refuses the whole registration if node violates any pinned namespace.
func (m *Minter) AdmitWorker(ctx context.Context, names []string, node string) error {
	records, err := m.Ensure(ctx, names, store.OriginWorker)
	if err != nil {
		return err
	}
	for _, ns := range records {
		if err := Admit(ns, node); err != nil {
			return err
		}
	}
	return nil
}

// Admit reports whether a worker on node may serve namespace ns: only a pinned
// placement refuses, and only a worker whose node is missing or not listed.
func Admit(ns store.Namespace, node string) error {
	if ns.Placement.Allows(node) {
		return nil
	}
	if node == "" {
		return fmt.Errorf("namespace %q is %s and the worker has no node: %w", ns.Name, ns.Placement, ErrPlacement)
	}
	return fmt.Errorf("namespace %q is %s and worker node %q is not among them: %w",
		ns.Name, ns.Placement, node, ErrPlacement)
}
