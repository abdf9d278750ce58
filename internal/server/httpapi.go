package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/payload"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxJSONBody bounds a JSON request body.
const maxJSONBody = 8 << 20

// The JSON API under /api/v1/ mirrors the gRPC services for curl and the
// console. Each handler decodes into the gRPC request message, calls the
// same service method the gRPC server calls, and encodes the response with
// protojson, so the two can never disagree.
func (s *Server) routeAPI(mux *http.ServeMux) {
	acts := &activityService{s: s}
	nss := &namespaceService{s: s}
	cluster := &clusterService{s: s}

	mux.HandleFunc("GET /api/v1/namespaces", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return nss.List(ctx, &aionv1.ListNamespacesRequest{})
		})
	})
	mux.HandleFunc("POST /api/v1/namespaces", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.CreateNamespaceRequest
		respondBody(w, r, &req, func(ctx context.Context) (proto.Message, error) { return nss.Create(ctx, &req) })
	})
	mux.HandleFunc("GET /api/v1/namespaces/{name}", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return nss.Get(ctx, &aionv1.GetNamespaceRequest{Name: r.PathValue("name")})
		})
	})
	mux.HandleFunc("PUT /api/v1/namespaces/{name}/placement", func(w http.ResponseWriter, r *http.Request) {
		var p aionv1.Placement
		respondBody(w, r, &p, func(ctx context.Context) (proto.Message, error) {
			return nss.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: r.PathValue("name"), Placement: &p})
		})
	})
	mux.HandleFunc("PUT /api/v1/namespaces/{name}/retention", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.SetRetentionRequest
		respondBody(w, r, &req, func(ctx context.Context) (proto.Message, error) {
			req.Name = r.PathValue("name")
			return nss.SetRetention(ctx, &req)
		})
	})
	mux.HandleFunc("GET /api/v1/waiting", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return cluster.ListWaiting(ctx, &aionv1.ListWaitingRequest{Namespace: r.URL.Query().Get("namespace")})
		})
	})
	mux.HandleFunc("GET /api/v1/workers", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return cluster.ListWorkers(ctx, &aionv1.ListWorkersRequest{Namespace: r.URL.Query().Get("namespace")})
		})
	})
	mux.HandleFunc("POST /api/v1/workers/{id}/drain", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "worker_id: %q is not a worker id", r.PathValue("id"))
			}
			return cluster.DrainWorker(ctx, &aionv1.DrainWorkerRequest{WorkerId: id})
		})
	})
	mux.HandleFunc("GET /api/v1/activities", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			q := r.URL.Query()
			req := &aionv1.ListActivitiesRequest{Namespace: q.Get("namespace"), ActivityType: q.Get("type"), PageToken: q.Get("page_token")}
			if v := q.Get("state"); v != "" {
				st, err := stateParam(v)
				if err != nil {
					return nil, err
				}
				req.State = st
			}
			if v := q.Get("page_size"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, status.Errorf(codes.InvalidArgument, "page_size: %q is not a number", v)
				}
				req.PageSize = int32(n)
			}
			if v := q.Get("include_payloads"); v != "" {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return nil, status.Errorf(codes.InvalidArgument, "include_payloads: %q is not true or false", v)
				}
				req.IncludePayloads = b
			}
			return acts.List(ctx, req)
		})
	})
	mux.HandleFunc("POST /api/v1/activities", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.ScheduleRequest
		respondBody(w, r, &req, func(ctx context.Context) (proto.Message, error) { return acts.Schedule(ctx, &req) })
	})
	mux.HandleFunc("GET /api/v1/activities/{namespace}/{id}", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return acts.Get(ctx, &aionv1.GetActivityRequest{Namespace: r.PathValue("namespace"), Id: r.PathValue("id")})
		})
	})
	mux.HandleFunc("GET /api/v1/activities/{namespace}/{id}/why", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return acts.Why(ctx, &aionv1.WhyRequest{Namespace: r.PathValue("namespace"), Id: r.PathValue("id")})
		})
	})
	mux.HandleFunc("POST /api/v1/activities/{namespace}/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return acts.Cancel(ctx, &aionv1.CancelRequest{Namespace: r.PathValue("namespace"), Id: r.PathValue("id"),
				Reason: r.URL.Query().Get("reason")})
		})
	})
	s.routeWorkflowAPI(mux)
	s.routeScheduleAPI(mux)
	mux.HandleFunc("GET /api/v1/events", s.serveEvents)
}

// stateParam reads the state filter: the enum name the JSON API answers
// with (ACTIVITY_STATE_TIMED_OUT) or its short form (timed_out), in any case.
func stateParam(v string) (aionv1.ActivityState, error) {
	name := strings.ToUpper(v)
	if !strings.HasPrefix(name, "ACTIVITY_STATE_") {
		name = "ACTIVITY_STATE_" + name
	}
	st, ok := aionv1.ActivityState_value[name]
	if !ok || st == int32(aionv1.ActivityState_ACTIVITY_STATE_UNSPECIFIED) {
		return 0, status.Errorf(codes.InvalidArgument,
			"state: %q is not an activity state; want scheduled, running, completed, failed, canceled or timed_out (or the enum name, ACTIVITY_STATE_COMPLETED)", v)
	}
	return aionv1.ActivityState(st), nil
}

var jsonOut = protojson.MarshalOptions{EmitUnpopulated: false, UseProtoNames: true}

// apiJSON is protojson of m, with every bytes field (payloads, results,
// details) shown by the payload rule: the JSON itself when it is JSON,
// {"base64": "..."} otherwise, rather than protojson's bare base64.
func apiJSON(m proto.Message) ([]byte, error) {
	b, err := jsonOut.Marshal(m)
	if err != nil || !hasBytes(m.ProtoReflect().Descriptor()) {
		return b, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // numbers go back out exactly as protojson wrote them
	var tree map[string]any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("render %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	showPayloads(m.ProtoReflect(), tree)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tree); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// showPayloads replaces, in obj (the protojson of m), each bytes field
// with its payload rendering, in m and in every message under it.
func showPayloads(m protoreflect.Message, obj map[string]any) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		key := string(fd.Name())
		switch {
		case fd.IsMap():
		case fd.IsList():
			items, _ := obj[key].([]any)
			list := v.List()
			for i := 0; i < list.Len() && i < len(items); i++ {
				switch fd.Kind() {
				case protoreflect.BytesKind:
					items[i] = json.RawMessage(payload.JSON(list.Get(i).Bytes()))
				case protoreflect.MessageKind, protoreflect.GroupKind:
					if sub, ok := items[i].(map[string]any); ok {
						showPayloads(list.Get(i).Message(), sub)
					}
				}
			}
		case fd.Kind() == protoreflect.BytesKind:
			obj[key] = json.RawMessage(payload.JSON(v.Bytes()))
		case fd.Kind() == protoreflect.MessageKind:
			if sub, ok := obj[key].(map[string]any); ok { // not a well-known type shown as a string
				showPayloads(v.Message(), sub)
			}
		}
		return true
	})
}

// bytesIn caches, per message type, whether it holds a bytes field at any
// depth.
var bytesIn sync.Map // protoreflect.FullName -> bool

func hasBytes(md protoreflect.MessageDescriptor) bool {
	if v, ok := bytesIn.Load(md.FullName()); ok {
		return v.(bool)
	}
	found := scanBytes(md, map[protoreflect.FullName]bool{})
	bytesIn.Store(md.FullName(), found)
	return found
}

func scanBytes(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Kind() == protoreflect.BytesKind {
			return true
		}
		if fd.Message() != nil && scanBytes(fd.Message(), seen) {
			return true
		}
	}
	return false
}

func respond(w http.ResponseWriter, r *http.Request, call func(context.Context) (proto.Message, error)) {
	msg, err := call(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	b, err := apiJSON(msg)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// respondBody decodes the JSON body into req, then calls.
func respondBody(w http.ResponseWriter, r *http.Request, req proto.Message, call func(context.Context) (proto.Message, error)) {
	if err := decodeBody(r, req, false); err != nil {
		writeError(w, err)
		return
	}
	respond(w, r, call)
}

// decodeBody reads the JSON body into req; with emptyOK, a body that is
// empty (or only white space) leaves req as it is.
func decodeBody(r *http.Request, req proto.Message, emptyOK bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "body: %v", err)
	}
	if len(body) > maxJSONBody {
		return status.Errorf(codes.ResourceExhausted, "body: more than %d bytes", maxJSONBody)
	}
	if emptyOK && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := protojson.Unmarshal(body, req); err != nil {
		return status.Errorf(codes.InvalidArgument, "body: %v", err)
	}
	return nil
}

var httpStatus = map[codes.Code]int{
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.NotFound:           http.StatusNotFound,
	codes.AlreadyExists:      http.StatusConflict,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.Unauthenticated:    http.StatusUnauthorized,
	codes.FailedPrecondition: http.StatusPreconditionFailed,
	codes.ResourceExhausted:  http.StatusTooManyRequests,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.Canceled:           499,
}

func writeError(w http.ResponseWriter, err error) {
	// A status from a service method is used as it is: converting it
	// again would prefix its message with "rpc error: code = ...".
	st, ok := status.FromError(err)
	if !ok {
		st = status.Convert(toStatus(err))
	}
	code, ok := httpStatus[st.Code()]
	if !ok {
		code = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": st.Code().String(), "message": st.Message()})
}

// sseKeepalive is how often an idle event stream gets a comment line, so
// proxies and the client see it alive (and a vanished client is noticed).
const sseKeepalive = 15 * time.Second

// sseFrame memoizes an event's SSE frame, encoded once per event for every
// subscriber (see events.Event.Memo).
type sseFrame struct{}

// serveEvents streams the cluster events as Server-Sent Events: first a
// snapshot, then every delta, each as protojson of a ClusterEvent with its
// position ("<epoch>-<sequence>") as the SSE id and the kind as the SSE
// event name. A reconnect that names the last position it saw, in the
// Last-Event-ID header (as a browser's EventSource sends it) or the after
// query parameter, gets a `resumed` event instead of the snapshot and then
// exactly the events it missed, when the bus still holds them all.
//
// Each write must finish within the HTTP write timeout: a client that stops
// reading is cut off once its socket buffers are full, rather than holding
// its connection for ever. A client that falls too far behind the bus is
// dropped with an `error` event after the events within its bound;
// reconnecting from the last of them resumes when the bus still holds what
// followed, and gets a fresh snapshot otherwise.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	from, err := sseFrom(r)
	if err != nil {
		writeError(w, err)
		return
	}
	rc := http.NewResponseController(w)
	start, sub := s.subscribeAfter(from)
	defer sub.Close()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	if r.ProtoMajor == 1 {
		// The connection is the stream's alone: when the stream ends (a
		// subscriber dropped for falling behind, a write past its
		// deadline) it is closed rather than kept for another request.
		// (On HTTP/2 the stream ends alone; this header would close the
		// whole connection.)
		w.Header().Set("Connection", "close")
	}
	write := func(b []byte) error {
		if d := s.cfg.Conn.HTTPWriteTimeout; d > 0 {
			// Not every ResponseWriter has deadlines; then there is none.
			_ = rc.SetWriteDeadline(time.Now().Add(d))
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	caller := s.caller(r.Context())
	kind := "snapshot"
	if start.Resumed {
		kind = "resumed"
	}
	first, err := sseEncode(kind, start.After.Epoch, startToProto(caller, start, s))
	if err != nil {
		writeError(w, err)
		return
	}
	if write(first) != nil {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(r.Context(), sseKeepalive)
		e, err := sub.Next(ctx)
		cancel()
		switch {
		case err == nil:
			var frame any
			if caller.All {
				// Every such subscriber sees the same frame: encode it once.
				frame = e.Memo(sseFrame{}, func(e events.Event) any { return sseFrameOf(e, s) })
			} else if e, ok := scopeEvent(caller, e); ok {
				frame = sseFrameOf(e, s)
			} else {
				continue // nothing of it is the caller's
			}
			b, ok := frame.([]byte)
			if !ok || write(b) != nil {
				return
			}
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			if write([]byte(": keepalive\n\n")) != nil {
				return
			}
		case errors.Is(err, events.ErrSlow):
			_ = write(fmt.Appendf(nil, "event: error\ndata: {\"code\":\"ResourceExhausted\",\"message\":%q}\n\n",
				err.Error()+"; reconnect after the last event received (or for a fresh snapshot)"))
			return
		default:
			return
		}
	}
}

// sseFrom is the position an event-stream request asks to resume from:
// the Last-Event-ID header, else the after query parameter (for clients
// that cannot set headers; a browser's own reconnect sends the header with
// the newer position), else none.
func sseFrom(r *http.Request) (events.Position, error) {
	field, v := "Last-Event-ID", r.Header.Get("Last-Event-ID")
	if v == "" {
		field, v = "after", r.URL.Query().Get("after")
	}
	if v == "" {
		return events.Position{}, nil
	}
	p, err := events.ParsePosition(v)
	if err != nil {
		return events.Position{}, status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	return p, nil
}

// sseFrameOf is the SSE frame of e, or the error encoding it.
func sseFrameOf(e events.Event, s *Server) any {
	b, err := sseEncode(string(e.Kind), s.bus.Epoch(), eventToProto(e, s))
	if err != nil {
		return err
	}
	return b
}

// sseEncode is one SSE frame of a cluster event of the given epoch.
func sseEncode(kind string, epoch events.Epoch, e *aionv1.ClusterEvent) ([]byte, error) {
	b, err := jsonOut.Marshal(e)
	if err != nil {
		return nil, err
	}
	id := events.Position{Epoch: epoch, Seq: e.GetSequence()}
	return fmt.Appendf(nil, "id: %s\nevent: %s\ndata: %s\n\n", id, kind, b), nil
}
