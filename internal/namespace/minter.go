package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aion-run/aion/internal/limit"
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

// Limits bound how many namespaces minting and explicit creation may make.
// A zero field means no cap.
type Limits struct {
	// PerRequest caps the namespaces one request may mint: a worker's
	// Register frame, or every schedule of one batch together (see
	// OneRequest). Namespaces that already exist do not count.
	PerRequest int
	// Total caps the namespaces the server holds. Minting or creating one
	// more is refused; existing namespaces stay usable.
	Total int
}

// Defaults of the caps (see Limits): a worker serving up to
// DefaultMaxMintPerRequest new tenants registers on a fresh open server in
// one frame, while one frame costs at most that many durable writes; a
// server holds DefaultMaxNamespaces before an operator must raise the cap.
const (
	DefaultMaxMintPerRequest = 100
	DefaultMaxNamespaces     = 10000
	// MaxWorkerNamespaces is the most namespaces one worker may serve: every
	// namespace times every activity type is an entry in the registry.
	MaxWorkerNamespaces = limit.WorkerNamespaces
)

// Minter applies the auto-create policy, the minting caps and placement
// admission on top of a namespace store. Callers authorize first: the
// minter trusts that every name it is handed was already granted to the
// caller, so it can never be used to mint a namespace for someone who may
// not use it. A refusal, for any reason, mints nothing.
type Minter struct {
	store  store.NamespaceStore
	policy AutoCreate
	// created is told about every namespace this minter created; nil is fine.
	created func(store.Namespace)

	// mu guards the fields below. known caches records, so a busy server
	// does not write a namespace's last-seen time on every registration;
	// it refreshes it at most once per refreshEvery. Placement changes go
	// through the minter and update it.
	mu     sync.Mutex
	known  map[string]cached
	limits Limits
	// counted: known holds every namespace of the store (loaded once when
	// a total cap first applies), so len(known) is the total. In a cluster
	// it also holds what other servers announced (Note).
	counted bool
	// reserved counts namespaces being minted right now, so concurrent
	// requests cannot together pass the total cap on one server.
	reserved int
	// loading serializes the one-time count.
	loading sync.Mutex
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
	m.rememberLocked(ns, time.Now())
}

func (m *Minter) rememberLocked(ns store.Namespace, seen time.Time) {
	if m.known == nil {
		m.known = make(map[string]cached)
	}
	m.known[ns.Name] = cached{ns: ns, seenAt: seen}
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

// NewMinter returns a minter over s with the given policy and no caps.
// onCreate, when not nil, is called once for every namespace record this
// minter creates.
func NewMinter(s store.NamespaceStore, policy AutoCreate, onCreate func(store.Namespace)) *Minter {
	return &Minter{store: s, policy: policy, created: onCreate}
}

// SetLimits sets the minting caps; call it before the minter is used.
func (m *Minter) SetLimits(l Limits) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.limits = l
}

// requestKey marks a context as one request whose mints share a budget.
type requestKey struct{}

type requestBudget struct {
	mu     sync.Mutex
	minted int
}

// OneRequest returns a context under which every Ensure counts against one
// per-request minting cap, for a request (a schedule batch) that mints
// through several calls. Without it each Ensure call is its own request.
func OneRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, requestKey{}, &requestBudget{})
}

// Ensure makes every namespace in names usable: under Open it records each
// one (with origin, when new); under Closed it refuses the first that does
// not exist. It refuses the whole set, minting nothing, when the new ones
// would pass a cap (an error wrapping ErrLimit).
func (m *Minter) Ensure(ctx context.Context, names []string, origin store.Origin) ([]store.Namespace, error) {
	return m.ensure(ctx, names, origin, nil)
}

// AdmitWorker runs the namespace plane's part of a worker registration for an
// already-authorized namespace set: it refuses the whole registration if
// node violates any pinned namespace, or if the new
// namespaces would pass a minting cap; otherwise it mints or gates each
// namespace. Checks on existing namespaces run before anything is minted.
func (m *Minter) AdmitWorker(ctx context.Context, names []string, node string) error {
	_, err := m.ensure(ctx, names, store.OriginWorker, func(ns store.Namespace) error { return Admit(ns, node) })
	return err
}

// ensure resolves names in three steps: read what exists (cache, then
// store), check admit on the existing records and the caps on the missing
// ones, and only then write. A refusal at the first two steps writes
// nothing; admit runs again on what the writes return, since another caller
// may have created or placed a namespace in between.
func (m *Minter) ensure(ctx context.Context, names []string, origin store.Origin, admit func(store.Namespace) error) ([]store.Namespace, error) {
	out := make([]store.Namespace, len(names))
	isNew := make([]bool, len(names))
	var stale, missing []int // positions to refresh or to mint
	for i, name := range names {
		if ns, ok := m.cachedRecord(name); ok {
			out[i] = ns
			continue
		}
		ns, err := m.store.GetNamespace(ctx, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if m.policy == Closed {
				return nil, fmt.Errorf("namespace %q does not exist and auto-create is closed: %w", name, ErrUnknown)
			}
			missing = append(missing, i)
			isNew[i] = true
			continue
		case err != nil:
			return nil, fmt.Errorf("look up namespace %q: %w", name, err)
		}
		out[i] = ns
		if m.policy == Closed {
			m.remember(ns)
		} else {
			stale = append(stale, i)
		}
	}
	if admit != nil {
		for i, ns := range out {
			if isNew[i] {
				continue // new namespaces are unplaced: admit never refuses them
			}
			if err := admit(ns); err != nil {
				return nil, err
			}
		}
	}
	release, err := m.reserve(ctx, len(missing))
	if err != nil {
		return nil, err
	}
	defer release()
	for _, i := range append(stale, missing...) {
		ns, err := m.register(ctx, names[i], origin)
		if err != nil {
			return nil, err
		}
		out[i] = ns
		if admit != nil {
			if err := admit(ns); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// reserve checks that fresh more namespaces fit the per-request cap (the
// budget in ctx, or this call alone) and the total cap, and holds them
// against the total until release is called.
func (m *Minter) reserve(ctx context.Context, fresh int) (release func(), err error) {
	if fresh == 0 {
		return func() {}, nil
	}
	if err := m.count(ctx); err != nil {
		return nil, err
	}
	b, _ := ctx.Value(requestKey{}).(*requestBudget)
	if b != nil {
		// Held to the end, so the budget is spent only when both caps pass.
		b.mu.Lock()
		defer b.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if per := m.limits.PerRequest; per > 0 {
		asked := fresh
		if b != nil {
			asked += b.minted
		}
		if asked > per {
			return nil, fmt.Errorf("this request would mint %d new namespaces, more than the %d one request may (--max-mint-per-request); create them first with `aion namespace create` or raise the cap: %w",
				asked, per, ErrLimit)
		}
	}
	if total := m.limits.Total; total > 0 {
		if have := len(m.known) + m.reserved; have+fresh > total {
			return nil, fmt.Errorf("%d new namespaces would make %d, more than the %d the server may hold (--max-namespaces): %w",
				fresh, have+fresh, total, ErrLimit)
		}
	}
	if b != nil {
		b.minted += fresh
	}
	m.reserved += fresh
	return func() {
		m.mu.Lock()
		m.reserved -= fresh
		m.mu.Unlock()
	}, nil
}

// count loads every namespace record once, when a total cap applies, so
// len(known) is the number the store holds.
func (m *Minter) count(ctx context.Context) error {
	m.mu.Lock()
	need := m.limits.Total > 0 && !m.counted
	m.mu.Unlock()
	if !need {
		return nil
	}
	m.loading.Lock()
	defer m.loading.Unlock()
	m.mu.Lock()
	done := m.counted
	m.mu.Unlock()
	if done {
		return nil
	}
	all, err := m.store.ListNamespaces(ctx)
	if err != nil {
		return fmt.Errorf("count namespaces: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ns := range all {
		if _, ok := m.known[ns.Name]; !ok {
			// Seen long ago: the record is counted but not trusted as fresh.
			m.rememberLocked(ns, time.Time{})
		}
	}
	m.counted = true
	return nil
}

// Create records a namespace explicitly; it works under either policy, is
// idempotent, and counts against the total cap (not the per-request one).
// created reports whether this call made the record.
func (m *Minter) Create(ctx context.Context, name string) (store.Namespace, bool, error) {
	if name == "" {
		return store.Namespace{}, false, fmt.Errorf("create namespace: name: empty: %w", ErrInvalid)
	}
	fresh := 0
	if _, ok := m.cachedRecord(name); !ok {
		_, err := m.store.GetNamespace(ctx, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			fresh = 1
		case err != nil:
			return store.Namespace{}, false, fmt.Errorf("create namespace %q: look it up: %w", name, err)
		}
	}
	release, err := m.reserve(ctx, fresh)
	if err != nil {
		return store.Namespace{}, false, fmt.Errorf("create namespace %q: %w", name, err)
	}
	defer release()
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
