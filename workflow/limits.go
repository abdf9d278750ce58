package workflow

import (
	"encoding/json"
	"fmt"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/limit"
)

// The server refuses a workflow task result whose failure or query answers
// are over the limits of docs/protocol.md, and fails the task of a command
// over them. The SDK keeps within them: text is clipped, and a payload
// over its limit is an error the code sees (a step not taken, a query
// answered with an error, a run failed) instead of a run that cannot move.

// checkPayload refuses a payload over the limit, naming what it is.
func checkPayload(what string, b []byte) error {
	if len(b) > limit.Payload {
		return fmt.Errorf("%s is %d bytes, at most %d allowed", what, len(b), limit.Payload)
	}
	return nil
}

// clipped returns f with its type, message and details within the limits.
func clipped(f *aionv1.Failure) *aionv1.Failure {
	if f == nil {
		return nil
	}
	f.Type = limit.Clip(f.GetType(), limit.FailureType)
	f.Message = limit.Clip(f.GetMessage(), limit.FailureMessage)
	if len(f.GetDetails()) > limit.FailureDetails {
		f.Details, _ = json.Marshal(fmt.Sprintf("details of %d bytes left out (at most %d allowed)", len(f.GetDetails()), limit.FailureDetails))
	}
	return f
}

// stackDetails is a panic's stack as failure details: a JSON string, the
// stack clipped so that the escaped text stays within the limit.
func stackDetails(stack string) []byte {
	b, _ := json.Marshal(limit.Clip(stack, limit.FailureDetails/2))
	return b
}
