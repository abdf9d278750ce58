package attack

import (
	"context"
	"encoding/base64"
	"strings"
	"sync"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/grpc/metadata"
)

const scheduleMethod = "/aion.v1.ActivityService/Schedule"

// unauthLarge sends, from Attackers callers without a token (each on its
// own connection), Schedule requests of LargeBytes each, one after another;
// and from one more caller small requests carrying a TokenBytes bearer
// token shaped like a JWT.
func unauthLarge(ctx context.Context, e *env) {
	big := make([]byte, e.o.LargeBytes)
	body := encode(&aionv1.ScheduleRequest{Namespace: attackerNS, ActivityType: "x"}).
		bytesField(&aionv1.ScheduleRequest{}, "payload", big)
	var wg sync.WaitGroup
	for range e.o.Attackers {
		wg.Go(func() { unauthCaller(ctx, e, "large body", body, "") })
	}
	wg.Go(func() {
		small := encode(&aionv1.ScheduleRequest{Namespace: attackerNS, ActivityType: "x", Payload: []byte(`{}`)})
		unauthCaller(ctx, e, "large token", small, jwtShaped(e.o.TokenBytes))
	})
	wg.Wait()
	e.note("each large body is %d bytes; the large token is %d bytes", body.size(), e.o.TokenBytes)
}

// jwtShaped returns a token of n bytes that looks like a JWT (header,
// claims, signature) but is signed by nobody.
func jwtShaped(n int) string {
	head := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "."
	sig := "." + strings.Repeat("s", 43)
	return head + strings.Repeat("e", max(0, n-len(head)-len(sig))) + sig
}

func unauthCaller(ctx context.Context, e *env, label string, body frame, token string) {
	cc, err := dial(e.srv.grpcAddr, "")
	if err != nil {
		e.tally.add(label+": "+outcome(err), 1)
		return
	}
	defer cc.Close()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	for range e.o.MaxRequests {
		if ctx.Err() != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		e.tally.sent.Add(1)
		err := cc.Invoke(cctx, scheduleMethod, body, new(aionv1.ScheduleResponse))
		cancel()
		if ctx.Err() != nil {
			e.tally.add(label+": cut off at the end", 1)
			return
		}
		e.tally.add(label+": "+outcome(err), 1)
	}
}
