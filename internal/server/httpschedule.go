package server

import (
	"context"
	"net/http"
	"strconv"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// routeScheduleAPI routes the schedule part of the JSON API, mirroring
// ScheduleService. The path names the schedule's namespace and id; a body
// that names others is refused.
func (s *Server) routeScheduleAPI(mux *http.ServeMux) {
	ss := &scheduleService{s: s}

	mux.HandleFunc("GET /api/v1/schedules", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			q := r.URL.Query()
			n, err := pageSizeParam(q.Get("page_size"))
			if err != nil {
				return nil, err
			}
			return ss.List(ctx, &aionv1.ListSchedulesRequest{Namespace: q.Get("namespace"), PageSize: n, PageToken: q.Get("page_token")})
		})
	})
	mux.HandleFunc("POST /api/v1/schedules", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.CreateScheduleRequest
		respondBody(w, r, &req, func(ctx context.Context) (proto.Message, error) { return ss.Create(ctx, &req) })
	})
	mux.HandleFunc("GET /api/v1/schedules/{namespace}/{schedule_id}", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			var upcoming int32
			if v := r.URL.Query().Get("upcoming"); v != "" {
				n, err := strconv.ParseInt(v, 10, 32)
				if err != nil || n < 0 {
					return nil, status.Errorf(codes.InvalidArgument, "upcoming: %q is not a number from 0 up", v)
				}
				upcoming = int32(n)
			}
			return ss.Get(ctx, &aionv1.GetScheduleRequest{Namespace: r.PathValue("namespace"), ScheduleId: r.PathValue("schedule_id"),
				Upcoming: upcoming})
		})
	})
	mux.HandleFunc("PUT /api/v1/schedules/{namespace}/{schedule_id}", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.UpdateScheduleRequest
		respondScheduleBody(w, r, &req, false, &req.Namespace, &req.ScheduleId,
			func(ctx context.Context) (proto.Message, error) { return ss.Update(ctx, &req) })
	})
	mux.HandleFunc("DELETE /api/v1/schedules/{namespace}/{schedule_id}", func(w http.ResponseWriter, r *http.Request) {
		respond(w, r, func(ctx context.Context) (proto.Message, error) {
			return ss.Delete(ctx, &aionv1.DeleteScheduleRequest{Namespace: r.PathValue("namespace"), ScheduleId: r.PathValue("schedule_id")})
		})
	})
	mux.HandleFunc("POST /api/v1/schedules/{namespace}/{schedule_id}/pause", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.PauseScheduleRequest
		respondScheduleBody(w, r, &req, true, &req.Namespace, &req.ScheduleId,
			func(ctx context.Context) (proto.Message, error) { return ss.Pause(ctx, &req) })
	})
	mux.HandleFunc("POST /api/v1/schedules/{namespace}/{schedule_id}/resume", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.ResumeScheduleRequest
		respondScheduleBody(w, r, &req, true, &req.Namespace, &req.ScheduleId,
			func(ctx context.Context) (proto.Message, error) { return ss.Resume(ctx, &req) })
	})
	mux.HandleFunc("POST /api/v1/schedules/{namespace}/{schedule_id}/trigger", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.TriggerScheduleRequest
		respondScheduleBody(w, r, &req, true, &req.Namespace, &req.ScheduleId,
			func(ctx context.Context) (proto.Message, error) { return ss.Trigger(ctx, &req) })
	})
	mux.HandleFunc("POST /api/v1/schedules/{namespace}/{schedule_id}/backfill", func(w http.ResponseWriter, r *http.Request) {
		var req aionv1.BackfillScheduleRequest
		respondScheduleBody(w, r, &req, false, &req.Namespace, &req.ScheduleId,
			func(ctx context.Context) (proto.Message, error) { return ss.Backfill(ctx, &req) })
	})
}

// respondScheduleBody decodes the JSON body into req (an empty body is {}
// when emptyOK), pins the schedule the path names on its namespace and id
// fields, then calls.
func respondScheduleBody(w http.ResponseWriter, r *http.Request, req proto.Message, emptyOK bool, ns, id *string,
	call func(context.Context) (proto.Message, error)) {
	if err := decodeBody(r, req, emptyOK); err != nil {
		writeError(w, err)
		return
	}
	for _, err := range []error{
		pin("namespace", "path", r.PathValue("namespace"), ns),
		pin("schedule_id", "path", r.PathValue("schedule_id"), id),
	} {
		if err != nil {
			writeError(w, err)
			return
		}
	}
	respond(w, r, call)
}
