package cluster

import (
	"slices"
	"testing"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// A server's own work notices ask for no claim of activities (its engine
// marked them when it wrote them) but still for its workflow work; every
// other server's notice asks for all it names.
func TestOwnWorkNoticesAskForNoActivityClaims(t *testing.T) {
	t.Parallel()
	triples := [][3]string{
		{"ns", "q", "t"},
		store.RunWork("ns", "q", "wf"),
		store.InboxWork("ns", "run-1"),
		store.AdmitWork("ns", "wf", "key"),
	}
	all := make([]registry.Triple, len(triples))
	for i, tr := range triples {
		all[i] = registry.NewTriple(tr[0], tr[1], tr[2])
	}
	for _, tc := range []struct {
		name string
		n    store.Notice
		want []registry.Triple
	}{
		{"another server's", store.Notice{Kind: store.NoticeWork, Triples: triples}, all},
		{"its own", store.Notice{Kind: store.NoticeWork, Triples: triples, Own: true}, all[1:]},
		{"its own activities only", store.Notice{Kind: store.NoticeWork, Triples: triples[:1], Own: true}, nil},
	} {
		if got := noticeWork(tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("%s notice: claim %v, want %v", tc.name, got, tc.want)
		}
	}
}
