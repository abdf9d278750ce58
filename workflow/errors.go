package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// ErrCanceled is the error of a canceled Context: the run's cancellation
// was requested (client Cancel), or a CancelFunc of WithCancel was called.
// Waits on a canceled Context return it (or an error wrapping it), and a
// workflow function that returns an error wrapping it after the run's
// cancellation was requested closes the run as CANCELED.
var ErrCanceled = errors.New("workflow canceled")

// ActivityError is why an activity step did not complete: a failure its
// worker reported, or one the server set (types "worker_lost",
// "start_to_close_timeout", "schedule_to_close_timeout", "canceled", …).
// Future.Get returns it; inspect it with errors.As.
type ActivityError struct {
	// Step is the step number of the activity in its run.
	Step int64
	// ActivityType is the activity's type.
	ActivityType string
	// Type is the machine-readable failure type.
	Type string
	// Message describes the failure.
	Message string
	// Retryable is the worker's (or the server's) verdict on the failure.
	Retryable bool
	// Details are the failure's application details, JSON by convention.
	Details []byte
}

// Error implements error.
func (e *ActivityError) Error() string {
	msg := fmt.Sprintf("activity %q (step %d) failed", e.ActivityType, e.Step)
	if e.Type != "" {
		msg += ": " + e.Type
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// ErrorType returns the failure type, so that a workflow that returns the
// error fails with the same type.
func (e *ActivityError) ErrorType() string { return e.Type }

// Is reports an activity that was canceled (type "canceled") as ErrCanceled.
func (e *ActivityError) Is(target error) bool { return target == ErrCanceled && e.Type == "canceled" }

// ChildError is why a child workflow did not complete.
type ChildError struct {
	// Step is the step number of the child in the parent's run.
	Step int64
	// WorkflowType is the child's workflow type.
	WorkflowType string
	// Status is how the child's run closed: "failed", "canceled",
	// "terminated" or "continued_as_new".
	Status string
	// Type, Message and Details are the child run's failure, when it has one.
	Type    string
	Message string
	Details []byte
}

// Error implements error.
func (e *ChildError) Error() string {
	msg := fmt.Sprintf("child workflow %q (step %d) %s", e.WorkflowType, e.Step, e.Status)
	if e.Type != "" {
		msg += ": " + e.Type
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// ErrorType returns the child's failure type (its status when it has none).
func (e *ChildError) ErrorType() string {
	if e.Type != "" {
		return e.Type
	}
	return e.Status
}

// Is reports a canceled child as ErrCanceled.
func (e *ChildError) Is(target error) bool { return target == ErrCanceled && e.Status == "canceled" }

// NonDeterministicError says the workflow code diverged from its recorded
// history: at Step it took (Kind, Name) where history recorded
// (RecordedKind, RecordedName). An empty Kind means the code took no step
// where history recorded one; an empty RecordedKind means history records
// no step where the code took one. The workflow task fails with type
// "nondeterministic" and the run waits for fixed code.
type NonDeterministicError struct {
	Step         int64
	Kind         string
	Name         string
	RecordedKind string
	RecordedName string
	// RecordedStep is the step number of the recorded command, when it is
	// not Step (a cancel refers to the step it cancels).
	RecordedStep int64
	// Detail is set for a divergence that is not a step mismatch (for
	// example an event for a step the code never took).
	Detail string
}

// Error implements error.
func (e *NonDeterministicError) Error() string { return "nondeterministic: " + e.what() }

// what is the message without its type, as a task failure carries it.
func (e *NonDeterministicError) what() string {
	if e.Detail != "" {
		return e.Detail
	}
	where := "step " + strconv.FormatInt(e.Step, 10)
	if e.Step == 0 {
		where = "after the last step"
	}
	switch {
	case e.Kind == "":
		return fmt.Sprintf("%s: history recorded %s but the code did not take it", where, describe(e.RecordedKind, e.RecordedName))
	case e.RecordedKind == "":
		return fmt.Sprintf("%s: the code took %s where history records none", where, describe(e.Kind, e.Name))
	}
	recorded := describe(e.RecordedKind, e.RecordedName)
	if e.RecordedStep != e.Step && e.RecordedStep != 0 {
		recorded += " of step " + strconv.FormatInt(e.RecordedStep, 10)
	}
	return fmt.Sprintf("%s: the code took %s, history recorded %s", where, describe(e.Kind, e.Name), recorded)
}

func describe(kind, name string) string { return kind + " " + strconv.Quote(name) }

// PanicError is a panic recovered from workflow code; the workflow task
// fails with type "panic" and is retried.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack string
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("workflow panicked: %v", e.Value) }

// ContinueAsNewError, returned by a workflow function, closes the run as
// CONTINUED_AS_NEW: the server starts a new run of the same workflow id with
// fresh history and Input. Make it with NewContinueAsNewError.
type ContinueAsNewError struct {
	// Input is the next run's input, JSON.
	Input []byte
	err   error // encoding the input failed
}

// NewContinueAsNewError returns the error that continues the run as a new
// one with input (encoded as JSON). Return it from the workflow function.
func NewContinueAsNewError(input any) error {
	b, err := encode(input)
	if err != nil {
		err = fmt.Errorf("continue as new: encode input %T: %w", input, err)
	}
	return &ContinueAsNewError{Input: b, err: err}
}

// Error implements error.
func (e *ContinueAsNewError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return "continue as new"
}

// encode is the payload encoding: JSON, and nothing for a nil input.
func encode(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	return json.Marshal(v)
}

// decode is the payload decoding: an empty payload leaves out at its zero
// value.
func decode[T any](b []byte) (T, error) {
	var out T
	if len(b) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("decode %s into %T: %w", clip(b), out, err)
	}
	return out, nil
}

func clip(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:64])) + "…"
	}
	return strconv.Quote(string(b))
}

// errorTyper is an error that names its failure type.
type errorTyper interface{ ErrorType() string }
