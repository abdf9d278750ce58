package server_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// getJSONObject GETs url and decodes its JSON object, failing unless the
// status is want.
func getJSONObject(t *testing.T, url string, want int) map[string]any {
	t.Helper()
	code, body := httpCall(t, http.MethodGet, url, "", "")
	if code != want {
		t.Fatalf("GET %s: %d %s, want %d", url, code, body, want)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
	return out
}

func TestHTTPAPIShowsAJSONPayloadAsJSONAndOtherBytesMarkedAsBase64(t *testing.T) {
	t.Parallel()
	p := setupProto(t)
	w := p.worker(t, 2)
	p.schedule(t, "json", func(r *aionv1.ScheduleRequest) { r.Payload = []byte(`{"a": 1, "s": "<b>"}`) })
	p.schedule(t, "bin", func(r *aionv1.ScheduleRequest) { r.Payload = []byte{0x00, 0xff} })
	for range 2 {
		task := w.Task()
		result := `[1, 2.50, "x"]`
		if task.GetActivityId() == "bin" {
			result = "plain text"
		}
		if ack := w.Complete(task, []byte(result)); ack.GetRefused() != "" {
			t.Fatal(ack)
		}
	}
	base := "http://" + p.srv.HTTPAddr() + "/api/v1/activities"
	check := func(what string, a map[string]any, payload, result any) {
		t.Helper()
		if !reflect.DeepEqual(a["payload"], payload) || !reflect.DeepEqual(a["result"], result) {
			t.Errorf("%s: payload %#v, result %#v; want %#v, %#v", what, a["payload"], a["result"], payload, result)
		}
	}
	jsonPayload := map[string]any{"a": float64(1), "s": "<b>"}
	jsonResult := []any{float64(1), 2.5, "x"}
	binPayload := map[string]any{"base64": "AP8="}
	binResult := map[string]any{"base64": "cGxhaW4gdGV4dA=="}

	got := getJSONObject(t, base+"/p/json", http.StatusOK)["activity"].(map[string]any)
	check("GET json", got, jsonPayload, jsonResult)
	// Everything else is protojson as before: uint64 as strings, enum names.
	at := got["attempts"].([]any)[0].(map[string]any)
	if _, ok := at["worker_id"].(string); !ok || got["state"] != "ACTIVITY_STATE_COMPLETED" {
		t.Errorf("GET json: worker_id %#v, state %#v", at["worker_id"], got["state"])
	}
	check("GET bin", getJSONObject(t, base+"/p/bin", http.StatusOK)["activity"].(map[string]any), binPayload, binResult)

	list := getJSONObject(t, base+"?namespace=p&include_payloads=true", http.StatusOK)["activities"].([]any)
	if len(list) != 2 {
		t.Fatalf("list: %d activities, want 2", len(list))
	}
	for _, item := range list {
		a := item.(map[string]any)
		if a["id"] == "json" {
			check("list json", a, jsonPayload, jsonResult)
		} else {
			check("list bin", a, binPayload, binResult)
		}
	}
}

func TestHTTPStateFilterTakesTheShortNameAndTheEnumName(t *testing.T) {
	t.Parallel()
	p := setupProto(t)
	w := p.worker(t, 1)
	p.schedule(t, "done")
	w.Complete(w.Task(), []byte(`1`))
	p.schedule(t, "waiting", func(r *aionv1.ScheduleRequest) { r.ActivityType = "no-worker-runs-it" })
	base := "http://" + p.srv.HTTPAddr() + "/api/v1/activities?namespace=p&state="
	for _, tc := range []struct {
		state string
		want  []string
	}{
		{"completed", []string{"done"}},
		{"ACTIVITY_STATE_COMPLETED", []string{"done"}},
		{"Activity_State_Scheduled", []string{"waiting"}},
		{"timed_out", nil},
	} {
		var ids []string
		if list, ok := getJSONObject(t, base+tc.state, http.StatusOK)["activities"].([]any); ok {
			for _, a := range list {
				ids = append(ids, a.(map[string]any)["id"].(string))
			}
		}
		if !reflect.DeepEqual(ids, tc.want) {
			t.Errorf("state=%s: %v, want %v", tc.state, ids, tc.want)
		}
	}
	for _, bad := range []string{"done", "ACTIVITY_STATE_UNSPECIFIED", "unspecified", "ACTIVITY_STATE_"} {
		if e := getJSONObject(t, base+bad, http.StatusBadRequest); e["code"] != "InvalidArgument" {
			t.Errorf("state=%s: %v, want InvalidArgument", bad, e)
		}
	}
}
