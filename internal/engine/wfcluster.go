package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/protobuf/proto"
)

// In cluster mode a run is held by one server at a time: the one that
// started it, when its workers serve the run's workflow type, or else the
// first server with such workers to claim it. The holder keeps the run in
// memory exactly as a lone server does, and only it appends to the run's
// history (the store fences every append on the holder). Other servers
// post to the run's inbox (signals, cancel and terminate requests, the
// close of a step activity they ran or of a child they held), which the
// holder appends and consumes in one write. A holder with no worker left
// for a run lets go of it; a holder that dies is reaped and its runs are
// claimed by the others.

// runClaimLimit caps the runs one claim takes at once.
const runClaimLimit = 64

// runClaims is the cluster state of workflow runs: which workflow types
// want a claim, and the inbox events being applied.
type runClaims struct {
	dirty map[store.RunClaim]struct{}
	// inbox are runs whose inbox must be read.
	inbox map[runKey]struct{}
	kick  chan struct{}
}

func newRunClaims() *runClaims {
	return &runClaims{dirty: make(map[store.RunClaim]struct{}), inbox: make(map[runKey]struct{}), kick: make(chan struct{}, 1)}
}

func (c *runClaims) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// servesWorkflowLocked reports whether this server's workers serve the workflow
// type in the pool, any build: then it holds a new run of it itself.
func (e *Engine) servesWorkflowLocked(ns, tq, typ string) bool {
	_, ok := e.reg.DefaultBuild(registry.Pool(ns, tq), typ)
	return ok
}

// runNoticeLocked takes a work notice's workflow triples, and reports whether it
// took it (it was not about activities).
func (e *Engine) runNoticeLocked(t [3]string) bool {
	switch {
	case t[2] == store.InboxWorkPrefix:
		if e.runs[runKey{t[0], t[1]}] != nil {
			e.rc.inbox[runKey{t[0], t[1]}] = struct{}{}
			e.rc.wake()
		}
		return true
	case strings.HasPrefix(t[2], store.AdmitWorkPrefix):
		k := wfGroupKey{t[0], t[1], strings.TrimPrefix(t[2], store.AdmitWorkPrefix)}
		if g := e.wfGroups[k]; g != nil {
			e.checkHeldLocked(k, g)
		}
		return true
	case strings.HasPrefix(t[2], store.RunWorkPrefix):
		c := store.RunClaim{Namespace: t[0], TaskQueue: t[1], WorkflowType: strings.TrimPrefix(t[2], store.RunWorkPrefix)}
		if e.servesWorkflowLocked(c.Namespace, c.TaskQueue, c.WorkflowType) {
			e.rc.dirty[c] = struct{}{}
			e.rc.wake()
		}
		return true
	}
	return false
}

// markAllRunClaimsLocked asks for a claim of every workflow type local
// workers serve: after a worker joined, a notice was lost, or a poll.
func (e *Engine) markAllRunClaimsLocked() {
	for _, w := range e.reg.Workers() {
		for _, ns := range w.Namespaces {
			for _, typ := range w.WorkflowTypes {
				e.rc.dirty[store.RunClaim{Namespace: ns, TaskQueue: w.TaskQueue, WorkflowType: typ}] = struct{}{}
			}
		}
	}
	if len(e.rc.dirty) > 0 {
		e.rc.wake()
	}
}

// runRunClaims claims runs for local workers and applies inbox events
// whenever kicked, and every poll: it also looks at every held run's inbox
// (a backstop for a lost notice) and lets go of runs no local worker
// serves any more.
func (e *Engine) runRunClaims() {
	defer e.done.Done()
	t := e.clock.NewTicker(e.cl.Poll)
	defer t.Stop()
	for {
		poll := false
		select {
		case <-e.stop:
			return
		case <-e.rc.kick:
		case <-t.C():
			poll = true
		}
		if poll {
			e.mu.Lock()
			e.markAllRunClaimsLocked()
			e.checkAllHeldLocked()
			e.mu.Unlock()
			e.pollOwnedInbox()
			e.releaseUnservedRuns()
		}
		e.claimRunsRound()
		e.drainInboxes()
	}
}

// claimRunsRound claims the runs marked dirty and loads each one.
func (e *Engine) claimRunsRound() {
	e.mu.Lock()
	claims := make([]store.RunClaim, 0, len(e.rc.dirty))
	for c := range e.rc.dirty {
		if e.servesWorkflowLocked(c.Namespace, c.TaskQueue, c.WorkflowType) {
			claims = append(claims, c)
		}
	}
	clear(e.rc.dirty)
	e.mu.Unlock()
	if len(claims) == 0 {
		return
	}
	var runs []store.Run
	err := e.call(func(ctx context.Context) (err error) {
		runs, err = e.cl.Store.ClaimRuns(ctx, e.cl.Self, claims, runClaimLimit)
		return err
	})
	if err != nil {
		e.choreFailed("claim runs", err)
		e.mu.Lock()
		for _, c := range claims {
			e.rc.dirty[c] = struct{}{}
		}
		e.mu.Unlock()
		return
	}
	e.choreOK("claim runs")
	for _, rec := range runs {
		if err := e.call(func(ctx context.Context) error { return e.loadRunRecord(ctx, rec) }); err != nil {
			e.log.Error("load a claimed run", "namespace", rec.Namespace, "run", rec.RunID, "err", err)
			_ = e.call(func(ctx context.Context) error {
				_, err := e.cl.Store.ReleaseRun(ctx, e.cl.Self, rec.Namespace, rec.RunID)
				return err
			})
			continue
		}
		e.mu.Lock()
		e.rc.inbox[runKey{rec.Namespace, rec.RunID}] = struct{}{}
		e.mu.Unlock()
	}
	if len(runs) > 0 {
		// A full claim may have left more behind: look again.
		e.mu.Lock()
		for _, c := range claims {
			e.rc.dirty[c] = struct{}{}
		}
		e.mu.Unlock()
		e.rc.wake()
	}
}

// pollOwnedInbox marks every held run with inbox events. A server that
// holds no run has nothing to mark, and does not read.
func (e *Engine) pollOwnedInbox() {
	e.mu.Lock()
	held := len(e.runs)
	e.mu.Unlock()
	if held == 0 {
		return
	}
	var evs []store.RunEvent
	err := e.call(func(ctx context.Context) (err error) {
		evs, err = e.cl.Store.ListOwnedInbox(ctx, e.cl.Self)
		return err
	})
	if err != nil {
		e.choreFailed("read run inboxes", err)
		return
	}
	e.choreOK("read run inboxes")
	e.mu.Lock()
	for _, ev := range evs {
		if e.runs[runKey{ev.Namespace, ev.RunID}] != nil {
			e.rc.inbox[runKey{ev.Namespace, ev.RunID}] = struct{}{}
		}
	}
	e.mu.Unlock()
}

// drainInboxes applies the inbox events of the runs marked.
func (e *Engine) drainInboxes() {
	e.mu.Lock()
	keys := make([]runKey, 0, len(e.rc.inbox))
	for k := range e.rc.inbox {
		keys = append(keys, k)
	}
	clear(e.rc.inbox)
	e.mu.Unlock()
	for _, k := range keys {
		var evs []store.RunEvent
		err := e.call(func(ctx context.Context) (err error) {
			evs, err = e.cl.Store.ReadRunInbox(ctx, k.ns, k.id)
			return err
		})
		if err != nil {
			e.choreFailed("read a run inbox", err)
			continue
		}
		e.mu.Lock()
		if r := e.runs[k]; r != nil && r.creating == nil {
			e.applyInboxLocked(r, evs)
		}
		e.mu.Unlock()
	}
}

// applyInboxLocked appends what the inbox events say to the run's history
// and consumes them in the same write; an event already being applied is
// skipped.
func (e *Engine) applyInboxLocked(r *wfRun, evs []store.RunEvent) {
	now := e.now().UTC()
	for _, in := range evs {
		if r.closing {
			return
		}
		if _, seen := r.inboxSeen[in.ID]; seen {
			continue
		}
		if r.inboxSeen == nil {
			r.inboxSeen = make(map[int64]struct{})
		}
		r.inboxSeen[in.ID] = struct{}{}
		r.consume = append(r.consume, in.ID)
		ev := new(aionv1.HistoryEvent)
		if err := proto.Unmarshal(in.Data, ev); err != nil {
			e.log.Error("drop a damaged run inbox event", "namespace", r.rec.Namespace, "run", r.rec.RunID, "event", in.ID, "err", err)
			continue
		}
		switch x := ev.GetEvent().(type) {
		case *aionv1.HistoryEvent_SignalReceived:
			e.appendLocked(r, now, &aionv1.HistoryEvent{Event: x})
		case *aionv1.HistoryEvent_CancelRequested:
			e.cancelRunLocked(r, x.CancelRequested.GetReason())
		case *aionv1.HistoryEvent_WorkflowClosed:
			e.closeRunLocked(r, now, &aionv1.CloseWorkflowCommand{Status: x.WorkflowClosed.GetStatus(), Failure: x.WorkflowClosed.GetFailure()})
		case *aionv1.HistoryEvent_ActivityClosed:
			if s := r.steps[x.ActivityClosed.GetStep()]; s != nil && s.kind == aionv1.StepKind_STEP_KIND_ACTIVITY {
				delete(r.steps, s.n)
				e.appendLocked(r, now, &aionv1.HistoryEvent{Event: x})
			}
		case *aionv1.HistoryEvent_ChildClosed:
			if s := r.steps[x.ChildClosed.GetStep()]; s != nil && s.kind == aionv1.StepKind_STEP_KIND_CHILD {
				delete(r.steps, s.n)
				e.appendLocked(r, now, &aionv1.HistoryEvent{Event: x})
			}
		}
	}
	e.flushLocked(r)
	e.needTaskLocked(r)
}

// releaseUnservedRuns lets go of held runs that no local worker serves any
// more and that have nothing in flight here, so a server with workers for
// them claims them.
func (e *Engine) releaseUnservedRuns() {
	e.mu.Lock()
	var idle []*wfRun
	for _, r := range e.runs {
		if r.creating != nil || r.closing || r.taskWorker != nil || r.writing || r.durable != r.length() ||
			len(r.extra) > 0 || r.updating || len(r.consume) > 0 || len(r.queries) > 0 {
			continue
		}
		if e.servesWorkflowLocked(r.rec.Namespace, r.rec.TaskQueue, r.rec.WorkflowType) {
			continue
		}
		idle = append(idle, r)
	}
	for _, r := range idle {
		e.releaseTaskLocked(r)
		e.dropRunLocked(r)
	}
	e.mu.Unlock()
	for _, r := range idle {
		err := e.call(func(ctx context.Context) error {
			_, err := e.cl.Store.ReleaseRun(ctx, e.cl.Self, r.rec.Namespace, r.rec.RunID)
			return err
		})
		if err != nil {
			e.log.Warn("release a run no local worker serves", "namespace", r.rec.Namespace, "run", r.rec.RunID, "err", err)
		}
	}
}

// postToRun puts an event in the inbox of an open run another server holds
// (or none does) and returns once it is durable; ErrFailedPrecondition when
// the run is not open.
func (e *Engine) postToRun(ctx context.Context, op string, rec store.Run, ev *aionv1.HistoryEvent) error {
	data, err := proto.Marshal(ev)
	if err != nil {
		return fmt.Errorf("%s: encode the event: %w", op, err)
	}
	ok, err := e.commit.Commit(ctx, store.PostRunEvent{Event: store.RunEvent{Namespace: rec.Namespace, RunID: rec.RunID, Data: data}})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if !ok {
		return fmt.Errorf("%s: run %s of workflow %q is closed: %w", op, rec.RunID, rec.WorkflowID, ErrFailedPrecondition)
	}
	return nil
}

// stepOfActivity names the run and step an activity id belongs to, when it
// has the form of a step activity's id ("<run id>-<step>").
func stepOfActivity(id string) (runID string, step int64, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 || i == len(id)-1 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || n <= 0 {
		return "", 0, false
	}
	return id[:i], n, true
}

// stepClosePost is, in cluster mode, the inbox event a step activity's
// terminal write carries to its run; nil for an activity of no run.
func stepClosePost(a *store.Activity, end store.EndAttempt) *store.RunEvent {
	runID, step, ok := stepOfActivity(a.ID)
	if !ok {
		return nil
	}
	ac := &aionv1.ActivityClosed{Step: step, Attempts: uint32(a.Attempt)}
	if end.State == store.StateCompleted {
		ac.Result = end.Result
	} else {
		ac.Failure = failureProto(end.ActivityFailure)
	}
	data, err := proto.Marshal(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ActivityClosed{ActivityClosed: ac}})
	if err != nil {
		return nil
	}
	return &store.RunEvent{Namespace: a.Namespace, RunID: runID, Data: data}
}

// postStepClosed posts the close of step activities the store closed
// itself (a waiting activity canceled or timed out in the store).
func (e *Engine) postStepClosed(closed []store.Activity) {
	for i := range closed {
		a := &closed[i]
		p := stepClosePost(a, store.EndAttempt{State: a.State, Result: a.Result, ActivityFailure: a.Failure})
		if p != nil {
			e.commit.Submit(store.PostRunEvent{Event: *p}, nil)
		}
	}
}

// cancelStepElsewhereLocked cancels a step activity this server does not
// hold, in the background: a waiting one is closed in the store (and its
// close posted to the run), a running one through its owner.
func (e *Engine) cancelStepElsewhereLocked(k key, reason string) {
	if e.closed {
		return
	}
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		ctx, cancel := context.WithTimeout(e.bgCtx, time.Minute)
		defer cancel()
		res, err := e.cl.Store.RequestCancel(ctx, store.CancelRequest{Namespace: k.ns, ID: k.id, Reason: reason, Now: e.now()})
		if err != nil {
			return
		}
		switch res.Outcome {
		case store.CancelDone:
			if a, err := e.st.GetActivity(ctx, k.ns, k.id); err == nil {
				e.postStepClosed([]store.Activity{a})
			}
		case store.CancelForwarded:
			if res.Owner == e.cl.Self {
				e.CancelOwned(k.ns, k.id, reason)
			} else if e.cl.ForwardCancel != nil {
				e.cl.ForwardCancel(ctx, res.Owner, k.ns, k.id, reason)
			}
		}
	}()
}

// cancelChildElsewhereLocked asks a child another server holds to cancel.
func (e *Engine) cancelChildElsewhereLocked(child runKey, reason string) {
	if e.closed {
		return
	}
	data, err := proto.Marshal(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_CancelRequested{CancelRequested: &aionv1.CancelRequested{Reason: reason}}})
	if err != nil {
		return
	}
	e.commit.Submit(store.PostRunEvent{Event: store.RunEvent{Namespace: child.ns, RunID: child.id, Data: data}}, nil)
}
