package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// Causes of a handler's context cancellation; context.Cause(ctx) returns an
// error wrapping one of them.
var (
	// ErrActivityCanceled: the server gave the attempt up (CancelActivity:
	// the activity was canceled or the attempt timed out) or a cancel
	// intervention arrived.
	// A handler that returns an error after this is reported as canceled.
	ErrActivityCanceled = errors.New("activity canceled")
	// ErrAttemptStale: the server refused a heartbeat because this attempt
	// is no longer current (it timed out or was retried elsewhere). Its
	// result will be answered STALE too, so the handler should stop.
	ErrAttemptStale = errors.New("attempt is no longer current")
	// ErrWorkerStopping: the worker is stopping and the attempt ran past the
	// stop timeout (or the server's drain deadline). It is reported as a
	// retryable failure of type "worker_stopping".
	ErrWorkerStopping = errors.New("worker stopping")
)

// Error is a failure with an explicit type, retryability and details. A
// handler returns one (possibly wrapped) to control how its failure is
// reported; any other error is reported as retryable.
type Error struct {
	// Type is matched against the retry policy's non-retryable types.
	Type string
	// Message describes the failure.
	Message string
	// Retryable false ends the activity without another attempt.
	Retryable bool
	// Details are encoded as JSON into Failure.details.
	Details any
	// cause is the wrapped error, if any.
	cause error
}

// Error implements error.
func (e *Error) Error() string {
	if e.Type == "" {
		return e.Message
	}
	return e.Type + ": " + e.Message
}

// ErrorType returns Type, so that a workflow function that returns an
// *Error fails its run with that type.
func (e *Error) ErrorType() string { return e.Type }

// Unwrap returns the error NonRetryable wrapped, if any.
func (e *Error) Unwrap() error { return e.cause }

// NewError returns a failure of the given type. details (may be nil) are
// encoded as JSON.
func NewError(errType, message string, retryable bool, details any) *Error {
	return &Error{Type: errType, Message: message, Retryable: retryable, Details: details}
}

// NonRetryable marks err as not retryable: the activity fails for good
// instead of being retried. The failure type is derived from err as for any
// handler error (see the package documentation). NonRetryable(nil) is nil.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return &Error{Type: e.Type, Message: failureMessage(err, e), Retryable: false, Details: e.Details, cause: err}
	}
	return &Error{Type: errorType(err), Message: err.Error(), Retryable: false, cause: err}
}

// errorType names a plain error's type for Failure.type: "pkg.Type" for an
// exported named type (pointer stripped), "deadline_exceeded" and
// "context_canceled" for the context errors, and "error" for everything
// else (errors.New, fmt.Errorf, unexported types).
func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "context_canceled"
	}
	t := reflect.TypeOf(err)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Name() == "" {
		return "error"
	}
	if r, _ := utf8.DecodeRuneInString(t.Name()); !unicode.IsUpper(r) {
		return "error"
	}
	return t.String()
}

// toFailure converts a handler error into the wire Failure.
func toFailure(err error) *aionv1.Failure {
	var e *Error
	if errors.As(err, &e) {
		f := &aionv1.Failure{Type: e.Type, Message: failureMessage(err, e), Retryable: e.Retryable}
		if f.Type == "" {
			f.Type = "error"
		}
		if e.Details != nil {
			if b, jerr := json.Marshal(e.Details); jerr == nil {
				f.Details = b
			} else {
				f.Details, _ = json.Marshal(fmt.Sprintf("details not encodable as JSON: %v", jerr))
			}
		}
		return f
	}
	return &aionv1.Failure{Type: errorType(err), Message: err.Error(), Retryable: true}
}

// failureMessage is err's text with the *Error e inside it rendered as its
// bare message: the type travels in its own field, so "charge: quota: over
// limit" becomes "charge: over limit".
func failureMessage(err error, e *Error) string {
	if e.Type == "" {
		return err.Error()
	}
	return strings.Replace(err.Error(), e.Error(), e.Message, 1)
}

// panicError is a recovered handler panic.
type panicError struct {
	value any
	stack string
}

func (p *panicError) Error() string { return fmt.Sprintf("activity panicked: %v", p.value) }
