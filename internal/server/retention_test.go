package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

func TestSetRetentionIsShownByGetAndListAndZeroRestoresTheDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "billing"}); err != nil {
		t.Fatal(err)
	}
	retention := func() time.Duration {
		t.Helper()
		got, err := b.namespaces.Get(ctx, &aionv1.GetNamespaceRequest{Name: "billing"})
		if err != nil {
			t.Fatal(err)
		}
		all, err := b.namespaces.List(ctx, &aionv1.ListNamespacesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if l := all.GetNamespaces()[0].GetRetention().AsDuration(); l != got.GetNamespace().GetRetention().AsDuration() {
			t.Fatalf("List shows retention %v, Get %v", l, got.GetNamespace().GetRetention().AsDuration())
		}
		return got.GetNamespace().GetRetention().AsDuration()
	}
	week := 7 * 24 * time.Hour
	if got := retention(); got != week {
		t.Fatalf("new namespace retention %v, want the default %v", got, week)
	}
	resp, err := b.namespaces.SetRetention(ctx, &aionv1.SetRetentionRequest{Name: "billing", Retention: durationpb.New(72 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetNamespace().GetRetention().AsDuration(); got != 72*time.Hour {
		t.Fatalf("SetRetention answered retention %v, want 72h", got)
	}
	if got := retention(); got != 72*time.Hour {
		t.Fatalf("after SetRetention 72h: %v", got)
	}
	if _, err := b.namespaces.SetRetention(ctx, &aionv1.SetRetentionRequest{Name: "billing"}); err != nil {
		t.Fatal(err)
	}
	if got := retention(); got != week {
		t.Fatalf("after SetRetention unset: %v, want the default %v", got, week)
	}
}

func TestSetRetentionRefusesBadValuesByNameAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "billing"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.namespaces.SetRetention(ctx, &aionv1.SetRetentionRequest{Name: "billing", Retention: durationpb.New(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		ns        string
		retention *durationpb.Duration
		code      codes.Code
		mentions  string
	}{
		{"TooShort", "billing", durationpb.New(30 * time.Second), codes.InvalidArgument, "retention: 30s: out of range"},
		{"TooLong", "billing", durationpb.New(11 * 365 * 24 * time.Hour), codes.InvalidArgument, "retention: 96360h0m0s: out of range"},
		{"Negative", "billing", durationpb.New(-time.Hour), codes.InvalidArgument, "retention: -1h0m0s"},
		{"Invalid", "billing", &durationpb.Duration{Seconds: 1, Nanos: -1}, codes.InvalidArgument, "retention"},
		{"BadName", "white space", durationpb.New(time.Hour), codes.InvalidArgument, "name"},
		{"NeverMinted", "never", durationpb.New(time.Hour), codes.NotFound, "never"},
	}
	for _, c := range cases {
		_, err := b.namespaces.SetRetention(ctx, &aionv1.SetRetentionRequest{Name: c.ns, Retention: c.retention})
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.mentions) {
			t.Errorf("%s: %v, want %v mentioning %q", c.name, err, c.code, c.mentions)
		}
	}
	got, err := b.namespaces.Get(ctx, &aionv1.GetNamespaceRequest{Name: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	if r := got.GetNamespace().GetRetention().AsDuration(); r != time.Hour {
		t.Fatalf("refused calls changed the retention to %v", r)
	}
	if _, err := b.namespaces.Get(ctx, &aionv1.GetNamespaceRequest{Name: "never"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused SetRetention minted namespace never: %v", err)
	}
}

func TestHTTPAPISetsRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "billing"}); err != nil {
		t.Fatal(err)
	}
	url := "http://" + b.srv.HTTPAddr() + "/api/v1/namespaces/billing"
	code, body := httpCall(t, http.MethodPut, url+"/retention", "", `{"retention": "5400s"}`)
	if code != http.StatusOK || !strings.Contains(body, `"5400s"`) {
		t.Fatalf("PUT retention: %d %s", code, body)
	}
	if got := getJSONObject(t, url, http.StatusOK)["namespace"].(map[string]any)["retention"]; got != "5400s" {
		t.Fatalf("GET after PUT: retention %#v, want 5400s", got)
	}
	if code, body := httpCall(t, http.MethodPut, url+"/retention", "", `{"retention": "1s"}`); code != http.StatusBadRequest {
		t.Fatalf("PUT retention 1s: %d %s, want 400", code, body)
	}
}
