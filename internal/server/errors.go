package server

import (
	"context"
	"errors"

	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// toStatus maps an error from the packages below to a gRPC status. Only this
// edge knows gRPC codes; the message keeps the full wrapped context.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codeOf(err), err.Error())
}

func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, namespace.ErrPermissionDenied):
		return codes.PermissionDenied
	case errors.Is(err, namespace.ErrInvalid), errors.Is(err, name.ErrInvalid),
		errors.Is(err, registry.ErrInvalidSpec), errors.Is(err, engine.ErrInvalid), errors.Is(err, errInvalid),
		errors.Is(err, limit.ErrInvalid):
		return codes.InvalidArgument
	case errors.Is(err, namespace.ErrUnknown), errors.Is(err, engine.ErrNotFound), errors.Is(err, store.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, namespace.ErrPlacement), errors.Is(err, engine.ErrFailedPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, engine.ErrAlreadyExists):
		return codes.AlreadyExists
	case errors.Is(err, engine.ErrResourceExhausted), errors.Is(err, limit.ErrTooLarge), errors.Is(err, namespace.ErrLimit):
		return codes.ResourceExhausted
	case errors.Is(err, engine.ErrClosed), errors.Is(err, store.ErrClosed), errors.Is(err, errShuttingDown),
		errors.Is(err, engine.ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, store.ErrUnavailable):
		// The database is unreachable or the connection to it broke: nothing
		// was acknowledged, and the call may be tried again (a schedule with
		// the same id is idempotent).
		return codes.Unavailable
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Internal
}

var (
	errInvalid      = errors.New("invalid argument")
	errShuttingDown = errors.New("server is shutting down")
)
