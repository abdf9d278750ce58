// Package namespace is aion's namespace plane: who a caller is and which
// namespaces it may use (the guard), how unknown namespaces come to exist
// (the minter), and which nodes may serve a namespace (placement admission).
package namespace

import (
	"errors"
	"fmt"
	"slices"
)

// Errors callers branch on. Each returned error wraps one of these and names
// the namespace and caller involved.
var (
	// ErrPermissionDenied: the caller is not granted a namespace it asked for.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrInvalid: the request itself is malformed (an empty namespace set or name).
	ErrInvalid = errors.New("invalid argument")
	// ErrUnknown: the namespace does not exist and auto-create is closed.
	ErrUnknown = errors.New("unknown namespace")
	// ErrPlacement: a worker's node is outside a pinned namespace's nodes.
	ErrPlacement = errors.New("placement refused")
	// ErrLimit: minting or creating would pass a cap (see Limits).
	ErrLimit = errors.New("namespace limit reached")
)

// Identity is an authenticated caller: a name and the namespaces it is granted.
type Identity struct {
	// Name identifies the caller in logs and errors.
	Name string
	// All grants every namespace (an operator or an unauthenticated dev server).
	All bool
	// Namespaces are the granted namespaces when All is false.
	Namespaces []string
}

// NewIdentity returns a caller granted exactly the given namespaces.
func NewIdentity(name string, namespaces ...string) Identity {
	return Identity{Name: name, Namespaces: slices.Clone(namespaces)}
}

// Anyone returns a caller granted every namespace.
func Anyone(name string) Identity {
	return Identity{Name: name, All: true}
}

// Allows reports whether the caller is granted namespace ns. Names are
// compared exactly: a namespace is never normalized.
func (id Identity) Allows(ns string) bool {
	return id.All || slices.Contains(id.Namespaces, ns)
}

// AuthorizeWorker checks a worker registration's namespace set against the
// caller's grants. It returns the set sorted and deduplicated, or refuses the
// whole set when it is empty, longer than MaxWorkerNamespaces, holds an empty
// name, or holds any namespace the caller is not granted.
func AuthorizeWorker(id Identity, namespaces []string) ([]string, error) {
	if len(namespaces) == 0 {
		return nil, fmt.Errorf("authorize worker %q: namespaces: at least one is required: %w", id.Name, ErrInvalid)
	}
	if n := len(namespaces); n > MaxWorkerNamespaces {
		return nil, fmt.Errorf("authorize worker %q: namespaces: %d given, at most %d per worker: %w", id.Name, n, MaxWorkerNamespaces, ErrInvalid)
	}
	set := slices.Clone(namespaces)
	slices.Sort(set)
	set = slices.Compact(set)
	for _, ns := range set {
		if ns == "" {
			return nil, fmt.Errorf("authorize worker %q: namespaces: empty name: %w", id.Name, ErrInvalid)
		}
	}
	for _, ns := range set {
		if !id.Allows(ns) {
			return nil, fmt.Errorf("authorize worker %q: namespace %q: %w", id.Name, ns, ErrPermissionDenied)
		}
	}
	return set, nil
}

// Authorize checks that the caller may act in one namespace.
func Authorize(id Identity, ns string) error {
	if ns == "" {
		return fmt.Errorf("authorize %q: namespace: empty name: %w", id.Name, ErrInvalid)
	}
	if !id.Allows(ns) {
		return fmt.Errorf("authorize %q: namespace %q: %w", id.Name, ns, ErrPermissionDenied)
	}
	return nil
}
