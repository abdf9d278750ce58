package store

import (
	"context"
	"errors"
	"time"
)

// ServerID names one server process in a cluster: it is drawn from the
// database when the process joins and never reused, so a restarted server is
// a new member with a new ID. 0 means none.
type ServerID int64

// ErrLeaseLost reports that a server's membership ended without it leaving:
// its lease ran out and another server reaped it (its running attempts were
// handed back for retry). Such a server must stop.
var ErrLeaseLost = errors.New("server lease lost")

// ErrNameTaken reports that a live server already uses the name.
var ErrNameTaken = errors.New("server name taken by a live server")

// Member is one server of a cluster as the database records it.
type Member struct {
	ID   ServerID
	Name string
	// Addr is the gRPC address the server advertised, for operators.
	Addr       string
	StartedAt  time.Time
	LeaseUntil time.Time
}

// Claim asks for up to Limit ready activities of one triple for the workers
// of one server that carry one node label.
type Claim struct {
	Namespace, TaskQueue, ActivityType string
	// Node is the node label of the workers the claim is for: activities
	// pinned to it, or not pinned at all, match. Empty matches only
	// activities without a pin.
	Node  string
	Limit int
	// Workers, when set, name the worker each claimed activity will run on,
	// in claim order (oldest first); the store records it with the running
	// attempt.
	Workers []uint64
	// ReadyBefore excludes activities that became ready after it (used to
	// give servers with preferred-node workers a head start).
	ReadyBefore time.Time
}

// Reaped describes one server whose lease ran out and that was removed.
type Reaped struct {
	Member Member
	// Requeued counts its running attempts handed back for retry; Canceled
	// counts those closed because a cancel was requested meanwhile.
	Requeued, Canceled int
	// Workers are the IDs of the workers it had connected.
	Workers []uint64
}

// CancelOutcome is what RequestCancel did.
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

// ActivityRef names one activity.
type ActivityRef struct{ Namespace, ID string }

// WaitingBacklog is the waiting work of one (namespace, task queue) pool.
type WaitingBacklog struct {
	Namespace, TaskQueue string
	Waiting              int
	// OldestReadyAt is when the longest-waiting of them became ready.
	OldestReadyAt time.Time
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
	ID   int64
	From ServerID
	Kind string
	Body []byte
	// Call pairs a reply with its request: the requester picks it and the
	// replier copies it. 0 for a message that wants no reply.
	Call int64
}

// Notice is a wake-up delivered to every server of a cluster.
type Notice struct {
	// Kind says what changed: NoticeWork (Triples hold the work's triples,
	// nil for any), NoticeNamespace (Name), NoticeTopology (Name is the
	// server ID whose workers changed), NoticeMessage (a message waits for
	// this server) or NoticeReconnected (notices may have been missed).
	Kind    NoticeKind
	Triples [][3]string
	Name    string
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
// several processes can open at once implements it.
//
// In cluster mode every waiting activity lives only in the store; a server
// claims work for the workers connected to it, owns what it claimed until the
// attempt ends, and holds a lease that the others reap when it runs out.
type Cluster interface {
	// Join records a new member with a lease and returns its ID. A live
	// member with the same name makes it fail with ErrNameTaken.
	Join(ctx context.Context, name, addr string, lease time.Duration) (Member, error)
	// Renew extends the member's lease, or reports ErrLeaseLost.
	Renew(ctx context.Context, id ServerID, lease time.Duration) error
	// Leave hands the member's running attempts back for retry and removes
	// it and its workers.
	Leave(ctx context.Context, id ServerID) error
	// Reap removes every member whose lease ended (on the store's clock):
	// its running attempts are handed back for retry (or closed, when a
	// cancel was requested) and its workers are removed.
	Reap(ctx context.Context) ([]Reaped, error)

	// ClaimActivities takes ready activities for owner, oldest first, one
	// result per claim; no activity is ever handed to two claims. Each comes
	// back running, its Attempt the number of the attempt to start now.
	ClaimActivities(ctx context.Context, owner ServerID, now time.Time, claims []Claim) ([][]Activity, error)
	// Unclaim hands back an activity claimed by owner whose attempt never
	// started.
	Unclaim(ctx context.Context, owner ServerID, namespace, id string) error
	// ExpireWaiting closes, as timed out, waiting activities whose
	// schedule-to-start or schedule-to-close deadline passed by now, at most
	// limit of them; failure gives each one's failure (nil leaves it open).
	// It returns the closed ones.
	ExpireWaiting(ctx context.Context, now time.Time, limit int, failure func(Activity) *Failure) ([]Activity, error)
	// RequestCancel cancels a waiting activity at once, or records the
	// request on a running one and names its owner.
	RequestCancel(ctx context.Context, namespace, id, reason string, now time.Time) (CancelOutcome, ServerID, error)
	// CancelRequests lists the activities owned by owner that a cancel was
	// requested for, with the reason.
	CancelRequests(ctx context.Context, owner ServerID) ([]Activity, []string, error)
	// Owned lists the running activities owner holds in the store.
	Owned(ctx context.Context, owner ServerID) ([]ActivityRef, error)
	// OwnerOf names the member running an activity (0 when none).
	OwnerOf(ctx context.Context, namespace, id string) (ServerID, error)
	// RunningAttempt describes the attempt an activity is running, on
	// whichever server; nil when it is not running.
	RunningAttempt(ctx context.Context, namespace, id string) (*Attempt, error)
	// Waiting reports the waiting, ready work per pool.
	Waiting(ctx context.Context, now time.Time) ([]WaitingBacklog, error)
	// OpenCounts reports, per namespace, the activities not closed yet and
	// the bytes of their payloads.
	OpenCounts(ctx context.Context) (map[string]OpenCount, error)

	// PutWorker records or replaces a connected worker; DeleteWorker
	// removes it; Workers lists every recorded worker.
	PutWorker(ctx context.Context, w WorkerRecord) error
	DeleteWorker(ctx context.Context, id uint64) error
	Workers(ctx context.Context) ([]WorkerRecord, error)

	// Send queues a message for a member and wakes it.
	Send(ctx context.Context, to ServerID, m Message) (int64, error)
	// Receive takes every message queued for a member.
	Receive(ctx context.Context, id ServerID) ([]Message, error)

	// Announce wakes every member with a notice.
	Announce(ctx context.Context, n Notice) error
	// Listen delivers notices to fn until ctx ends, reconnecting as needed
	// (after which it delivers NoticeReconnected). It returns ctx's error.
	Listen(ctx context.Context, self ServerID, fn func(Notice)) error
}

// OpenCount is what a namespace holds in activities not closed yet.
type OpenCount struct {
	Activities   int
	PayloadBytes int64
}
