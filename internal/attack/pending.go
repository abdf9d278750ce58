package attack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// pendingMemory runs Attackers callers with the attacker's client key that
// schedule activities of PendingBytes into a task queue no worker serves,
// one after another, and one that lists the attacker's activities,
// ListPageSize at a time, over the JSON API.
func pendingMemory(ctx context.Context, e *env) {
	cc, err := dial(e.srv.grpcAddr, e.srv.keys.attackClient)
	if err != nil {
		e.failed(ctx, "schedule", err)
		return
	}
	defer cc.Close()
	req := &aionv1.ScheduleRequest{Namespace: attackerNS, TaskQueue: "nobody", ActivityType: "x"}
	body := encode(req).bytesField(req, "payload", make([]byte, e.o.PendingBytes))
	var wg sync.WaitGroup
	for range e.o.Attackers {
		wg.Go(func() {
			for range e.o.MaxRequests {
				if ctx.Err() != nil {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				e.tally.sent.Add(1)
				err := cc.Invoke(cctx, scheduleMethod, body, new(aionv1.ScheduleResponse))
				cancel()
				if ctx.Err() != nil {
					e.tally.add("schedule: cut off at the end", 1)
					return
				}
				e.failed(ctx, "schedule", err)
			}
		})
	}
	wg.Go(func() { listLoop(ctx, e) })
	wg.Wait()
}

// listLoop lists the attacker's activities over the JSON API, one request
// after another, reading each whole response.
func listLoop(ctx context.Context, e *env) {
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	url := fmt.Sprintf("http://%s/api/v1/activities?namespace=%s&page_size=%d", e.srv.httpAddr, attackerNS, e.o.ListPageSize)
	var largest int64
	var slowest time.Duration
	lists := 0
	for range e.o.MaxRequests {
		if ctx.Err() != nil {
			break
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			e.failed(ctx, "list", err)
			return
		}
		req.Header.Set("Authorization", "Bearer "+e.srv.keys.attackClient)
		began := time.Now()
		e.tally.sent.Add(1)
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				e.tally.add("list: cut off at the end", 1)
				break
			}
			e.failed(ctx, "list", err)
			if !pause(ctx, 100*time.Millisecond) {
				break
			}
			continue
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil && ctx.Err() != nil {
			e.tally.add("list: cut off at the end", 1)
			break
		}
		e.tally.add(fmt.Sprintf("list: HTTP %d", resp.StatusCode), 1)
		lists++
		largest = max(largest, n)
		slowest = max(slowest, time.Since(began))
		// A list that answers at once should not become a busy loop.
		if !pause(ctx, 100*time.Millisecond) {
			break
		}
	}
	e.note("%d lists of page size %d: the largest response was %.1f MB, the slowest took %.2f s",
		lists, e.o.ListPageSize, float64(largest)/1e6, slowest.Seconds())
}
