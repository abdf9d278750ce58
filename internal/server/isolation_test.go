package server_test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// The tenant-isolation property, checked by a seeded generator of random
// operations over five tenants and keys of every role. Run it long with
//
//	AION_ISOLATION_OPS=1000000 go test -run TestTenantIsolationHoldsUnderRandomOperations -timeout 3h ./internal/server/
//
// and replay a failure with the AION_ISOLATION_SEED it prints.

// isoOp is one kind of operation the generator performs.
type isoOp int

const (
	opSchedule isoOp = iota
	opBatch
	opGet
	opList
	opWait
	opCancel
	opIntervene
	opRegister
	opDrain
	opPlace
	opCreate
	opNamespaceGet
	opNamespaceList
	opListWorkers
	opWatch
	opRelease // a worker finishes a task it held; no key involved
	numOps
)

var opNames = [numOps]string{"schedule", "batch", "get", "list", "wait", "cancel", "intervene", "register",
	"drain", "place", "create", "namespace-get", "namespace-list", "list-workers", "watch", "release"}

func (o isoOp) String() string { return opNames[o] }

// opWeights is how often each operation is drawn.
var opWeights = [numOps]int{opSchedule: 20, opBatch: 6, opGet: 10, opList: 6, opWait: 5, opCancel: 5, opIntervene: 5,
	opRegister: 6, opDrain: 3, opPlace: 3, opCreate: 3, opNamespaceGet: 4, opNamespaceList: 3, opListWorkers: 3, opWatch: 1,
	opRelease: 6}

// isoRole is one role the server knows and the operations it may call.
// Adding a role to the server is one entry here: the generator makes keys of
// it for every tenant, for two tenants at once and for every namespace, and
// expects PermissionDenied for every operation not listed.
type isoRole struct {
	role auth.Role
	may  []isoOp
}

var isoRoles = []isoRole{
	{auth.RoleWorker, []isoOp{opRegister}},
	{auth.RoleClient, []isoOp{opSchedule, opBatch, opGet, opList, opWait, opCancel, opIntervene, opNamespaceGet, opNamespaceList}},
	{auth.RoleAdmin, []isoOp{opSchedule, opBatch, opGet, opList, opWait, opCancel, opIntervene, opRegister, opDrain, opPlace,
		opCreate, opNamespaceGet, opNamespaceList, opListWorkers, opWatch}},
	// Watch needs a reader granted "*" (it is not a scoped view for readers):
	// isoKey.may lets such a reader watch; a scoped reader's watch is
	// PermissionDenied.
	{auth.RoleReader, []isoOp{opGet, opList, opWait, opNamespaceGet, opNamespaceList, opListWorkers}},
}

const (
	isoTenants = 5
	// isoMaxNamespaces and isoMaxMint are the caps the generator's server
	// runs with, low enough that minting past them happens often.
	isoMaxNamespaces = 14
	isoMaxMint       = 2
	isoMaxWorkers    = 24 // live generated workers; past it the generator drains
	isoMaxHeld       = 4  // "slow" tasks a worker holds before it finishes the oldest
)

func isoTenant(i int) string { return fmt.Sprintf("tenant-%d", i) }

// isoExtras are namespaces no tenant is granted; only keys granted "*" may use them.
var isoExtras = []string{"shared-0", "shared-1", "shared-2"}

// isoKey is one credential and what the generator expects of it.
type isoKey struct {
	name   string
	secret string // empty: no credential at all
	valid  bool   // false: the server does not know it (Unauthenticated)
	role   *isoRole
	all    bool // granted every namespace
	grants []string
}

func (k *isoKey) allows(ns string) bool { return k.all || slices.Contains(k.grants, ns) }

func (k *isoKey) may(op isoOp) bool {
	if op == opWatch && k.all && k.role != nil && k.role.role == auth.RoleReader {
		return true // a reader granted "*" watches the whole cluster view
	}
	return k.role != nil && slices.Contains(k.role.may, op)
}

func (k *isoKey) opts() []grpc.CallOption {
	if k.secret == "" {
		return nil
	}
	return []grpc.CallOption{grpc.PerRPCCredentials(bearer(k.secret))}
}

func isoKeys() []*isoKey {
	var keys []*isoKey
	for i := range isoRoles {
		r := &isoRoles[i]
		add := func(scope string, all bool, grants ...string) {
			name := string(r.role) + "@" + scope
			keys = append(keys, &isoKey{name: name, secret: name + "-secret", valid: true, role: r, all: all, grants: grants})
		}
		for t := range isoTenants {
			add(isoTenant(t), false, isoTenant(t))
		}
		add("pair", false, isoTenant(0), isoTenant(1))
		add("all", true)
	}
	keys = append(keys, &isoKey{name: "anonymous"}, &isoKey{name: "unknown-key", secret: "not-a-key"})
	return keys
}

// isoActivity is what the generator scheduled.
type isoActivity struct {
	ns, id, typ string
	refused     bool // the schedule was refused: it must never exist
	kept        bool // the schedule was accepted
}

func isoPayload(ns, id string) []byte { return []byte("secret of " + ns + "/" + id) }

// isoWorker is one connected worker stream and what it may receive.
type isoWorker struct {
	g       *isoGen
	id      uint64
	key     *isoKey
	set     []string
	types   []string
	cancel  context.CancelFunc
	stream  grpc.BidiStreamingClient[aionv1.WorkerMessage, aionv1.ServerMessage]
	sendMu  sync.Mutex
	mu      sync.Mutex
	held    []*aionv1.ActivityTask // "slow" tasks it has not finished
	done    chan struct{}
	drained bool
}

// isoGen is the generator: the server, the keys, the model of what exists,
// and the violations the workers saw.
type isoGen struct {
	t     *testing.T
	b     *bundle
	rng   *rand.Rand
	keys  []*isoKey
	ops   *isoKey // the operator, for checks
	step  int
	trail []string // the last operations, for a failure report

	namespaces map[string]bool   // what must exist, exactly
	pinned     map[string]bool   // namespaces pinned (always to n1 and maybe n2)
	pinnedTo   map[string]string // the pinned namespace's second node, if any
	fresh      int               // names minted so far for never-used namespaces

	mu       sync.Mutex // guards acts and violations (workers read acts)
	acts     map[string]*isoActivity
	ids      []string // every scheduled id, in order
	slow     []string // the "slow" ones among them
	nextID   int
	violated []string

	workers []*isoWorker // live generated workers
	base    []*isoWorker // the tenants' permanent workers: never drained
	wg      sync.WaitGroup

	// For the summary: answers by code, and frames the workers received.
	answers                     map[codes.Code]int
	tasks, interventions, stops atomic.Int64
}

func (g *isoGen) violation(format string, args ...any) {
	g.mu.Lock()
	g.violated = append(g.violated, fmt.Sprintf(format, args...))
	g.mu.Unlock()
}

func (g *isoGen) fail(format string, args ...any) {
	g.t.Helper()
	g.t.Fatalf("step %d: %s\nlast operations:\n  %s", g.step, fmt.Sprintf(format, args...), strings.Join(g.trail, "\n  "))
}

func (g *isoGen) note(format string, args ...any) {
	g.trail = append(g.trail, fmt.Sprintf("%d: ", g.step)+fmt.Sprintf(format, args...))
	if len(g.trail) > 25 {
		g.trail = g.trail[1:]
	}
}

func isoEnvInt(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

// TestTenantIsolationHoldsUnderRandomOperations: five tenants, keys of every
// role for one tenant, two tenants and every namespace, plus no key and an
// unknown key, perform a random sequence of operations (schedule, batch,
// get, list, wait, cancel, intervene, register workers with random namespace
// sets, drain, place, create, namespace reads, worker list, watch). After
// every step: no worker has received work, an intervention or a cancel from
// a namespace outside its set; the namespaces that exist are exactly those
// authorized callers minted within the caps (so no refused caller minted
// anything); every response carried only namespaces the caller is granted
// and activities of the namespace asked for.
func TestTenantIsolationHoldsUnderRandomOperations(t *testing.T) {
	t.Parallel()
	ops := isoEnvInt(t, "AION_ISOLATION_OPS", 1000)
	seed := isoEnvInt(t, "AION_ISOLATION_SEED", uint64(time.Now().UnixNano()))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with AION_ISOLATION_SEED=%d AION_ISOLATION_OPS=%d", seed, ops)
		}
	})

	keys := isoKeys()
	b := setup(t, func(c *server.Config) {
		c.Auth.Mode = "token"
		for _, k := range keys {
			if k.valid {
				grants := k.grants
				if k.all {
					grants = []string{"*"}
				}
				c.Auth.Keys = append(c.Auth.Keys, key(k.name, k.secret, []auth.Role{k.role.role}, grants...))
			}
		}
		c.MaxNamespaces, c.MaxMintPerRequest = isoMaxNamespaces, isoMaxMint
		c.HeartbeatWindow = 24 * time.Hour // the generator's workers do not ping
	})
	g := &isoGen{t: t, b: b, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), keys: keys,
		namespaces: map[string]bool{}, pinned: map[string]bool{}, pinnedTo: map[string]string{}, acts: map[string]*isoActivity{},
		answers: map[codes.Code]int{}}
	for _, k := range keys {
		if k.valid && k.role.role == auth.RoleAdmin && k.all {
			g.ops = k
		}
	}
	defer g.stop()

	// Each tenant's permanent worker serves every type on node n1, so its
	// "job" activities always finish.
	for tn := range isoTenants {
		ns := isoTenant(tn)
		k := g.keyFor(auth.RoleWorker, ns)
		w, err := g.connect(k, []string{ns}, []string{"job", "slow", "other"}, "n1", 1000)
		if err != nil {
			t.Fatalf("base worker of %s: %v", ns, err)
		}
		g.base = append(g.base, w)
		g.namespaces[ns] = true
	}

	total := 0
	for _, w := range opWeights {
		total += w
	}
	began := time.Now()
	var counts [numOps]int
	for g.step = 1; g.step <= int(ops); g.step++ {
		n := g.rng.IntN(total)
		op := isoOp(0)
		for ; n >= opWeights[op]; op++ {
			n -= opWeights[op]
		}
		counts[op]++
		g.run(op)
		g.checkInvariants()
		if g.step%100000 == 0 {
			t.Logf("%d operations in %v, every check held", g.step, time.Since(began).Round(time.Second))
		}
	}
	var summary []string
	for op, n := range counts {
		summary = append(summary, fmt.Sprintf("%s %d", isoOp(op), n))
	}
	var answers []string
	for _, c := range slices.Sorted(maps.Keys(g.answers)) {
		answers = append(answers, fmt.Sprintf("%s %d", c, g.answers[c]))
	}
	t.Logf("seed %d: %d operations in %v\n  operations: %s\n  answers: %s\n  %d activities scheduled, %d namespaces; workers received %d tasks, %d interventions, %d cancels",
		seed, ops, time.Since(began).Round(time.Millisecond), strings.Join(summary, ", "), strings.Join(answers, ", "),
		len(g.ids), len(g.namespaces), g.tasks.Load(), g.interventions.Load(), g.stops.Load())
}

// keyFor returns the key of role granted exactly ns.
func (g *isoGen) keyFor(role auth.Role, ns string) *isoKey {
	for _, k := range g.keys {
		if k.valid && k.role.role == role && !k.all && slices.Equal(k.grants, []string{ns}) {
			return k
		}
	}
	g.t.Fatalf("no %s key for %s", role, ns)
	return nil
}

// pickKey mostly picks a key whose role may call op, so that work gets
// done, and otherwise any key, so that every refusal is tried.
func (g *isoGen) pickKey(op isoOp) *isoKey {
	if g.rng.IntN(10) < 7 {
		var may []*isoKey
		for _, k := range g.keys {
			if k.may(op) {
				may = append(may, k)
			}
		}
		if len(may) > 0 {
			return may[g.rng.IntN(len(may))]
		}
	}
	return g.keys[g.rng.IntN(len(g.keys))]
}

// pickNamespace favours the key's own namespaces, then any tenant's, then
// the extras and never-used names.
func (g *isoGen) pickNamespace(k *isoKey) string {
	switch r := g.rng.IntN(100); {
	case r < 55 && len(k.grants) > 0:
		return k.grants[g.rng.IntN(len(k.grants))]
	case r < 85:
		return isoTenant(g.rng.IntN(isoTenants))
	case r < 95:
		return isoExtras[g.rng.IntN(len(isoExtras))]
	default:
		g.fresh++
		return fmt.Sprintf("fresh-%d", g.fresh)
	}
}

// pickActivity returns a scheduled activity, and the namespace to ask for
// it under: usually its own, sometimes another (a cross-tenant probe).
func (g *isoGen) pickActivity(k *isoKey, slow bool) (*isoActivity, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ids) == 0 {
		return &isoActivity{ns: isoTenant(0), id: "never-scheduled"}, isoTenant(0)
	}
	// Favour recent ones: they are the ones still running; and for a
	// command, "slow" ones: their workers hold them.
	ids := g.ids
	if slow && len(g.slow) > 0 && g.rng.IntN(10) < 7 {
		ids = g.slow
	}
	i := len(ids) - 1 - min(len(ids)-1, int(g.rng.ExpFloat64()*10))
	a := g.acts[ids[i]]
	if g.rng.IntN(4) == 0 {
		return a, g.pickNamespace(k)
	}
	return a, a.ns
}

func (g *isoGen) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}

// expect checks the outcome of a call whose only acceptable result is code
// want (codes.OK for success).
func (g *isoGen) expect(what string, err error, want ...codes.Code) {
	g.t.Helper()
	if !slices.Contains(want, status.Code(err)) {
		g.fail("%s: %v, want %v", what, err, want)
	}
	g.answers[status.Code(err)]++
}

// gate is what the server must answer before anything else: Unauthenticated
// without a valid key, PermissionDenied for a role that may not call op.
func (g *isoGen) gate(k *isoKey, op isoOp) (codes.Code, bool) {
	switch {
	case !k.valid:
		return codes.Unauthenticated, false
	case !k.may(op):
		return codes.PermissionDenied, false
	}
	return codes.OK, true
}

// roomFor reports whether n more namespaces fit the total cap.
func (g *isoGen) roomFor(n int) bool { return len(g.namespaces)+n <= isoMaxNamespaces }

func (g *isoGen) run(op isoOp) {
	k := g.pickKey(op)
	switch op {
	case opSchedule:
		g.schedule(k)
	case opBatch:
		g.batch(k)
	case opGet, opWait, opCancel, opIntervene:
		g.readOrAct(k, op)
	case opList:
		g.list(k)
	case opRegister:
		g.register(k)
	case opDrain:
		g.drain(k)
	case opPlace:
		g.place(k)
	case opCreate:
		g.create(k)
	case opNamespaceGet:
		g.namespaceGet(k)
	case opNamespaceList:
		g.namespaceList(k)
	case opListWorkers:
		g.listWorkers(k)
	case opWatch:
		g.watch(k)
	case opRelease:
		g.release()
	}
}

// newActivity records an activity about to be scheduled, so a worker that
// receives it can tell where it belongs.
func (g *isoGen) newActivity(ns string) *isoActivity {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nextID++
	typ := "job"
	switch r := g.rng.IntN(10); {
	case r < 2:
		typ = "slow"
	case r < 3:
		typ = "other"
	}
	a := &isoActivity{ns: ns, id: fmt.Sprintf("act-%d", g.nextID), typ: typ}
	g.acts[a.id] = a
	return a
}

func (g *isoGen) kept(a *isoActivity) {
	g.mu.Lock()
	a.kept = true
	g.ids = append(g.ids, a.id)
	if a.typ == "slow" {
		g.slow = append(g.slow, a.id)
	}
	g.mu.Unlock()
}

func (g *isoGen) refused(a *isoActivity) {
	g.mu.Lock()
	a.refused = true
	g.mu.Unlock()
	// It must not exist.
	ctx, cancel := g.ctx()
	defer cancel()
	_, err := g.b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: a.ns, Id: a.id}, g.ops.opts()...)
	if status.Code(err) != codes.NotFound {
		g.fail("a refused schedule of %s/%s left it behind: %v", a.ns, a.id, err)
	}
}

// mintOutcome is what minting ns (when it does not exist) must answer.
func (g *isoGen) mintOutcome(ns string, budget *int) codes.Code {
	if g.namespaces[ns] {
		return codes.OK
	}
	if *budget+1 > isoMaxMint || !g.roomFor(1) {
		return codes.ResourceExhausted
	}
	*budget++
	return codes.OK
}

func (g *isoGen) scheduleRequest(a *isoActivity) *aionv1.ScheduleRequest {
	return &aionv1.ScheduleRequest{Namespace: a.ns, Id: a.id, ActivityType: a.typ, Payload: isoPayload(a.ns, a.id)}
}

func (g *isoGen) schedule(k *isoKey) {
	ns := g.pickNamespace(k)
	a := g.newActivity(ns)
	want, ok := g.gate(k, opSchedule)
	if ok {
		want = codes.PermissionDenied
		if k.allows(ns) {
			budget := 0
			want = g.mintOutcome(ns, &budget)
		}
	}
	g.note("%s schedules %s/%s (%s)", k.name, ns, a.id, a.typ)
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := g.b.activities.Schedule(ctx, g.scheduleRequest(a), k.opts()...)
	g.expect(fmt.Sprintf("%s schedules into %s", k.name, ns), err, want)
	if err != nil {
		g.refused(a)
		return
	}
	g.namespaces[ns] = true
	g.kept(a)
	g.checkActivity(k, "schedule", resp.GetActivity(), ns, a.id)
}

func (g *isoGen) batch(k *isoKey) {
	n := 1 + g.rng.IntN(5)
	var acts []*isoActivity
	var reqs []*aionv1.ScheduleRequest
	for range n {
		a := g.newActivity(g.pickNamespace(k))
		acts = append(acts, a)
		reqs = append(reqs, g.scheduleRequest(a))
	}
	want, ok := g.gate(k, opBatch)
	g.note("%s schedules a batch of %d", k.name, n)
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := g.b.activities.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{Requests: reqs}, k.opts()...)
	if !ok {
		g.expect(k.name+" schedules a batch", err, want)
		for _, a := range acts {
			g.refused(a)
		}
		return
	}
	g.expect(k.name+" schedules a batch", err, codes.OK)
	budget := 0
	for i, a := range acts {
		want := codes.PermissionDenied
		if k.allows(a.ns) {
			want = g.mintOutcome(a.ns, &budget)
		}
		r := resp.GetResults()[i]
		got := codes.Code(r.GetError().GetCode())
		if got != want {
			g.fail("%s batch item %d into %s: %v %q, want %v", k.name, i, a.ns, got, r.GetError().GetMessage(), want)
		}
		if got != codes.OK {
			g.refused(a)
			continue
		}
		g.namespaces[a.ns] = true
		g.kept(a)
		g.checkActivity(k, "batch", r.GetActivity(), a.ns, a.id)
	}
}

// checkActivity: a response carries the activity asked for, of the
// namespace asked for, with that namespace's payload and nothing else.
func (g *isoGen) checkActivity(k *isoKey, what string, got *aionv1.Activity, ns, id string) {
	g.t.Helper()
	if !k.allows(got.GetNamespace()) {
		g.fail("%s %s returned namespace %q, which it is not granted", k.name, what, got.GetNamespace())
	}
	if got.GetNamespace() != ns || got.GetId() != id {
		g.fail("%s %s of %s/%s returned %s/%s", k.name, what, ns, id, got.GetNamespace(), got.GetId())
	}
	if p := string(got.GetPayload()); p != "" && p != string(isoPayload(ns, id)) {
		g.fail("%s %s of %s/%s returned payload %q", k.name, what, ns, id, p)
	}
	if r := string(got.GetResult()); r != "" && !strings.HasSuffix(r, " for "+ns+"/"+id) {
		g.fail("%s %s of %s/%s returned result %q", k.name, what, ns, id, r)
	}
}

func (g *isoGen) exists(a *isoActivity, ns string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return a.ns == ns && a.kept
}

// readOrAct runs get, wait, cancel or intervene on one activity.
func (g *isoGen) readOrAct(k *isoKey, op isoOp) {
	a, ns := g.pickActivity(k, op == opIntervene || op == opCancel)
	want, ok := g.gate(k, op)
	found := g.exists(a, ns)
	if ok {
		switch {
		case !k.allows(ns):
			want = codes.PermissionDenied
		case !found:
			want = codes.NotFound
		}
	}
	g.note("%s %s %s/%s", k.name, op, ns, a.id)
	ctx, cancel := g.ctx()
	defer cancel()
	opts := k.opts()
	var (
		got *aionv1.Activity
		err error
	)
	accept := []codes.Code{want}
	switch op {
	case opGet:
		var r *aionv1.GetActivityResponse
		if r, err = g.b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: ns, Id: a.id}, opts...); err == nil {
			got = r.GetActivity()
		}
	case opWait:
		// A tenant's "job" always finishes (its permanent worker runs
		// it); anything else may still be waiting when the deadline comes.
		if want == codes.OK && !(a.typ == "job" && strings.HasPrefix(ns, "tenant-")) {
			var c context.CancelFunc
			ctx, c = context.WithTimeout(ctx, 5*time.Millisecond)
			defer c()
			accept = append(accept, codes.DeadlineExceeded)
		}
		var r *aionv1.WaitResponse
		if r, err = g.b.activities.Wait(ctx, &aionv1.WaitRequest{Namespace: ns, Id: a.id}, opts...); err == nil {
			got = r.GetActivity()
		}
	case opCancel:
		if want == codes.OK {
			accept = append(accept, codes.FailedPrecondition) // it had closed already
		}
		var r *aionv1.CancelResponse
		if r, err = g.b.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: ns, Id: a.id}, opts...); err == nil {
			got = r.GetActivity()
		}
	case opIntervene:
		_, err = g.b.activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: ns, Id: a.id,
			Command: &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{
				InjectMessage: &aionv1.InjectMessageCommand{Text: "for " + ns + "/" + a.id}}}}, opts...)
	}
	g.expect(fmt.Sprintf("%s %s %s/%s", k.name, op, ns, a.id), err, accept...)
	if got != nil {
		g.checkActivity(k, op.String(), got, ns, a.id)
	}
}

func (g *isoGen) list(k *isoKey) {
	ns := g.pickNamespace(k)
	want, ok := g.gate(k, opList)
	if ok && !k.allows(ns) {
		want = codes.PermissionDenied
	}
	g.note("%s lists %s", k.name, ns)
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := g.b.activities.List(ctx, &aionv1.ListActivitiesRequest{Namespace: ns, PageSize: 20}, k.opts()...)
	g.expect(fmt.Sprintf("%s lists %s", k.name, ns), err, want)
	for _, got := range resp.GetActivities() {
		g.mu.Lock()
		a := g.acts[got.GetId()]
		g.mu.Unlock()
		if a == nil || a.ns != ns {
			g.fail("%s listing %s got %s/%s, which was not scheduled there", k.name, ns, got.GetNamespace(), got.GetId())
		}
		g.checkActivity(k, "list", got, ns, got.GetId())
	}
}

// register connects a worker for a random namespace set and checks the
// registration is refused exactly when it must be, for the reason it must.
func (g *isoGen) register(k *isoKey) {
	if len(g.workers) >= isoMaxWorkers {
		g.drainWorker(g.workers[0], g.ops)
		return
	}
	set := map[string]bool{}
	for range 1 + g.rng.IntN(3) {
		set[g.pickNamespace(k)] = true
	}
	nss := slices.Sorted(maps.Keys(set))
	var types []string
	for _, typ := range []string{"job", "slow", "other"} {
		if g.rng.IntN(2) == 0 {
			types = append(types, typ)
		}
	}
	if len(types) == 0 {
		types = []string{"slow"}
	}
	node := []string{"", "n1", "n2"}[g.rng.IntN(3)]

	want, ok := g.gate(k, opRegister)
	fresh := 0
	if ok {
		for _, ns := range nss {
			if !k.allows(ns) {
				want = codes.PermissionDenied
			}
		}
	}
	if want == codes.OK {
		for _, ns := range nss {
			if g.pinned[ns] && node != "n1" && (node == "" || g.pinnedTo[ns] != node) {
				want = codes.FailedPrecondition
			}
			if !g.namespaces[ns] {
				fresh++
			}
		}
	}
	if want == codes.OK && (fresh > isoMaxMint || !g.roomFor(fresh)) {
		want = codes.ResourceExhausted
	}
	g.note("%s registers a worker for %v node %q types %v", k.name, nss, node, types)
	w, err := g.connect(k, nss, types, node, 1+g.rng.IntN(4))
	g.expect(fmt.Sprintf("%s registers a worker for %v on node %q", k.name, nss, node), err, want)
	if err != nil {
		return
	}
	for _, ns := range nss {
		g.namespaces[ns] = true
	}
	g.workers = append(g.workers, w)
}

func (g *isoGen) connect(k *isoKey, nss, types []string, node string, slots int) (*isoWorker, error) {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := g.b.workers.Connect(ctx, k.opts()...)
	if err != nil {
		cancel()
		return nil, err
	}
	reg := &aionv1.Register{Namespaces: nss, ActivityTypes: types, Node: node, Slots: uint32(slots), Identity: k.name,
		Capabilities: []aionv1.InterventionPrimitive{aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_INJECT_MESSAGE}}
	if err := stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: reg}}); err != nil {
		_, err = stream.Recv() // the status the server ended the stream with
		cancel()
		return nil, err
	}
	m, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, err
	}
	if m.GetRegisterAck() == nil {
		cancel()
		g.fail("first frame to %s's worker: %v", k.name, m)
	}
	w := &isoWorker{g: g, id: m.GetRegisterAck().GetWorkerId(), key: k, set: nss, types: types, cancel: cancel,
		stream: stream, done: make(chan struct{})}
	g.wg.Go(w.serve)
	return w, nil
}

func (w *isoWorker) send(m *aionv1.WorkerMessage) {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	_ = w.stream.Send(m) // a send on a closed stream shows up in serve
}

func (w *isoWorker) finish(task *aionv1.ActivityTask) {
	w.send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
		Namespace: task.GetNamespace(), ActivityId: task.GetActivityId(), Attempt: task.GetAttempt(),
		Outcome: &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{
			Result: []byte(fmt.Sprintf("worker %d for %s/%s", w.id, task.GetNamespace(), task.GetActivityId()))}}}}})
}

// inSet records a violation when a frame about namespace ns reached this
// worker although it does not serve ns.
func (w *isoWorker) inSet(kind, ns, id string) {
	if !slices.Contains(w.set, ns) {
		w.g.violation("worker %d of %s serving %v got %s for %s/%s", w.id, w.key.name, w.set, kind, ns, id)
	}
	if !w.key.allows(ns) {
		w.g.violation("worker %d of %s got %s for %s/%s, a namespace its key is not granted", w.id, w.key.name, kind, ns, id)
	}
}

// serve reads the worker's stream: it checks every frame, finishes "job"
// tasks at once, holds "slow" ones until released, cancelled or drained.
func (w *isoWorker) serve() {
	defer close(w.done)
	for {
		m, err := w.stream.Recv()
		if err != nil {
			return
		}
		switch {
		case m.GetActivityTask() != nil:
			task := m.GetActivityTask()
			w.g.tasks.Add(1)
			ns, id := task.GetNamespace(), task.GetActivityId()
			w.inSet("a task", ns, id)
			w.g.mu.Lock()
			a := w.g.acts[id]
			w.g.mu.Unlock()
			switch {
			case a == nil || a.ns != ns:
				w.g.violation("worker %d got task %s/%s, which nobody scheduled there", w.id, ns, id)
			case a.refused:
				w.g.violation("worker %d got task %s/%s, whose schedule was refused", w.id, ns, id)
			case string(task.GetPayload()) != string(isoPayload(ns, id)):
				w.g.violation("worker %d got task %s/%s with payload %q", w.id, ns, id, task.GetPayload())
			case !slices.Contains(w.types, task.GetActivityType()):
				w.g.violation("worker %d serving %v got a %q task", w.id, w.types, task.GetActivityType())
			}
			if task.GetActivityType() != "slow" {
				w.finish(task)
				continue
			}
			w.mu.Lock()
			w.held = append(w.held, task)
			drained, full := w.drained, len(w.held) > isoMaxHeld
			w.mu.Unlock()
			switch {
			case drained:
				w.releaseAll()
			case full:
				w.releaseOne()
			}
		case m.GetIntervention() != nil:
			iv := m.GetIntervention()
			w.g.interventions.Add(1)
			w.inSet("an intervention", iv.GetNamespace(), iv.GetActivityId())
			if want := "for " + iv.GetNamespace() + "/" + iv.GetActivityId(); iv.GetCommand().GetInjectMessage().GetText() != want {
				w.g.violation("worker %d got intervention %q for %s/%s", w.id, iv.GetCommand().GetInjectMessage().GetText(),
					iv.GetNamespace(), iv.GetActivityId())
			}
			w.send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_InterventionAck{InterventionAck: &aionv1.InterventionAck{
				Namespace: iv.GetNamespace(), ActivityId: iv.GetActivityId(), Attempt: iv.GetAttempt(),
				InterventionId: iv.GetInterventionId(), Accepted: true}}})
		case m.GetCancelActivity() != nil:
			c := m.GetCancelActivity()
			w.g.stops.Add(1)
			w.inSet("a cancel", c.GetNamespace(), c.GetActivityId())
			w.mu.Lock()
			w.held = slices.DeleteFunc(w.held, func(t *aionv1.ActivityTask) bool {
				return t.GetNamespace() == c.GetNamespace() && t.GetActivityId() == c.GetActivityId() && t.GetAttempt() == c.GetAttempt()
			})
			w.mu.Unlock()
			w.send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
				Namespace: c.GetNamespace(), ActivityId: c.GetActivityId(), Attempt: c.GetAttempt(),
				Outcome: &aionv1.ActivityResult_Canceled{Canceled: &aionv1.ActivityCanceled{}}}}})
		case m.GetDrainRequest() != nil:
			w.mu.Lock()
			w.drained = true
			w.mu.Unlock()
			w.releaseAll()
			w.sendMu.Lock()
			_ = w.stream.CloseSend()
			w.sendMu.Unlock()
		}
	}
}

// releaseOne finishes the oldest task the worker holds.
func (w *isoWorker) releaseOne() bool {
	w.mu.Lock()
	if len(w.held) == 0 {
		w.mu.Unlock()
		return false
	}
	task := w.held[0]
	w.held = w.held[1:]
	w.mu.Unlock()
	w.finish(task)
	return true
}

func (w *isoWorker) releaseAll() {
	for w.releaseOne() {
	}
}

func (g *isoGen) release() {
	all := append(slices.Clone(g.base), g.workers...)
	w := all[g.rng.IntN(len(all))]
	g.note("worker %d finishes a held task", w.id)
	w.releaseOne()
}

func (g *isoGen) drain(k *isoKey) {
	if len(g.workers) == 0 {
		g.register(g.ops)
		return
	}
	g.drainWorker(g.workers[g.rng.IntN(len(g.workers))], k)
}

func (g *isoGen) drainWorker(w *isoWorker, k *isoKey) {
	want, ok := g.gate(k, opDrain)
	if ok {
		for _, ns := range w.set {
			if !k.allows(ns) {
				want = codes.PermissionDenied
			}
		}
	}
	g.note("%s drains worker %d serving %v", k.name, w.id, w.set)
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := aionv1.NewClusterServiceClient(g.b.cc).DrainWorker(ctx, &aionv1.DrainWorkerRequest{WorkerId: w.id}, k.opts()...)
	g.expect(fmt.Sprintf("%s drains worker %d serving %v", k.name, w.id, w.set), err, want)
	if err != nil {
		return
	}
	g.checkWorker(k, "drain", resp.GetWorker())
	g.workers = slices.DeleteFunc(g.workers, func(x *isoWorker) bool { return x == w })
	select { // it leaves once its held tasks are acknowledged
	case <-w.done:
	case <-time.After(20 * time.Second):
		g.fail("drained worker %d did not leave", w.id)
	}
	w.cancel()
}

// checkWorker: a worker shown to k names only namespaces k is granted.
func (g *isoGen) checkWorker(k *isoKey, what string, w *aionv1.Worker) {
	g.t.Helper()
	for _, ns := range w.GetNamespaces() {
		if !k.allows(ns) {
			g.fail("%s %s showed worker %d serving %v: %q is another tenant's", k.name, what, w.GetId(), w.GetNamespaces(), ns)
		}
	}
}

func (g *isoGen) place(k *isoKey) {
	ns := g.pickNamespace(k)
	want, ok := g.gate(k, opPlace)
	if ok {
		switch {
		case !k.allows(ns):
			want = codes.PermissionDenied
		case !g.namespaces[ns]:
			want = codes.NotFound
		}
	}
	// Every placement lists n1, where the tenants' permanent workers run.
	p := &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_UNPLACED}
	second := ""
	switch g.rng.IntN(3) {
	case 1:
		p = &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PREFER, Nodes: []string{"n1"}}
	case 2:
		p = &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PINNED, Nodes: []string{"n1"}}
		if g.rng.IntN(2) == 0 {
			second = "n2"
			p.Nodes = append(p.Nodes, second)
		}
	}
	g.note("%s places %s %v", k.name, ns, p)
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := g.b.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: ns, Placement: p}, k.opts()...)
	g.expect(fmt.Sprintf("%s places %s", k.name, ns), err, want)
	if err != nil {
		return
	}
	if got := resp.GetNamespace().GetName(); got != ns {
		g.fail("%s placing %s got namespace %q", k.name, ns, got)
	}
	g.pinned[ns] = p.GetMode() == aionv1.PlacementMode_PLACEMENT_MODE_PINNED
	g.pinnedTo[ns] = second
}

func (g *isoGen) create(k *isoKey) {
	ns := g.pickNamespace(k)
	want, ok := g.gate(k, opCreate)
	if ok {
		switch {
		case !k.allows(ns):
			want = codes.PermissionDenied
		case !g.namespaces[ns] && !g.roomFor(1):
			want = codes.ResourceExhausted
		}
	}
	g.note("%s creates %s", k.name, ns)
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := g.b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: ns}, k.opts()...)
	g.expect(fmt.Sprintf("%s creates %s", k.name, ns), err, want)
	if err != nil {
		return
	}
	if resp.GetCreated() == g.namespaces[ns] || resp.GetNamespace().GetName() != ns {
		g.fail("%s creating %s: created=%v namespace %q, and it existed: %v", k.name, ns, resp.GetCreated(),
			resp.GetNamespace().GetName(), g.namespaces[ns])
	}
	g.namespaces[ns] = true
}

func (g *isoGen) namespaceGet(k *isoKey) {
	ns := g.pickNamespace(k)
	want, ok := g.gate(k, opNamespaceGet)
	if ok {
		switch {
		case !k.allows(ns):
			want = codes.PermissionDenied
		case !g.namespaces[ns]:
			want = codes.NotFound
		}
	}
	g.note("%s reads namespace %s", k.name, ns)
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := g.b.namespaces.Get(ctx, &aionv1.GetNamespaceRequest{Name: ns}, k.opts()...)
	g.expect(fmt.Sprintf("%s reads namespace %s", k.name, ns), err, want)
	if err == nil && resp.GetNamespace().GetName() != ns {
		g.fail("%s reading namespace %s got %q", k.name, ns, resp.GetNamespace().GetName())
	}
}

// visible is what k must see of the namespaces: exactly those it is granted.
func (g *isoGen) visible(k *isoKey) []string {
	var out []string
	for ns := range g.namespaces {
		if k.allows(ns) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

func (g *isoGen) namespaceList(k *isoKey) {
	want, _ := g.gate(k, opNamespaceList)
	g.note("%s lists namespaces", k.name)
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := g.b.namespaces.List(ctx, &aionv1.ListNamespacesRequest{}, k.opts()...)
	g.expect(k.name+" lists namespaces", err, want)
	if err != nil {
		return
	}
	var got []string
	for _, ns := range resp.GetNamespaces() {
		got = append(got, ns.GetName())
	}
	slices.Sort(got)
	if wantNS := g.visible(k); !slices.Equal(got, wantNS) {
		g.fail("%s listed namespaces %v, want %v", k.name, got, wantNS)
	}
}

func (g *isoGen) listWorkers(k *isoKey) {
	want, _ := g.gate(k, opListWorkers)
	g.note("%s lists workers", k.name)
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := aionv1.NewClusterServiceClient(g.b.cc).ListWorkers(ctx, &aionv1.ListWorkersRequest{}, k.opts()...)
	g.expect(k.name+" lists workers", err, want)
	for _, w := range resp.GetWorkers() {
		g.checkWorker(k, "list workers", w)
	}
}

// watch reads the first frame of the cluster view, the snapshot, over
// gRPC or the console's event stream.
func (g *isoGen) watch(k *isoKey) {
	want, _ := g.gate(k, opWatch)
	overHTTP := g.rng.IntN(2) == 0
	g.note("%s watches (over HTTP: %v)", k.name, overHTTP)
	ctx, cancel := g.ctx()
	defer cancel()
	var (
		first *aionv1.ClusterEvent
		err   error
	)
	if overHTTP {
		first, err = g.watchHTTP(ctx, k)
	} else {
		var stream grpc.ServerStreamingClient[aionv1.ClusterEvent]
		stream, err = aionv1.NewClusterServiceClient(g.b.cc).Watch(ctx, &aionv1.WatchRequest{}, k.opts()...)
		if err == nil {
			first, err = stream.Recv()
		}
	}
	g.expect(k.name+" watches", err, want)
	snap := first.GetSnapshot()
	for _, w := range snap.GetWorkers() {
		g.checkWorker(k, "watch", w)
	}
	for _, ns := range snap.GetNamespaces() {
		if !k.allows(ns.GetName()) {
			g.fail("%s watch showed namespace %q", k.name, ns.GetName())
		}
	}
	for _, p := range snap.GetPools() {
		if !k.allows(p.GetNamespace()) {
			g.fail("%s watch showed the pool of namespace %q", k.name, p.GetNamespace())
		}
	}
}

// watchHTTP reads the first event of GET /api/v1/events; an HTTP error
// comes back as the gRPC status it stands for.
func (g *isoGen) watchHTTP(ctx context.Context, k *isoKey) (*aionv1.ClusterEvent, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.b.srv.HTTPAddr()+"/api/v1/events", nil)
	if err != nil {
		return nil, err
	}
	if k.secret != "" {
		req.Header.Set("Authorization", "Bearer "+k.secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return nil, status.Error(codes.Unauthenticated, "401")
	case http.StatusForbidden:
		return nil, status.Error(codes.PermissionDenied, "403")
	default:
		return nil, status.Errorf(codes.Unknown, "HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var e aionv1.ClusterEvent
			if err := protojson.Unmarshal([]byte(data), &e); err != nil {
				return nil, fmt.Errorf("event stream: %w", err)
			}
			return &e, nil
		}
	}
	return nil, fmt.Errorf("event stream ended before the snapshot: %v", sc.Err())
}

// checkInvariants runs after every step: no worker saw another namespace's
// work, and the namespaces that exist are exactly the model's.
func (g *isoGen) checkInvariants() {
	g.mu.Lock()
	v := slices.Clone(g.violated)
	g.mu.Unlock()
	if len(v) > 0 {
		g.fail("work crossed a namespace:\n  %s", strings.Join(v, "\n  "))
	}
	ctx, cancel := g.ctx()
	defer cancel()
	resp, err := g.b.namespaces.List(ctx, &aionv1.ListNamespacesRequest{}, g.ops.opts()...)
	if err != nil {
		g.fail("operator lists namespaces: %v", err)
	}
	var got []string
	for _, ns := range resp.GetNamespaces() {
		got = append(got, ns.GetName())
	}
	slices.Sort(got)
	if want := g.visible(g.ops); !slices.Equal(got, want) {
		g.fail("namespaces are %v, want %v (minted by a refused caller, or not minted by an authorized one)", got, want)
	}
}

// stop ends every worker stream and waits for their readers.
func (g *isoGen) stop() {
	for _, w := range append(slices.Clone(g.base), g.workers...) {
		w.cancel()
	}
	g.wg.Wait()
}

// The attack: an admin key granted one tenant read the cluster view and saw
// every tenant: workers, namespaces and pools of the others, and the other
// namespaces of a worker it shares with them. Now it sees only its own, in
// ListWorkers, Watch and the console's event stream.
func TestNamespaceScopedCallerSeesOnlyItsPartOfTheClusterView(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) {
		c.Auth.Mode = "token"
		c.Auth.Keys = []auth.APIKey{
			key("ops", "admin-secret", []auth.Role{auth.RoleAdmin}, "*"),
			key("fleet", "fleet-secret", []auth.Role{auth.RoleWorker}, "*"),
			key("a-admin", "a-admin-secret", []auth.Role{auth.RoleAdmin}, "tenant-a"),
		}
	})
	ctx := context.Background()
	fleet := b.as(t, "fleet-secret")
	aAdmin := b.as(t, "a-admin-secret")
	fleet.mustConnect(t, &aionv1.Register{Namespaces: []string{"tenant-a", "tenant-b"}, ActivityTypes: []string{"job"}})
	fleet.mustConnect(t, &aionv1.Register{Namespaces: []string{"tenant-b"}, ActivityTypes: []string{"job"}})

	checkWorkers := func(what string, ws []*aionv1.Worker) {
		t.Helper()
		if len(ws) != 1 || !slices.Equal(ws[0].GetNamespaces(), []string{"tenant-a"}) {
			t.Fatalf("%s showed tenant-a's admin %v, want the shared worker serving [tenant-a] only", what, ws)
		}
	}
	list, err := aionv1.NewClusterServiceClient(aAdmin.cc).ListWorkers(ctx, &aionv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	checkWorkers("ListWorkers", list.GetWorkers())

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := aionv1.NewClusterServiceClient(aAdmin.cc).Watch(wctx, &aionv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	snap := first.GetSnapshot()
	checkWorkers("Watch", snap.GetWorkers())
	if len(snap.GetNamespaces()) != 1 || snap.GetNamespaces()[0].GetName() != "tenant-a" {
		t.Fatalf("Watch showed namespaces %v, want tenant-a only", snap.GetNamespaces())
	}
	for _, p := range snap.GetPools() {
		if p.GetNamespace() != "tenant-a" {
			t.Fatalf("Watch showed the pool of %q", p.GetNamespace())
		}
	}
	g := &isoGen{t: t, b: b}
	sse, err := g.watchHTTP(ctx, &isoKey{secret: "a-admin-secret"})
	if err != nil {
		t.Fatal(err)
	}
	checkWorkers("the event stream", sse.GetSnapshot().GetWorkers())

	// Events about other tenants are not sent: the next topology event
	// tenant-a's admin gets is tenant-a's worker, not the ones before it.
	if _, err := b.as(t, "admin-secret").namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "tenant-c"}); err != nil {
		t.Fatal(err)
	}
	fleet.mustConnect(t, &aionv1.Register{Namespaces: []string{"tenant-c"}, ActivityTypes: []string{"job"}})
	mine := fleet.mustConnect(t, &aionv1.Register{Namespaces: []string{"tenant-a"}, ActivityTypes: []string{"job"}})
	for {
		e, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e.GetPoolStats() != nil {
			for _, p := range e.GetPoolStats().GetPools() {
				if p.GetNamespace() != "tenant-a" {
					t.Fatalf("Watch sent the pool of %q", p.GetNamespace())
				}
			}
			continue
		}
		if got := e.GetWorkerConnected().GetWorker(); got.GetId() != mine.id {
			t.Fatalf("tenant-a's admin was sent %v before its own worker's connection", e)
		}
		break
	}
}
