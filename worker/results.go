package worker

import (
	"cmp"
	"slices"
	"strconv"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// attemptKey is the fencing token of one attempt.
type attemptKey struct {
	namespace string
	id        string
	attempt   uint32
}

func (k attemptKey) String() string {
	return k.namespace + "/" + k.id + "#" + strconv.FormatUint(uint64(k.attempt), 10)
}

// resultBook keeps every result the server has not acknowledged yet, in the
// order they were produced, so that a reconnect re-sends them in that order.
// It is not safe for concurrent use; the worker guards it with its mutex.
type resultBook struct {
	seq     uint64
	pending map[attemptKey]pendingResult
}

type pendingResult struct {
	seq uint64
	msg *aionv1.ActivityResult
}

// add records a result; a second result for the same attempt replaces the
// first (it keeps its place in the order).
func (b *resultBook) add(r *aionv1.ActivityResult) {
	if b.pending == nil {
		b.pending = make(map[attemptKey]pendingResult)
	}
	k := resultKey(r)
	if old, ok := b.pending[k]; ok {
		b.pending[k] = pendingResult{seq: old.seq, msg: r}
		return
	}
	b.seq++
	b.pending[k] = pendingResult{seq: b.seq, msg: r}
}

// ack forgets the result of attempt k and reports whether it was pending.
func (b *resultBook) ack(k attemptKey) bool {
	if _, ok := b.pending[k]; !ok {
		return false
	}
	delete(b.pending, k)
	return true
}

// has reports whether attempt k has an unacknowledged result.
func (b *resultBook) has(k attemptKey) bool {
	_, ok := b.pending[k]
	return ok
}

// len is the number of unacknowledged results.
func (b *resultBook) len() int { return len(b.pending) }

// unacked returns the unacknowledged results, oldest first.
func (b *resultBook) unacked() []*aionv1.ActivityResult {
	out := make([]pendingResult, 0, len(b.pending))
	for _, p := range b.pending {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b pendingResult) int { return cmp.Compare(a.seq, b.seq) })
	msgs := make([]*aionv1.ActivityResult, len(out))
	for i, p := range out {
		msgs[i] = p.msg
	}
	return msgs
}

func resultKey(r *aionv1.ActivityResult) attemptKey {
	return attemptKey{namespace: r.GetNamespace(), id: r.GetActivityId(), attempt: r.GetAttempt()}
}
