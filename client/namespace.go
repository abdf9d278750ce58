package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// Origin is how a namespace was first minted.
type Origin string

// The namespace origins.
const (
	OriginWorker   Origin = "worker"   // minted by a worker registration
	OriginSchedule Origin = "schedule" // minted by an activity schedule
	OriginExplicit Origin = "explicit" // created with CreateNamespace
)

// PlacementMode is the kind of placement policy.
type PlacementMode string

// The placement modes.
const (
	// PlacementUnplaced: any node.
	PlacementUnplaced PlacementMode = "unplaced"
	// PlacementPrefer: workers on the listed nodes first, then any worker.
	PlacementPrefer PlacementMode = "prefer"
	// PlacementPinned: only workers on the listed nodes, ever. Workers
	// elsewhere are refused registration and work waits rather than spill.
	PlacementPinned PlacementMode = "pinned"
)

// Placement is a namespace's policy for which nodes run its work.
type Placement struct {
	Mode  PlacementMode `json:"mode"`
	Nodes []string      `json:"nodes,omitempty"`
}

// Unplaced is the placement that lets any node run the namespace's work.
func Unplaced() Placement { return Placement{Mode: PlacementUnplaced} }

// Prefer prefers workers on the given nodes, then falls back to any worker.
func Prefer(nodes ...string) Placement { return Placement{Mode: PlacementPrefer, Nodes: nodes} }

// Pinned allows only workers on the given nodes.
func Pinned(nodes ...string) Placement { return Placement{Mode: PlacementPinned, Nodes: nodes} }

// String renders the placement as "unplaced", "prefer{a,b}" or "pinned{a}".
func (p Placement) String() string {
	if p.Mode == PlacementUnplaced || p.Mode == "" {
		return string(PlacementUnplaced)
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

func (p Placement) toProto() (*aionv1.Placement, error) {
	var mode aionv1.PlacementMode
	switch p.Mode {
	case PlacementUnplaced:
		mode = aionv1.PlacementMode_PLACEMENT_MODE_UNPLACED
	case PlacementPrefer:
		mode = aionv1.PlacementMode_PLACEMENT_MODE_PREFER
	case PlacementPinned:
		mode = aionv1.PlacementMode_PLACEMENT_MODE_PINNED
	default:
		return nil, fmt.Errorf("placement mode %q: want unplaced, prefer or pinned", string(p.Mode))
	}
	return &aionv1.Placement{Mode: mode, Nodes: p.Nodes}, nil
}

func placementFromProto(p *aionv1.Placement) Placement {
	switch p.GetMode() {
	case aionv1.PlacementMode_PLACEMENT_MODE_PREFER:
		return Placement{Mode: PlacementPrefer, Nodes: p.GetNodes()}
	case aionv1.PlacementMode_PLACEMENT_MODE_PINNED:
		return Placement{Mode: PlacementPinned, Nodes: p.GetNodes()}
	}
	return Unplaced()
}

func originFromProto(o aionv1.NamespaceOrigin) Origin {
	switch o {
	case aionv1.NamespaceOrigin_NAMESPACE_ORIGIN_WORKER:
		return OriginWorker
	case aionv1.NamespaceOrigin_NAMESPACE_ORIGIN_SCHEDULE:
		return OriginSchedule
	case aionv1.NamespaceOrigin_NAMESPACE_ORIGIN_EXPLICIT:
		return OriginExplicit
	}
	return ""
}

// Namespace is the isolation and authorization boundary.
type Namespace struct {
	Name      string
	Origin    Origin
	Placement Placement
	// CreatedTime is when it was minted; LastSeenTime when a registration or
	// a schedule last used it.
	CreatedTime  time.Time
	LastSeenTime time.Time
	// Retention is how long its closed activities and runs are kept after
	// they close (the server's default of 7 days unless set).
	Retention time.Duration
}

// MarshalJSON gives Namespace a stable snake_case JSON form.
func (n *Namespace) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name         string     `json:"name"`
		Origin       Origin     `json:"origin"`
		Placement    Placement  `json:"placement"`
		CreatedTime  *time.Time `json:"created_time,omitempty"`
		LastSeenTime *time.Time `json:"last_seen_time,omitempty"`
		Retention    string     `json:"retention,omitempty"`
	}{n.Name, n.Origin, n.Placement, timePtr(n.CreatedTime), timePtr(n.LastSeenTime), durationString(n.Retention)})
}

func namespaceFromProto(p *aionv1.Namespace) *Namespace {
	if p == nil {
		return nil
	}
	return &Namespace{
		Name:         p.GetName(),
		Origin:       originFromProto(p.GetOrigin()),
		Placement:    placementFromProto(p.GetPlacement()),
		CreatedTime:  timeFromProto(p.GetCreatedTime()),
		LastSeenTime: timeFromProto(p.GetLastSeenTime()),
		Retention:    durationFromProto(p.GetRetention()),
	}
}

// CreateNamespace mints a namespace explicitly. It is idempotent: created is
// false when the namespace already existed. It works whether the server's
// auto-create policy is open or closed.
func (c *Client) CreateNamespace(ctx context.Context, name string) (ns *Namespace, created bool, err error) {
	resp, err := c.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: name})
	if err != nil {
		return nil, false, rpcError(fmt.Sprintf("create namespace %q", name), err)
	}
	return namespaceFromProto(resp.GetNamespace()), resp.GetCreated(), nil
}

// GetNamespace returns a namespace; the error has code NotFound when it was
// never minted.
func (c *Client) GetNamespace(ctx context.Context, name string) (*Namespace, error) {
	resp, err := c.namespaces.Get(ctx, &aionv1.GetNamespaceRequest{Name: name})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("get namespace %q", name), err)
	}
	return namespaceFromProto(resp.GetNamespace()), nil
}

// ListNamespaces returns every namespace the caller may see, ordered by
// name, fetching as many pages as needed.
func (c *Client) ListNamespaces(ctx context.Context) ([]*Namespace, error) {
	var out []*Namespace
	token := ""
	for {
		resp, err := c.namespaces.List(ctx, &aionv1.ListNamespacesRequest{PageToken: token})
		if err != nil {
			return nil, rpcError("list namespaces", err)
		}
		for _, n := range resp.GetNamespaces() {
			out = append(out, namespaceFromProto(n))
		}
		next := resp.GetNextPageToken()
		if next == "" || next == token {
			return out, nil
		}
		token = next
	}
}

// SetPlacement replaces a namespace's placement and returns the namespace;
// the error has code NotFound when it was never minted.
func (c *Client) SetPlacement(ctx context.Context, name string, p Placement) (*Namespace, error) {
	pp, err := p.toProto()
	if err != nil {
		return nil, fmt.Errorf("aion client: set placement of %q: %w", name, err)
	}
	resp, err := c.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: name, Placement: pp})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("set placement of %q to %s", name, p), err)
	}
	return namespaceFromProto(resp.GetNamespace()), nil
}

// SetRetention sets how long a namespace keeps its closed activities and
// runs after they close (from 1 minute to 10 years; 0 restores the
// server's default of 7 days) and returns the namespace; the error has code
// NotFound when it was never minted and InvalidArgument for a retention out
// of range.
func (c *Client) SetRetention(ctx context.Context, name string, retention time.Duration) (*Namespace, error) {
	resp, err := c.namespaces.SetRetention(ctx, &aionv1.SetRetentionRequest{Name: name, Retention: durationToProto(retention)})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("set retention of %q to %v", name, retention), err)
	}
	return namespaceFromProto(resp.GetNamespace()), nil
}
