package registry

import (
	"strconv"
	"time"

	"github.com/aion-run/aion/internal/intervention"
)

// DefaultTaskQueue is the pool an empty task queue means, for workers and
// activities alike, so a producer and a worker that name no queue meet.
const DefaultTaskQueue = "default"

// WorkerID identifies one connected worker stream for the life of the server
// process. IDs are never reused within a process.
type WorkerID uint64

// String renders the id as a decimal number, as it appears on the wire.
func (id WorkerID) String() string { return strconv.FormatUint(uint64(id), 10) }

// PoolAddress names a pool: a task queue inside a namespace. The namespace is
// the isolation boundary and is kept exactly as given; the task queue is
// normalized so that empty means DefaultTaskQueue.
type PoolAddress struct {
	Namespace string
	TaskQueue string
}

// Pool returns the address of the pool (namespace, taskQueue), reading an
// empty task queue as DefaultTaskQueue.
func Pool(namespace, taskQueue string) PoolAddress {
	if taskQueue == "" {
		taskQueue = DefaultTaskQueue
	}
	return PoolAddress{Namespace: namespace, TaskQueue: taskQueue}
}

// String renders the pool as namespace/task-queue.
func (p PoolAddress) String() string { return p.Namespace + "/" + p.TaskQueue }

// TaskKind is what a selection hands a worker: an activity attempt or a
// workflow task. Each kind has its own slots on a worker, so a worker busy
// with activities can still advance the workflows waiting on them.
type TaskKind uint8

// The task kinds.
const (
	// KindActivity: an attempt of an activity; ActivityType is its type.
	KindActivity TaskKind = iota
	// KindWorkflow: a workflow task; ActivityType holds the workflow type
	// and Build the build id of the code that must run it.
	KindWorkflow
)

// Triple is the unit of selection: an activity type inside a pool (or, for
// KindWorkflow, a workflow type and build id inside a pool). Workers of one
// triple are used round-robin with their own cursor.
type Triple struct {
	Pool         PoolAddress
	ActivityType string
	Kind         TaskKind
	Build        string
}

// NewTriple returns the triple (namespace, taskQueue, activityType), reading an
// empty task queue as DefaultTaskQueue.
func NewTriple(namespace, taskQueue, activityType string) Triple {
	return Triple{Pool: Pool(namespace, taskQueue), ActivityType: activityType}
}

// NewWorkflowTriple returns the triple of workers running build of
// workflowType in (namespace, taskQueue).
func NewWorkflowTriple(namespace, taskQueue, workflowType, build string) Triple {
	return Triple{Pool: Pool(namespace, taskQueue), ActivityType: workflowType, Kind: KindWorkflow, Build: build}
}

// String renders the triple as namespace/task-queue/activity-type, or
// namespace/task-queue/workflow:type@build for a workflow triple.
func (t Triple) String() string {
	if t.Kind == KindWorkflow {
		return t.Pool.String() + "/workflow:" + t.ActivityType + "@" + t.Build
	}
	return t.Pool.String() + "/" + t.ActivityType
}

// Reason says why a worker left the registry.
type Reason string

// The reasons a worker leaves.
const (
	// ReasonDisconnect: its stream or connection went away.
	ReasonDisconnect Reason = "disconnect"
	// ReasonTimeout: it missed its heartbeat window.
	ReasonTimeout Reason = "timeout"
	// ReasonDeregistered: it was removed on purpose by the server or an operator.
	ReasonDeregistered Reason = "deregistered"
	// ReasonDrained: it finished draining and left.
	ReasonDrained Reason = "drained"
	// ReasonServerLost: the server it was connected to stopped renewing its
	// cluster lease.
	ReasonServerLost Reason = "server_lost"
)

// Capability is one intervention primitive a worker can carry out mid-run;
// the primitives and their names are internal/intervention's table.
type Capability = intervention.Primitive

// The intervention primitives.
const (
	CapInjectMessage     = intervention.InjectMessage
	CapCancel            = intervention.Cancel
	CapPauseResume       = intervention.PauseResume
	CapUpdateBudget      = intervention.UpdateBudget
	CapRespondToApproval = intervention.RespondToApproval
)

// Capabilities is the set of intervention primitives a worker advertised. The
// zero value advertises none: such a worker is never sent an intervention.
type Capabilities = intervention.Set

// Transport names how the server reaches a worker.
type Transport string

// TransportGRPC is the long-lived bidirectional gRPC stream.
const TransportGRPC Transport = "grpc"

// Delivery is the transport leg to one connected worker. Selection never
// looks at it; only the code that pushes work to the chosen worker does, so a
// new transport plugs in here without touching selection.
type Delivery interface {
	// Transport names the transport for events and listings.
	Transport() Transport
	// RequestDrain asks the worker to finish what it has and leave. It must
	// not block: the registry calls it from drain paths.
	RequestDrain()
}

// Spec is what a worker asks to be registered as.
type Spec struct {
	// Namespaces the worker serves; it is reachable from each and removed
	// from all at once. At least one.
	Namespaces []string
	// TaskQueue the worker serves in every one of its namespaces; empty
	// means DefaultTaskQueue.
	TaskQueue string
	// Node is the locality label the worker runs on; empty means none, and
	// a worker with no node never matches a node pin.
	Node string
	// ActivityTypes the worker can run; duplicates collapse. At least one
	// activity type or one workflow type.
	ActivityTypes []string
	// Slots is how many attempts the worker runs at once; at least 1.
	Slots int
	// WorkflowTypes the worker can advance; duplicates collapse.
	WorkflowTypes []string
	// BuildID is the version of the worker's workflow code; required with
	// WorkflowTypes.
	BuildID string
	// WorkflowSlots is how many workflow tasks the worker runs at once;
	// at least 1 with WorkflowTypes.
	WorkflowSlots int
	// CompatibleBuilds are other builds whose runs the worker may also
	// advance; it is never a default build through them.
	CompatibleBuilds []string
	// Capabilities are the intervention primitives the worker supports.
	Capabilities Capabilities
	// Delivery reaches the worker.
	Delivery Delivery
	// Identity and SDKVersion are what the worker says it is, for listings.
	Identity, SDKVersion string
}

// WorkerInfo is a point-in-time copy of a worker's registration and state.
type WorkerInfo struct {
	ID            WorkerID
	Namespaces    []string
	TaskQueue     string
	Node          string
	ActivityTypes []string
	Slots         int
	SlotsInUse    int
	// WorkflowTypes, BuildID and the workflow slots are set for a worker
	// that advances workflows.
	WorkflowTypes      []string
	BuildID            string
	CompatibleBuilds   []string
	WorkflowSlots      int
	WorkflowSlotsInUse int
	Draining           bool
	Capabilities       Capabilities
	Transport          Transport
	ConnectedAt        time.Time
	Identity           string
	SDKVersion         string
	// Server names the server the worker is connected to (set in a cluster).
	Server string
}

// Census counts what the registry holds; after every worker has left, every
// count is zero (nothing keyed by caller-supplied names is left behind).
type Census struct {
	Workers int
	// Triples with at least one registered worker.
	Triples int
	// Rings are round-robin cursors: one per triple plus one per node in it.
	Rings int
	// Waiters are triples some caller is blocked on in Await.
	Waiters int
	// Namespaces with at least one connected worker.
	Namespaces int
	// Builds are workflow types whose build order is remembered.
	Builds int
}
