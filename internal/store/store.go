// Package store defines what aion keeps durably and the contract every storage
// backend must honour. Backends live in sub-packages: sqlite (one file, one
// server) and postgres (shared by the servers of a cluster, see Cluster);
// storetest holds the conformance suites they must pass.
//
// A backend translates its database's errors into the sentinels below (and
// ErrLeaseLost, ErrNameTaken for Cluster), so no caller imports a driver.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrNotFound reports that the named record does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnavailable reports that the database could not be reached or the
// connection to it broke: the call was not acknowledged (a write cut off
// mid-commit may still have applied), and trying it again later may succeed.
var ErrUnavailable = errors.New("store unavailable")

// Origin records how a namespace came to exist.
type Origin string

// The ways a namespace is minted.
const (
	// OriginWorker: minted by the first authorized worker registration.
	OriginWorker Origin = "worker"
	// OriginSchedule: minted by the first authorized activity schedule.
	OriginSchedule Origin = "schedule"
	// OriginExplicit: created by an explicit create call.
	OriginExplicit Origin = "explicit"
)

// Valid reports whether o is one of the known origins.
func (o Origin) Valid() bool {
	switch o {
	case OriginWorker, OriginSchedule, OriginExplicit:
		return true
	}
	return false
}

// PlacementMode is the kind of node placement a namespace asks for.
type PlacementMode string

// The placement modes.
const (
	// Unplaced: work may run on any node.
	Unplaced PlacementMode = "unplaced"
	// Prefer: workers on the listed nodes first, then any.
	Prefer PlacementMode = "prefer"
	// Pinned: only workers on the listed nodes, ever.
	Pinned PlacementMode = "pinned"
)

// Placement is a namespace's node placement policy.
type Placement struct {
	Mode  PlacementMode
	Nodes []string // sorted, without duplicates; empty for Unplaced
}

// Normalize returns p with its nodes sorted and deduplicated and an empty mode
// read as Unplaced.
func (p Placement) Normalize() Placement {
	if p.Mode == "" {
		p.Mode = Unplaced
	}
	nodes := slices.Clone(p.Nodes)
	slices.Sort(nodes)
	p.Nodes = slices.Compact(nodes)
	if len(p.Nodes) == 0 {
		p.Nodes = nil
	}
	return p
}

// Validate reports a placement that cannot be applied: an unknown mode, nodes
// on Unplaced, no nodes on Prefer or Pinned, or an empty node name.
func (p Placement) Validate() error {
	switch p.Mode {
	case Unplaced, "":
		if len(p.Nodes) > 0 {
			return fmt.Errorf("placement %q takes no nodes, got %q", Unplaced, p.Nodes)
		}
	case Prefer, Pinned:
		if len(p.Nodes) == 0 {
			return fmt.Errorf("placement %q needs at least one node", p.Mode)
		}
		for _, n := range p.Nodes {
			if n == "" {
				return fmt.Errorf("placement %q: node name must not be empty", p.Mode)
			}
		}
	default:
		return fmt.Errorf("placement mode %q is not one of unplaced, prefer, pinned", p.Mode)
	}
	return nil
}

// Allows reports whether a worker on node may serve a namespace with this
// placement at registration: only Pinned refuses, and only nodes outside its list.
func (p Placement) Allows(node string) bool {
	if p.Mode != Pinned {
		return true
	}
	return node != "" && slices.Contains(p.Nodes, node)
}

// String renders the placement as unplaced, prefer{a,b} or pinned{a}.
func (p Placement) String() string {
	p = p.Normalize()
	if p.Mode == Unplaced {
		return string(Unplaced)
	}
	s := string(p.Mode) + "{"
	for i, n := range p.Nodes {
		if i > 0 {
			s += ","
		}
		s += n
	}
	return s + "}"
}

// Namespace is the durable record of one namespace.
type Namespace struct {
	Name      string
	Origin    Origin
	Placement Placement
	CreatedAt time.Time
	// LastSeenAt is the last time the namespace was registered again (minted
	// or re-used by a worker, a schedule or an explicit create).
	LastSeenAt time.Time
	// Retention is how long closed work is kept; zero means
	// DefaultRetention (see Retention.Effective).
	Retention Retention
}

// NamespaceStore keeps namespace records. All methods are safe for concurrent use.
type NamespaceStore interface {
	// RegisterNamespace records name with origin if it does not exist yet and
	// refreshes its last-seen time if it does. created reports whether this
	// call made the record; of any number of concurrent first calls exactly
	// one sees created. An existing record keeps its first origin.
	RegisterNamespace(ctx context.Context, name string, origin Origin) (ns Namespace, created bool, err error)
	// GetNamespace returns the record for name, or an error wrapping ErrNotFound.
	GetNamespace(ctx context.Context, name string) (Namespace, error)
	// ListNamespaces returns every record ordered by name.
	ListNamespaces(ctx context.Context) ([]Namespace, error)
	// SetPlacement replaces the placement of an existing namespace and returns
	// the updated record; a missing namespace is an error wrapping ErrNotFound.
	SetPlacement(ctx context.Context, name string, p Placement) (Namespace, error)
	// SetRetention replaces the retention of an existing namespace (zero
	// for the default) and returns the updated record; a retention that
	// fails Validate is an error wrapping ErrBadRetention and a missing
	// namespace one wrapping ErrNotFound, and neither changes anything.
	SetRetention(ctx context.Context, name string, r Retention) (Namespace, error)
}

// Store is everything aion keeps durably. A backend implements all of it and
// passes storetest.Run.
type Store interface {
	NamespaceStore
	FlowStore
	ActivityStore
	WorkflowStore
	ScheduleStore
	ReapStore
	// Close releases the backend's resources; it is safe to call once.
	Close() error
}
