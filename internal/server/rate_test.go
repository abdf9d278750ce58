package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCallerPastItsReceiveRateIsRefusedFromHeaders: a caller that sent more
// request bytes than its rate allows is refused before its next body is
// read, with when to retry; nothing it sent past the rate is stored, and
// another caller goes on as before.
func TestCallerPastItsReceiveRateIsRefusedFromHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, withClientKeys("edge-a", "edge-b"), func(c *server.Config) {
		c.MaxReceiveRate = 1 // a byte a second: the burst (one message) is all there is
	})
	ctx := context.Background()
	schedule := func(token, id string) error {
		_, err := b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "edge", Id: id, TaskQueue: "nobody",
			ActivityType: "t", Payload: make([]byte, limit.Payload)}, grpc.PerRPCCredentials(bearer(token)))
		return err
	}
	var refused error
	sent := 0
	for ; sent < 10; sent++ {
		if refused = schedule("edge-a-secret", fmt.Sprintf("a-%d", sent)); refused != nil {
			break
		}
	}
	if status.Code(refused) != codes.ResourceExhausted || !strings.Contains(refused.Error(), `"edge-a"`) ||
		!strings.Contains(refused.Error(), "--max-receive-rate") || !strings.Contains(refused.Error(), "retry in") {
		t.Fatalf("after %d requests of %d bytes: %v; want ResourceExhausted naming edge-a, the flag and when to retry", sent, limit.Payload, refused)
	}
	if want := limit.Message / limit.Payload; sent != want {
		t.Fatalf("edge-a was refused after %d requests, want %d (the burst is one message)", sent, want)
	}
	if _, err := b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "edge", Id: fmt.Sprintf("a-%d", sent)},
		grpc.PerRPCCredentials(bearer("edge-b-secret"))); status.Code(err) != codes.NotFound {
		t.Fatalf("the refused request's activity: %v; want NotFound", err)
	}
	// Refused from its headers: a call that sends nothing is answered.
	cs, cancel := openCall(t, b.cc, "edge-a-secret")
	defer cancel()
	if err := answer(cs, 10*time.Second); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("edge-a's next call, no request sent: %v; want ResourceExhausted at once", err)
	}
	if err := schedule("edge-b-secret", "b-0"); err != nil {
		t.Fatalf("edge-b while edge-a is over its rate: %v", err)
	}
	// The JSON API answers the same caller the same way.
	url := "http://" + b.srv.HTTPAddr() + "/api/v1/activities"
	if code, body := httpCall(t, "POST", url, "edge-a-secret", `{"namespace":"edge","id":"http-a","activity_type":"t"}`); code != 429 ||
		!strings.Contains(body, "--max-receive-rate") {
		t.Fatalf("edge-a over HTTP while over its rate: %d %s; want 429 naming the flag", code, body)
	}
}

// TestHTTPBodiesCountAgainstTheReceiveRate: request bodies of the JSON API
// are charged to their caller like gRPC requests.
func TestHTTPBodiesCountAgainstTheReceiveRate(t *testing.T) {
	t.Parallel()
	b := setup(t, withClientKeys("edge-a", "edge-b"), func(c *server.Config) { c.MaxReceiveRate = 1 })
	url := "http://" + b.srv.HTTPAddr() + "/api/v1/activities"
	payload := strings.Repeat("A", 4<<20) // base64 of 3 MiB: over the 2 MiB payload limit, but read whole
	for i := range 10 {
		code, body := httpCall(t, "POST", url, "edge-a-secret",
			fmt.Sprintf(`{"namespace":"edge","id":"h-%d","activity_type":"t","payload":%q}`, i, payload))
		if code == 429 && strings.Contains(body, "--max-receive-rate") {
			if i < 2 {
				t.Fatalf("refused after %d bodies of 4 MiB, want 2 (the burst is 8 MiB)", i)
			}
			if code, body := httpCall(t, "POST", url, "edge-b-secret", `{"namespace":"edge","id":"b","activity_type":"t"}`); code != 200 {
				t.Fatalf("edge-b meanwhile: %d %s", code, body)
			}
			return
		}
	}
	t.Fatal("10 bodies of 4 MiB from one caller, none refused by the receive rate")
}
