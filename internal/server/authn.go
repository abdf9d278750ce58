package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/namespace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// newAuthenticator builds the authenticator cfg asks for, reading its key
// files; Config.Validate has checked the settings.
func newAuthenticator(cfg AuthConfig) (auth.Authenticator, error) {
	switch cfg.Mode {
	case "token":
		return auth.NewKeys(cfg.Keys)
	case "jwt":
		var j *auth.JWT
		var err error
		if cfg.JWTSecretFile != "" {
			secret, rerr := os.ReadFile(cfg.JWTSecretFile)
			if rerr != nil {
				return nil, fmt.Errorf("--jwt-secret-file: %w", rerr)
			}
			j, err = auth.NewHS256([]byte(strings.TrimSpace(string(secret))))
		} else {
			j, err = auth.NewRS256FromJWKS(cfg.JWKSFile)
		}
		if err != nil {
			return nil, err
		}
		j.Issuer, j.Audience = cfg.JWTIssuer, cfg.JWTAudience
		return j, nil
	}
	return auth.Anonymous{}, nil
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

type identityKey struct{}

// identityFrom returns the caller's identity put in ctx by the interceptors.
func identityFrom(ctx context.Context) (auth.Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(auth.Identity)
	return id, ok
}

// admit authenticates token and authorizes it for method; what names the
// call in errors.
func (s *Server) admit(ctx context.Context, token, method, what string) (context.Context, error) {
	id, err := s.authn.Authenticate(token, time.Now())
	if err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "%s: %v", what, err)
	}
	if err := auth.Authorize(id, method); err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "%s: %v", what, err)
	}
	return context.WithValue(ctx, identityKey{}, id), nil
}

// caller returns the namespace-plane identity of the authenticated caller.
func (s *Server) caller(ctx context.Context) namespace.Identity {
	if id, ok := identityFrom(ctx); ok {
		return id.Caller()
	}
	return namespace.Identity{Name: "unauthenticated"} // grants nothing
}

// eventsPath is the one route that may take its token from the query
// string: browsers' EventSource cannot set an Authorization header.
const eventsPath = "/api/v1/events"

// httpMethod maps an HTTP request to the gRPC method (or auth.MetricsMethod)
// whose authorization it needs; "" for routes open to anyone (health, the
// console's files). A route under /api/ that is not listed needs admin.
func httpMethod(r *http.Request) string {
	p, get := r.URL.Path, r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case p == "/metrics":
		return auth.MetricsMethod
	case p == eventsPath:
		return "/aion.v1.ClusterService/Watch"
	case p == "/api/v1/workers" && get:
		return "/aion.v1.ClusterService/ListWorkers"
	case strings.HasPrefix(p, "/api/v1/workers/") && !get:
		return "/aion.v1.ClusterService/DrainWorker"
	case p == "/api/v1/namespaces" && get:
		return "/aion.v1.NamespaceService/List"
	case p == "/api/v1/namespaces" && !get:
		return "/aion.v1.NamespaceService/Create"
	case strings.HasPrefix(p, "/api/v1/namespaces/") && get:
		return "/aion.v1.NamespaceService/Get"
	case strings.HasPrefix(p, "/api/v1/namespaces/") && strings.HasSuffix(p, "/retention") && !get:
		return "/aion.v1.NamespaceService/SetRetention"
	case strings.HasPrefix(p, "/api/v1/namespaces/") && !get:
		return "/aion.v1.NamespaceService/SetPlacement"
	case p == "/api/v1/waiting" && get:
		return "/aion.v1.ClusterService/ListWaiting"
	case p == "/api/v1/activities" && get:
		return "/aion.v1.ActivityService/List"
	case p == "/api/v1/activities" && !get:
		return "/aion.v1.ActivityService/Schedule"
	case strings.HasPrefix(p, "/api/v1/activities/") && get:
		if seg := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/api/v1/activities/"), "/"); len(seg) == 3 && seg[2] == "why" {
			return "/aion.v1.ActivityService/Why"
		}
		return "/aion.v1.ActivityService/Get"
	case strings.HasPrefix(p, "/api/v1/activities/") && !get:
		return "/aion.v1.ActivityService/Cancel"
	case p == "/api/v1/workflows" && get:
		return "/aion.v1.WorkflowService/List"
	case p == "/api/v1/workflows" && !get:
		return "/aion.v1.WorkflowService/Start"
	case strings.HasPrefix(p, "/api/v1/workflows/"):
		return workflowRoute(r, get)
	case p == "/api/v1/schedules" || strings.HasPrefix(p, "/api/v1/schedules/"):
		return scheduleRoute(r)
	case strings.HasPrefix(p, "/api/"):
		return unlistedRoute
	}
	return ""
}

// unlistedRoute is the method of a route not in the policy: admin only.
const unlistedRoute = "/aion.http/Unlisted"

// workflowRoute maps a route under /api/v1/workflows/{namespace}/
// {workflow_id}: the escaped path is split, so an id with an escaped '/' is
// one segment, as the router sees it.
func workflowRoute(r *http.Request, get bool) string {
	seg := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/api/v1/workflows/"), "/")
	switch {
	case len(seg) == 2 && get:
		return "/aion.v1.WorkflowService/Get"
	case len(seg) == 3 && get && seg[2] == "history":
		return "/aion.v1.WorkflowService/History"
	case len(seg) == 3 && get && seg[2] == "why":
		return "/aion.v1.WorkflowService/Why"
	case len(seg) == 3 && !get && seg[2] == "signal":
		return "/aion.v1.WorkflowService/Signal"
	case len(seg) == 3 && !get && seg[2] == "cancel":
		return "/aion.v1.WorkflowService/Cancel"
	case len(seg) == 3 && !get && seg[2] == "terminate":
		return "/aion.v1.WorkflowService/Terminate"
	}
	return unlistedRoute
}

// scheduleRoute maps a route under /api/v1/schedules to its method.
func scheduleRoute(r *http.Request) string {
	rest := strings.TrimPrefix(strings.TrimPrefix(r.URL.EscapedPath(), "/api/v1/schedules"), "/")
	var seg []string
	if rest != "" {
		seg = strings.Split(rest, "/")
	}
	m := r.Method
	switch {
	case len(seg) == 0 && m == http.MethodGet:
		return "/aion.v1.ScheduleService/List"
	case len(seg) == 0 && m == http.MethodPost:
		return "/aion.v1.ScheduleService/Create"
	case len(seg) == 2 && m == http.MethodGet:
		return "/aion.v1.ScheduleService/Get"
	case len(seg) == 2 && m == http.MethodPut:
		return "/aion.v1.ScheduleService/Update"
	case len(seg) == 2 && m == http.MethodDelete:
		return "/aion.v1.ScheduleService/Delete"
	case len(seg) == 3 && m == http.MethodPost:
		switch seg[2] {
		case "pause":
			return "/aion.v1.ScheduleService/Pause"
		case "resume":
			return "/aion.v1.ScheduleService/Resume"
		case "trigger":
			return "/aion.v1.ScheduleService/Trigger"
		case "backfill":
			return "/aion.v1.ScheduleService/Backfill"
		}
	}
	return unlistedRoute
}

// httpAuth authenticates JSON API and /metrics requests like their gRPC
// counterparts. The token comes from the Authorization header; only the
// event stream also takes ?access_token=, because a token in a URL ends up
// in proxy logs and browser history, and a state-changing request must not
// be triggered by a link.
func (s *Server) httpAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := httpMethod(r)
		if method == "" {
			next.ServeHTTP(w, r)
			return
		}
		what := r.Method + " " + r.URL.Path
		token := auth.BearerToken(r.Header.Get("Authorization"))
		if r.URL.Query().Has("access_token") {
			if r.URL.Path != eventsPath || r.Method != http.MethodGet {
				writeError(w, status.Errorf(codes.Unauthenticated, "%s: access_token in the query string is accepted only by GET %s; "+
					"send the token in an Authorization: Bearer header", what, eventsPath))
				return
			}
			if token == "" {
				token = r.URL.Query().Get("access_token")
			}
		}
		ctx, err := s.admit(r.Context(), token, method, what)
		if err != nil {
			writeError(w, err)
			return
		}
		if r.Body == nil || r.Body == http.NoBody || !s.receiveRate.limited() {
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		// A request with a body counts against its caller's receive rate
		// like a gRPC call: refused before the body is read while the
		// caller owes too much, charged with what was read.
		id, _ := identityFrom(ctx)
		if err := s.receiveRate.admit(id.Name); err != nil {
			writeError(w, err)
			return
		}
		body := &countingBody{ReadCloser: r.Body}
		r = r.WithContext(ctx)
		r.Body = body
		next.ServeHTTP(w, r)
		s.receiveRate.charge(id.Name, int(body.n.Load()))
	})
}

// countingBody counts the bytes read from a request body.
type countingBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// loadTLS reads the certificate pair when configured.
func loadTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCert == "" && cfg.TLSKey == "" {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}, nil
}
