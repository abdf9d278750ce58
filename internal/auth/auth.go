// Package auth authenticates callers and decides which RPCs their roles
// allow. A caller presents a bearer token; the authenticator turns it into an
// Identity (a name, the namespaces it is granted, its roles and when the
// credential expires). Static API keys are stored only as SHA-256 hashes;
// JWTs are checked with HS256 or RS256 keys.
package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/namespace"
)

// MaxTokenBytes bounds a bearer token. Every Authenticator refuses a longer
// one before decoding or hashing any of it, so an oversized credential costs
// the server no more than its length check. 16 KiB holds an RS256 JWT
// signed with a 4096-bit key (683 bytes of signature) whose claims list
// about 300 namespaces of 32 bytes (or 80 of the longest allowed, 128
// bytes) besides the usual IdP claims; tokens larger than that do not
// pass common proxies either (nginx refuses header lines over 8 KiB by
// default). Callers that need more namespaces use the "*" grant.
const MaxTokenBytes = 16 << 10

// checkSize refuses a token longer than MaxTokenBytes.
func checkSize(token string) error {
	if len(token) > MaxTokenBytes {
		return fmt.Errorf("bearer token of %d bytes is over the %d-byte limit: %w", len(token), MaxTokenBytes, ErrUnauthenticated)
	}
	return nil
}

// ErrUnauthenticated is wrapped by every refusal of a credential: none, or
// one that is not valid.
var ErrUnauthenticated = errors.New("unauthenticated")

// Role is what a caller may do.
type Role string

// The roles.
const (
	// RoleWorker may connect a worker stream.
	RoleWorker Role = "worker"
	// RoleClient may schedule, read, wait for, cancel and intervene in
	// activities, and read namespaces.
	RoleClient Role = "client"
	// RoleReader may only read: get, list and wait for activities, read
	// namespaces and list the workers of its namespaces. With the "*"
	// namespace grant it may also watch the cluster and read /metrics, which
	// show every namespace. It changes nothing.
	RoleReader Role = "reader"
	// RoleAdmin may do everything, including creating namespaces, changing
	// placement, listing and draining workers and watching the cluster.
	RoleAdmin Role = "admin"
)

// ParseRole reads a role name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleWorker, RoleClient, RoleReader, RoleAdmin:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want worker, client, reader or admin", s)
}

// Identity is an authenticated caller.
type Identity struct {
	Name string
	// Namespaces granted; AllNamespaces grants every one.
	Namespaces    []string
	AllNamespaces bool
	Roles         []Role
	// Expires is when the credential stops being valid; zero means never.
	Expires time.Time
}

// Has reports whether the identity holds role r (admin holds every role).
func (id Identity) Has(r Role) bool {
	return slices.Contains(id.Roles, r) || slices.Contains(id.Roles, RoleAdmin)
}

// Caller is the identity as the namespace plane sees it.
func (id Identity) Caller() namespace.Identity {
	if id.AllNamespaces {
		return namespace.Anyone(id.Name)
	}
	return namespace.NewIdentity(id.Name, id.Namespaces...)
}

// Authenticator turns a bearer token into an identity. Every implementation
// refuses a token over MaxTokenBytes before reading it.
type Authenticator interface {
	Authenticate(token string, now time.Time) (Identity, error)
}

// Anonymous is the authenticator of a server with authentication off: every
// caller is an admin granted every namespace. A token is not needed, but
// one over MaxTokenBytes is still refused, as by every authenticator.
type Anonymous struct{}

// Authenticate implements Authenticator.
func (Anonymous) Authenticate(token string, _ time.Time) (Identity, error) {
	if err := checkSize(token); err != nil {
		return Identity{}, err
	}
	return Identity{Name: "anonymous", AllNamespaces: true, Roles: []Role{RoleAdmin}}, nil
}

// APIKey is one configured key: the SHA-256 of the secret and who it is.
type APIKey struct {
	Name string
	// SHA256 is the hex SHA-256 of the secret; the secret itself is never stored.
	SHA256     string
	Namespaces []string // "*" grants every namespace
	Roles      []Role
}

// Keys authenticates static API keys.
type Keys struct {
	byHash map[[32]byte]Identity
}

// HashSecret returns the hex SHA-256 of a secret, the form keys are stored in.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewKeys checks and indexes the configured keys.
func NewKeys(keys []APIKey) (*Keys, error) {
	k := &Keys{byHash: make(map[[32]byte]Identity, len(keys))}
	for i, key := range keys {
		if key.Name == "" {
			return nil, fmt.Errorf("tokens[%d].name: must not be empty", i)
		}
		raw, err := hex.DecodeString(key.SHA256)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("tokens[%d] (%s).sha256: want 64 hex digits (aion token hash prints it)", i, key.Name)
		}
		if len(key.Roles) == 0 {
			return nil, fmt.Errorf("tokens[%d] (%s).roles: at least one of worker, client, reader, admin", i, key.Name)
		}
		if len(key.Namespaces) == 0 {
			return nil, fmt.Errorf("tokens[%d] (%s).namespaces: at least one, or \"*\"", i, key.Name)
		}
		var h [32]byte
		copy(h[:], raw)
		if _, dup := k.byHash[h]; dup {
			return nil, fmt.Errorf("tokens[%d] (%s): the same secret is configured twice", i, key.Name)
		}
		id := Identity{Name: key.Name, Roles: slices.Clone(key.Roles)}
		for _, ns := range key.Namespaces {
			if ns == "*" {
				id.AllNamespaces = true
				continue
			}
			id.Namespaces = append(id.Namespaces, ns)
		}
		k.byHash[h] = id
	}
	return k, nil
}

// Authenticate implements Authenticator.
func (k *Keys) Authenticate(token string, _ time.Time) (Identity, error) {
	if token == "" {
		return Identity{}, fmt.Errorf("no bearer token: %w", ErrUnauthenticated)
	}
	if err := checkSize(token); err != nil {
		return Identity{}, err
	}
	// The lookup is on a hash of the secret, so its timing tells an
	// attacker nothing about any configured secret.
	id, ok := k.byHash[sha256.Sum256([]byte(token))]
	if !ok {
		return Identity{}, fmt.Errorf("unknown API key: %w", ErrUnauthenticated)
	}
	return id, nil
}

// BearerToken extracts the token from an "authorization: Bearer <token>" value.
func BearerToken(header string) string {
	const prefix = "bearer "
	if len(header) > len(prefix) && strings.EqualFold(header[:len(prefix)], prefix) {
		return strings.TrimSpace(header[len(prefix):])
	}
	return ""
}
