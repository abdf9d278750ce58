package worker

import (
	"context"
	"errors"
	"sync"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/workerhook"
)

func init() { workerhook.Offline = offline }

// offline runs w without a connection, for package aiontest: see
// workerhook.Offline. The frames take the path they take on a stream (the
// outbox, handle), so an offline attempt behaves as a connected one.
func offline(ctx context.Context, v any, workerID uint64, send func(*aionv1.WorkerMessage)) (deliver func(*aionv1.ServerMessage), stop func(), err error) {
	w, ok := v.(*Worker)
	if !ok || w == nil {
		return nil, nil, errors.New("worker: offline: not a *worker.Worker")
	}
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return nil, nil, errors.New("worker: offline: the worker was already started")
	}
	w.started = true
	w.hbEvery = 0
	if err := w.checkWorkflowsLocked(); err != nil {
		w.mu.Unlock()
		return nil, nil, err
	}
	w.handlerCtx, w.cancelHandlers = context.WithCancelCause(context.WithoutCancel(ctx))
	w.startWorkflows()
	w.mu.Unlock()

	out := newOutbox()
	w.attach(out, workerID)
	done := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		_ = out.run(funcStream(send), done)
	}()
	stopAfter := context.AfterFunc(ctx, func() { w.cancelHandlers(ErrWorkerStopping) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			stopAfter()
			w.cancelHandlers(ErrWorkerStopping)
			w.tasks.Wait()
			w.aux.Wait()
			w.stopWorkflows()
			close(done)
			<-sent
			w.detach(out)
		})
	}
	return func(m *aionv1.ServerMessage) { w.handle(out, m) }, stop, nil
}

// funcStream is a send stream that hands each frame to a function.
type funcStream func(*aionv1.WorkerMessage)

func (f funcStream) Send(m *aionv1.WorkerMessage) error { f(m); return nil }
func (funcStream) CloseSend() error                     { return nil }
