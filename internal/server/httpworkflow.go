package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// routeWorkflowAPI routes the workflow part of the JSON API, which mirrors
// WorkflowService as the activity routes mirror ActivityService. The path
// names the run's namespace and workflow id (escape a '/' in either as
// %2F); a body that names others is refused, and so is a run_id in the body
// that differs from the ?run_id= of the query.
func (s *Server) routeWorkflowAPI(mux *http.ServeMux) {
	wfs := &workflowService{s: s}

	mux.HandleFunc("GET /api/v1/workflows", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			q := r.URL.Query()
			req := &aionv1.ListWorkflowsRequest{Namespace: q.Get("namespace"), WorkflowType: q.Get("type"), PageToken: q.Get("page_token")}
			if v := q.Get("status"); v != "" {
				st, err := runStatusParam(v)
				if err != nil {
					return nil, err
				}
				req.Status = st
			}
			n, err := pageSizeParam(q.Get("page_size"))
			if err != nil {
				return nil, err
			}
			req.PageSize = n
			return wfs.List(ctx, req)
		})
	})
	mux.HandleFunc("POST /api/v1/workflows", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.StartWorkflowRequest
		respondBody(w, r, &req, func(ctx context.Context) (proto.Message, error) { return wfs.Start(ctx, &req) })
	})
	mux.HandleFunc("GET /api/v1/workflows/{namespace}/{workflow_id}", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return wfs.Get(ctx, &aionv1.GetWorkflowRequest{Namespace: r.PathValue("namespace"), WorkflowId: r.PathValue("workflow_id"),
				RunId: r.URL.Query().Get("run_id")})
		})
	})
	mux.HandleFunc("GET /api/v1/workflows/{namespace}/{workflow_id}/why", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return wfs.Why(ctx, &aionv1.WhyWorkflowRequest{Namespace: r.PathValue("namespace"), WorkflowId: r.PathValue("workflow_id"),
				RunId: r.URL.Query().Get("run_id")})
		})
	})
	mux.HandleFunc("GET /api/v1/workflows/{namespace}/{workflow_id}/history", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			q := r.URL.Query()
			n, err := pageSizeParam(q.Get("page_size"))
			if err != nil {
				return nil, err
			}
			return wfs.History(ctx, &aionv1.GetHistoryRequest{Namespace: r.PathValue("namespace"), WorkflowId: r.PathValue("workflow_id"),
				RunId: q.Get("run_id"), PageSize: n, PageToken: q.Get("page_token")})
		})
	})
	mux.HandleFunc("POST /api/v1/workflows/{namespace}/{workflow_id}/signal", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.SignalWorkflowRequest
		respondRunBody(w, r, &req, false, &req.Namespace, &req.WorkflowId, &req.RunId,
			func(ctx context.Context) (proto.Message, error) { return wfs.Signal(ctx, &req) })
	})
	mux.HandleFunc("POST /api/v1/workflows/{namespace}/{workflow_id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.CancelWorkflowRequest
		respondRunBody(w, r, &req, true, &req.Namespace, &req.WorkflowId, &req.RunId,
			func(ctx context.Context) (proto.Message, error) { return wfs.Cancel(ctx, &req) })
	})
	mux.HandleFunc("POST /api/v1/workflows/{namespace}/{workflow_id}/terminate", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.TerminateWorkflowRequest
		respondRunBody(w, r, &req, true, &req.Namespace, &req.WorkflowId, &req.RunId,
			func(ctx context.Context) (proto.Message, error) { return wfs.Terminate(ctx, &req) })
	})
}

// respondRunBody decodes the JSON body into req (an empty body is {} when
// emptyOK), pins the run the path and query name on its namespace,
// workflow id and run id fields, then calls.
func respondRunBody(w http.ResponseWriter, r *http.Request, req proto.Message, emptyOK bool, ns, wf, run *string,
	call func(context.Context) (proto.Message, error)) {
	if err := decodeBody(r, req, emptyOK); err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	for _, err := range []error{
		pin("namespace", "path", r.PathValue("namespace"), ns),
		pin("workflow_id", "path", r.PathValue("workflow_id"), wf),
		pinOptional("run_id", "query", q.Get("run_id"), run),
	} {
		if err != nil {
			writeError(w, err)
			return
		}
	}
	respond(w, r, call)
}

// pin sets *field to want, refusing a body that named another value.
func pin(name, where, want string, field *string) error {
	if *field != "" && *field != want {
		return status.Errorf(codes.InvalidArgument, "%s: %q in the body differs from %q in the %s", name, *field, want, where)
	}
	*field = want
	return nil
}

// pinOptional is pin for a value the request may leave out.
func pinOptional(name, where, want string, field *string) error {
	if want == "" {
		return nil
	}
	return pin(name, where, want, field)
}

// runStatusParam reads the status filter: the enum name the JSON API
// answers with (RUN_STATUS_COMPLETED) or its short form (completed), in any
// case.
func runStatusParam(v string) (aionv1.RunStatus, error) {
	name := strings.ToUpper(v)
	if !strings.HasPrefix(name, "RUN_STATUS_") {
		name = "RUN_STATUS_" + name
	}
	st, ok := aionv1.RunStatus_value[name]
	if !ok || st == int32(aionv1.RunStatus_RUN_STATUS_UNSPECIFIED) {
		return 0, status.Errorf(codes.InvalidArgument,
			"status: %q is not a run status; want running, completed, failed, canceled, terminated or continued_as_new (or the enum name, RUN_STATUS_COMPLETED)", v)
	}
	return aionv1.RunStatus(st), nil
}

// pageSizeParam reads page_size; empty is 0, the server's default.
func pageSizeParam(v string) (int32, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return 0, status.Errorf(codes.InvalidArgument, "page_size: %q is not a number from 0 up", v)
	}
	return int32(n), nil
}
