package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/tokenbucket"
)

// ServerID names one server process in a cluster: it is drawn from the
// database when the process joins and never reused, so a restarted server is
// a new cluster member with a new ID. 0 means none.
type ServerID int64

// ErrLeaseLost reports that a server's membership ended without it leaving:
// its lease ran out and another server reaped it (its running attempts were
// handed back for retry). Such a server must stop.
var ErrLeaseLost = errors.New("server lease lost")

// ErrNameTaken reports that a live server already uses the name.
var ErrNameTaken = errors.New("server name taken by a live server")

// ServerRecord is one server of a cluster as the database records it.
type ServerRecord struct {
	ID   ServerID
	Name string
	// Addr is the gRPC address the server advertised, for operators.
	Addr       string
	StartedAt  time.Time
	LeaseUntil time.Time
}

// JoinRequest asks to record a server as a cluster member.
type JoinRequest struct {
	// Name must be unique among the live servers.
	Name string
	// Addr is the gRPC address the server advertises, for operators.
	Addr string
	// Lease is how long the membership lasts without a renewal.
	Lease time.Duration
}

// ReapedServer describes one server whose lease ran out and that was
// removed.
type ReapedServer struct {
	Server ServerRecord
	// Requeued counts its running attempts handed back for retry; Canceled
	// counts those closed because a cancel was requested meanwhile.
	Requeued, Canceled int
	// Workers are the IDs of the workers it had connected, in order.
	Workers []uint64
}

// ClaimRequest asks for ready work for the workers of one server, in one
// round trip.
type ClaimRequest struct {
	// Owner is the claiming server; it owns what it claims.
	Owner ServerID
	// Now is the claim's time: the attempts start at it, and only work
	// ready by then (or by the claim's ReadyBefore) is taken.
	Now    time.Time
	Claims []Claim
}

// Claim asks for ready activities of one triple for some workers of the
// claiming server that carry one node label.
type Claim struct {
	Namespace, TaskQueue, ActivityType string
	// Node is the node label of the workers the claim is for: activities
	// pinned to it, or not pinned at all, match. Empty matches only
	// activities without a pin.
	Node string
	// Workers are the workers the claimed activities will run on: the
	// claim takes at most one activity per worker, the oldest for the
	// first, and records each worker with its running attempt.
	Workers []uint64
	// ReadyBefore, when set, excludes activities that became ready after it
	// (used to give servers with preferred-node workers a head start).
	ReadyBefore time.Time
	// Limit, when set, is the flow limit of the activity type (as the
	// claiming server knows it): the claim takes no activity its
	// concurrency key's limit or its rate's bucket does not allow, counted
	// across every server, and skips such work to take what is allowed
	// behind it.
	Limit *FlowLimit
	// Ended lists, by id, activities of the triple whose attempt ended on
	// the claiming server but whose end is not durable yet: fair shares
	// do not count them as holding a slot.
	Ended []string
}

// FlowUsageRequest names what ReadFlowUsage reads.
type FlowUsageRequest struct {
	Namespace, ActivityType string
	// ConcurrencyKey is the key whose running activities are counted;
	// empty counts nothing.
	ConcurrencyKey string
	// BucketKey is the rate bucket to read: a key's, or "" for the type's.
	BucketKey string
}

// FlowUsage is what a flow limit counts now.
type FlowUsage struct {
	// Running counts the running activities of the concurrency key.
	Running int
	// Bucket is the rate bucket, nil when the store holds none (it is
	// full).
	Bucket *tokenbucket.Bucket
}

// ClaimResult is what one Claim took.
type ClaimResult struct {
	// Activities are the claimed activities in scheduling order; the i-th
	// runs on the claim's i-th worker.
	Activities []Activity
	// Limited says the claim's flow limit held back ready work it could
	// otherwise have taken.
	Limited bool
	// NextToken, when set, is when the rate limit lets the work it held
	// back start: a claim then may take it (not a poll before).
	NextToken time.Time
}

// RunClaim names the runs a server may hold: open runs of one workflow
// type in one pool, which its workers serve.
type RunClaim struct {
	Namespace, TaskQueue, WorkflowType string
}

// ExpireRequest asks to close waiting work whose deadline passed.
type ExpireRequest struct {
	// Now is the time deadlines are measured against.
	Now time.Time
	// Limit caps the activities closed by one call.
	Limit int
	// Failure gives each due activity's failure; nil leaves it open.
	Failure func(Activity) *Failure
}

// CancelRequest asks to cancel one activity on whichever server holds it.
type CancelRequest struct {
	Namespace, ID string
	Reason        string
	// Now is when a waiting activity is closed.
	Now time.Time
}

// CancelResult is what RequestCancel did.
type CancelResult struct {
	Outcome CancelOutcome
	// Owner is the server running the activity, for CancelForwarded.
	Owner ServerID
}

// CancelOutcome says how RequestCancel handled an activity.
type CancelOutcome int

// The outcomes of RequestCancel.
const (
	// CancelDone: the activity was waiting and is now canceled.
	CancelDone CancelOutcome = iota + 1
	// CancelForwarded: the activity is running on Owner, which must close it;
	// the request is recorded so it survives that server dying.
	CancelForwarded
	// CancelClosed: the activity had already reached a terminal state.
	CancelClosed
)

// PendingCancel is a cancel request recorded on a running activity that its
// owner has not applied yet.
type PendingCancel struct {
	Activity ActivityRef
	Reason   string
}

// ActivityRef names one activity.
type ActivityRef struct{ Namespace, ID string }

// WaitingBacklog is the waiting work of one (namespace, task queue) pool.
type WaitingBacklog struct {
	Namespace, TaskQueue string
	Waiting              int
	// OldestReadyAt is when the longest-waiting of them became ready.
	OldestReadyAt time.Time
	// ByPriority counts them by priority: index 0 for priority 1.
	ByPriority [LowestPriority]int
}

// WaitingGroup counts the ready activities of one task queue and type
// that share a priority and a fairness key.
type WaitingGroup struct {
	TaskQueue, ActivityType string
	Priority                int
	FairnessKey             string
	Count                   int
	// OldestReadyAt is when the longest-waiting of them became ready.
	OldestReadyAt time.Time
}

// MaxWaitingGroups bounds what ListWaitingGroups returns.
const MaxWaitingGroups = 1000

// OpenCount is what a namespace holds in activities not closed yet.
type OpenCount struct {
	Activities   int
	PayloadBytes int64
}

// WorkerRecord is one connected worker as its server published it, so every
// server can list the workers of every server.
type WorkerRecord struct {
	ID     uint64
	Server ServerID
	// Info is the worker's description, encoded by the server layer.
	Info []byte
}

// Message is a request or reply from one server to another.
type Message struct {
	// ID is set by the store; SendMessage returns it.
	ID       int64
	From, To ServerID
	Kind     string
	Body     []byte
	// Call pairs a reply with its request: the requester picks it and the
	// replier copies it. 0 for a message that wants no reply.
	Call int64
}

// Notice is a wake-up delivered to every server of a cluster.
type Notice struct {
	// Kind says what changed: NoticeWork (Triples hold the work's triples,
	// nil for any), NoticeNamespace (Name), NoticeTopology (Name says which
	// server's workers changed: "<server id>", and from the store itself
	// "<server id> lost <server name>" when a reap removed that server),
	// NoticeMessage (a message waits for this server) or NoticeReconnected
	// (notices may have been missed).
	Kind    NoticeKind
	Triples [][3]string
	Name    string
	// Own, on a NoticeWork, says that the listening server sent it itself:
	// it came through the store it listens on, which no other server has
	// joined. Such a notice tells that server nothing its own writes did
	// not; the others still hear it.
	Own bool
}

// IsActivityWork reports whether a work notice's triple names activities
// (namespace, task queue, activity type) rather than workflow work.
func IsActivityWork(t [3]string) bool {
	return t[2] != InboxWorkPrefix && !strings.HasPrefix(t[2], RunWorkPrefix) && !strings.HasPrefix(t[2], AdmitWorkPrefix)
}

// Work notices name activity triples; these prefixes in a triple's third
// field name workflow work instead (names callers choose for activity types
// may hold ':', so a collision only costs a needless claim).
const (
	// RunWorkPrefix: {namespace, task queue, prefix + workflow type}: open
	// runs no server holds may be claimed.
	RunWorkPrefix = "workflow:"
	// InboxWorkPrefix: {namespace, run id, prefix}: an event waits in the
	// run's inbox for the server that holds it.
	InboxWorkPrefix = "inbox:"
	// AdmitWorkPrefix: {namespace, workflow type, prefix + concurrency
	// key}: an admitted run of the key closed, so a run its workflow
	// type's concurrency limit holds may be admitted now.
	AdmitWorkPrefix = "admit:"
)

// RunWork is the notice triple for unheld runs of a workflow type in a pool.
func RunWork(namespace, taskQueue, workflowType string) [3]string {
	return [3]string{namespace, taskQueue, RunWorkPrefix + workflowType}
}

// InboxWork is the notice triple for an event waiting in a run's inbox.
func InboxWork(namespace, runID string) [3]string {
	return [3]string{namespace, runID, InboxWorkPrefix}
}

// AdmitWork is the notice triple for a freed slot of a concurrency key of
// a workflow type.
func AdmitWork(namespace, workflowType, concurrencyKey string) [3]string {
	return [3]string{namespace, workflowType, AdmitWorkPrefix + concurrencyKey}
}

// NoticeKind names what a Notice announces.
type NoticeKind int

// The notice kinds.
const (
	NoticeWork NoticeKind = iota + 1
	NoticeNamespace
	NoticeTopology
	NoticeMessage
	NoticeReconnected
)

// Cluster is what lets several servers share one store. Only a backend that
// several processes can open at once implements it, and it passes
// storetest.RunCluster.
//
// In cluster mode every waiting activity lives only in the store; a server
// claims work for the workers connected to it, owns what it claimed until the
// attempt ends, and holds a lease that the others reap when it runs out. A
// workflow run is held by one server at a time, which alone appends to its
// history (AppendEvents.Owner); the others post to the run's inbox.
// Leases are measured on the store's clock alone, so servers with skewed
// clocks agree on who is alive.
//
// Errors wrap ErrNotFound, ErrLeaseLost, ErrNameTaken or ErrUnavailable where
// a caller may branch on them; no driver error type crosses this interface.
type Cluster interface {
	// JoinCluster records a server as a cluster member with a lease and
	// returns its record with a new ID. A live server of the same name makes
	// it fail with ErrNameTaken; one whose lease has not run out but whose
	// process the store can prove gone (its database session ended) is
	// reaped first, as if its lease had run out, and the join succeeds.
	JoinCluster(ctx context.Context, r JoinRequest) (ServerRecord, error)
	// RenewLease extends a server's lease to lease from now, or reports
	// ErrLeaseLost when the server left or was reaped.
	RenewLease(ctx context.Context, id ServerID, lease time.Duration) error
	// LeaveCluster hands the server's running attempts back for retry and
	// removes it, its workers and its messages; ErrLeaseLost when it was
	// gone already.
	LeaveCluster(ctx context.Context, id ServerID) error
	// ReapServers removes every server whose lease ended: its running
	// attempts are handed back for retry (or closed, when a cancel was
	// requested) and its workers and messages are removed.
	ReapServers(ctx context.Context) ([]ReapedServer, error)

	// ClaimActivities takes ready activities for r.Owner, oldest first; no
	// activity is ever handed to two claims. It returns one result per
	// claim, in the order of r.Claims, like Apply: the i-th activity of a
	// result runs on the claim's i-th worker. Each comes back running, its
	// Attempt the number of the attempt to start now. A server whose lease
	// ran out claims nothing. A claim with a Limit takes only what the limit
	// allows, atomically across servers: running activities of a
	// concurrency key are counted from the store (an owner that died counts
	// until it is reaped), and rate buckets live in the store, refilled on
	// the claims' Now.
	ClaimActivities(ctx context.Context, r ClaimRequest) ([]ClaimResult, error)
	// ReadFlowUsage reads what a flow limit counts for one activity type
	// across the cluster: the running activities of a concurrency key and
	// the state of a rate bucket (key "" for the type's own).
	ReadFlowUsage(ctx context.Context, r FlowUsageRequest) (FlowUsage, error)
	// SweepFlowBuckets forgets the rate buckets that are full again by now
	// (a missing bucket is a full one), so keys seen once do not stay.
	SweepFlowBuckets(ctx context.Context, now time.Time) error
	// UnclaimActivity hands back an activity claimed by owner whose attempt
	// never started; it is canceled instead when a cancel was requested.
	// An activity owner does not run is left alone.
	UnclaimActivity(ctx context.Context, owner ServerID, namespace, id string) error
	// ExpireWaitingActivities closes, as timed out, waiting activities whose
	// schedule-to-start or schedule-to-close deadline passed by r.Now, at
	// most r.Limit of them, and returns the closed ones.
	ExpireWaitingActivities(ctx context.Context, r ExpireRequest) ([]Activity, error)
	// RequestCancel cancels a waiting activity at once, or records the
	// request on a running one and names its owner. A missing activity is
	// ErrNotFound.
	RequestCancel(ctx context.Context, r CancelRequest) (CancelResult, error)
	// ListCancelRequests lists, oldest first, the activities owned by owner
	// that a cancel was requested for.
	ListCancelRequests(ctx context.Context, owner ServerID) ([]PendingCancel, error)
	// ListOwnedActivities lists the running activities owner holds.
	ListOwnedActivities(ctx context.Context, owner ServerID) ([]ActivityRef, error)
	// GetActivityOwner names the server running an activity (0 when it is
	// not running or does not exist).
	GetActivityOwner(ctx context.Context, namespace, id string) (ServerID, error)
	// GetRunningAttempt describes the attempt an activity is running, on
	// whichever server; nil when it is not running.
	GetRunningAttempt(ctx context.Context, namespace, id string) (*Attempt, error)
	// ListWaitingBacklog reports the waiting work ready by now per pool,
	// ordered by namespace and task queue.
	ListWaitingBacklog(ctx context.Context, now time.Time) ([]WaitingBacklog, error)
	// ListWaitingGroups reports a namespace's activities ready by now and
	// waiting for a claim, counted by task queue, type, priority and
	// fairness key, largest groups first, at most MaxWaitingGroups of them.
	ListWaitingGroups(ctx context.Context, namespace string, now time.Time) ([]WaitingGroup, error)
	// CountOpenActivities reports, per namespace, the activities not closed
	// yet and the bytes of their payloads.
	CountOpenActivities(ctx context.Context) (map[string]OpenCount, error)

	// ClaimRuns makes owner the holder of up to limit open runs no server
	// holds, of the claims' workflow types and pools, oldest first, and
	// returns them; no run is ever given to two servers. A server whose
	// lease ran out claims nothing.
	ClaimRuns(ctx context.Context, owner ServerID, claims []RunClaim, limit int) ([]Run, error)
	// ReleaseRun lets go of an open run owner holds, for another server to
	// claim; it reports whether owner held it.
	ReleaseRun(ctx context.Context, owner ServerID, namespace, runID string) (bool, error)
	// ReadRunInbox returns the events waiting in a run's inbox, in the order
	// they were posted.
	ReadRunInbox(ctx context.Context, namespace, runID string) ([]RunEvent, error)
	// ListOwnedInbox returns the events waiting in the inboxes of the runs
	// owner holds, in the order they were posted.
	ListOwnedInbox(ctx context.Context, owner ServerID) ([]RunEvent, error)

	// PutWorker records or replaces a connected worker.
	PutWorker(ctx context.Context, w WorkerRecord) error
	// DeleteWorker removes a worker; a missing one is no error.
	DeleteWorker(ctx context.Context, id uint64) error
	// ListWorkers lists every recorded worker, ordered by ID.
	ListWorkers(ctx context.Context) ([]WorkerRecord, error)

	// SendMessage queues m for m.To, wakes it, and returns the message's ID.
	SendMessage(ctx context.Context, m Message) (int64, error)
	// ReceiveMessages takes every message queued for to, in the order sent;
	// each is received once.
	ReceiveMessages(ctx context.Context, to ServerID) ([]Message, error)

	// PublishNotice wakes every server with a notice of kind NoticeWork,
	// NoticeNamespace or NoticeTopology.
	PublishNotice(ctx context.Context, n Notice) error
	// ListenNotices delivers notices to fn until ctx ends, reconnecting as
	// needed (after which it delivers NoticeReconnected); NoticeMessage
	// only for messages to self. It returns ctx's error.
	ListenNotices(ctx context.Context, self ServerID, fn func(Notice)) error
}
