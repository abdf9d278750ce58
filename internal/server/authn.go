package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/namespace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// newAuthenticator builds the authenticator cfg asks for.
func newAuthenticator(cfg AuthConfig) (auth.Authenticator, error) {
	switch cfg.Mode {
	case "", "none":
		return auth.Anonymous{}, nil
	case "token":
		if len(cfg.Keys) == 0 {
			return nil, errors.New("auth token: no API keys configured ([[tokens]] in the config file)")
		}
		return auth.NewKeys(cfg.Keys)
	case "jwt":
		switch {
		case cfg.JWTSecretFile != "" && cfg.JWKSFile != "":
			return nil, errors.New("auth jwt: set either a secret file (HS256) or a JWKS file (RS256), not both")
		case cfg.JWTSecretFile != "":
			secret, err := os.ReadFile(cfg.JWTSecretFile)
			if err != nil {
				return nil, fmt.Errorf("auth jwt: %w", err)
			}
			return auth.NewHS256([]byte(strings.TrimSpace(string(secret))))
		case cfg.JWKSFile != "":
			return auth.NewRS256FromJWKS(cfg.JWKSFile)
		}
		return nil, errors.New("auth jwt: needs a secret file (HS256) or a JWKS file (RS256)")
	}
	return nil, fmt.Errorf("auth %q: want none, token or jwt", cfg.Mode)
}

// checkExposure refuses to serve without authentication beyond loopback.
func checkExposure(cfg Config) error {
	if (cfg.Auth.Mode != "" && cfg.Auth.Mode != "none") || cfg.InsecureAllowNoAuth {
		return nil
	}
	for _, a := range []struct{ flag, addr string }{{"grpc-addr", cfg.GRPCAddr}, {"http-addr", cfg.HTTPAddr}} {
		if !loopback(a.addr) {
			return fmt.Errorf("--%s %s is not a loopback address and auth is none: anyone who can reach it could run "+
				"and read every tenant's work; configure auth (token or jwt) or pass --insecure-allow-no-auth", a.flag, a.addr)
		}
	}
	return nil
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

func (s *Server) admit(ctx context.Context, token string, need auth.Role, what string) (context.Context, error) {
	id, err := s.authn.Authenticate(token, time.Now())
	if err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "%s: %v", what, err)
	}
	if !id.Has(need) {
		return nil, status.Errorf(codes.PermissionDenied, "%s: %q has roles %v; the %s role is needed", what, id.Name, id.Roles, need)
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

// httpRoles maps JSON API routes to the gRPC method whose role they need.
func httpMethod(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/api/v1/events"):
		return "/aion.v1.ClusterService/Watch"
	case strings.HasPrefix(p, "/api/v1/workers"):
		return "/aion.v1.ClusterService/ListWorkers"
	case strings.HasPrefix(p, "/api/v1/namespaces"):
		if r.Method == http.MethodGet {
			return "/aion.v1.NamespaceService/List"
		}
		return "/aion.v1.NamespaceService/SetPlacement"
	case strings.HasPrefix(p, "/api/v1/activities"):
		return "/aion.v1.ActivityService/List"
	}
	return ""
}

// httpAuth authenticates JSON API requests like their gRPC counterparts.
func (s *Server) httpAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := httpMethod(r)
		if method == "" {
			next.ServeHTTP(w, r)
			return
		}
		need, _ := auth.Required(method)
		token := auth.BearerToken(r.Header.Get("Authorization"))
		if token == "" {
			token = r.URL.Query().Get("access_token") // EventSource cannot set headers
		}
		ctx, err := s.admit(r.Context(), token, need, r.Method+" "+r.URL.Path)
		if err != nil {
			writeError(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// loadTLS reads the certificate pair when configured.
func loadTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCert == "" && cfg.TLSKey == "" {
		return nil, nil
	}
	if cfg.TLSCert == "" || cfg.TLSKey == "" {
		return nil, errors.New("tls: set both --tls-cert and --tls-key")
	}
	pair, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}, nil
}
