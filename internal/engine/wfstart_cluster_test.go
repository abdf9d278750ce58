package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/aion-run/aion/internal/pgtest"
)

// In a cluster an open run need not be in the starting server's memory (no
// local worker serves its type, so the store keeps it for a server whose
// workers do): starting its workflow id again answers from the store's
// record, as it would from memory, instead of looking again for ever.
func TestClusterStartOfAnOpenWorkflowIDHeldNowhereAnswersFromTheStore(t *testing.T) {
	t.Parallel()
	b, _ := setupCluster(t, pgtest.Fresh(t, 0), "server-a")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req := WorkflowRequest{Namespace: "ns", WorkflowID: "nightly@2030-01-02T03:04:05Z", WorkflowType: "report", Input: []byte("in"),
		IDReuse: ReuseRejectDuplicate}
	first, existing, err := b.eng.StartWorkflow(ctx, anyone, req)
	if err != nil || existing {
		t.Fatalf("first start: existing=%v err=%v", existing, err)
	}
	again, existing, err := b.eng.StartWorkflow(ctx, anyone, req)
	if err != nil || !existing || again.RunID != first.RunID {
		t.Fatalf("same start again: run %q existing=%v err=%v; want run %q, existing", again.RunID, existing, err, first.RunID)
	}
	other := req
	other.Input = []byte("different")
	if _, _, err := b.eng.StartWorkflow(ctx, anyone, other); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("different start of the open id: %v, want ErrAlreadyExists", err)
	}
}
