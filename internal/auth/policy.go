package auth

import (
	"fmt"
	"slices"
	"strings"
)

// MetricsMethod is the name the policy gives the HTTP /metrics endpoint,
// which is not a gRPC method but is authorized like one.
const MetricsMethod = "/aion.http/Metrics"

// access says who may call one method: nobody needs a credential for
// public methods; others need one of roles (admin may call everything).
// A method that shows every namespace (the cluster's event stream,
// metrics) needs, from a reader, the "*" namespace grant.
type access struct {
	public bool
	roles  []Role
	// readerNeedsAll: a reader must hold every namespace, because the
	// answer is not filtered to the caller's namespaces.
	readerNeedsAll bool
}

var (
	worker        = access{roles: []Role{RoleWorker}}
	client        = access{roles: []Role{RoleClient}}
	clientReader  = access{roles: []Role{RoleClient, RoleReader}}
	reader        = access{roles: []Role{RoleReader}}
	readerAll     = access{roles: []Role{RoleReader}, readerNeedsAll: true}
	adminOnly     = access{roles: []Role{RoleAdmin}}
	public        = access{public: true}
	unknownMethod = adminOnly
)

// methods maps every gRPC method (and MetricsMethod) to who may call it.
// A method missing here needs admin, so a new RPC is closed until it is
// listed.
var methods = map[string]access{
	"/aion.v1.WorkerService/Connect":         worker,
	"/aion.v1.ActivityService/Schedule":      client,
	"/aion.v1.ActivityService/ScheduleBatch": client,
	"/aion.v1.ActivityService/Get":           clientReader,
	"/aion.v1.ActivityService/Wait":          clientReader,
	"/aion.v1.ActivityService/Cancel":        client,
	"/aion.v1.ActivityService/List":          clientReader,
	"/aion.v1.ActivityService/Intervene":     client,
	"/aion.v1.ActivityService/Why":           clientReader,
	"/aion.v1.WorkflowService/Start":         client,
	"/aion.v1.WorkflowService/Get":           clientReader,
	"/aion.v1.WorkflowService/List":          clientReader,
	"/aion.v1.WorkflowService/Wait":          clientReader,
	"/aion.v1.WorkflowService/Signal":        client,
	"/aion.v1.WorkflowService/Query":         clientReader,
	"/aion.v1.WorkflowService/Cancel":        client,
	"/aion.v1.WorkflowService/Terminate":     client,
	"/aion.v1.WorkflowService/History":       clientReader,
	"/aion.v1.WorkflowService/Why":           clientReader,
	"/aion.v1.ScheduleService/Create":        client,
	"/aion.v1.ScheduleService/Get":           clientReader,
	"/aion.v1.ScheduleService/List":          clientReader,
	"/aion.v1.ScheduleService/Update":        client,
	"/aion.v1.ScheduleService/Pause":         client,
	"/aion.v1.ScheduleService/Resume":        client,
	"/aion.v1.ScheduleService/Trigger":       client,
	"/aion.v1.ScheduleService/Backfill":      client,
	"/aion.v1.ScheduleService/Delete":        client,
	"/aion.v1.NamespaceService/Get":          clientReader,
	"/aion.v1.NamespaceService/List":         clientReader,
	"/aion.v1.NamespaceService/Create":       adminOnly,
	"/aion.v1.NamespaceService/SetPlacement": adminOnly,
	"/aion.v1.NamespaceService/SetRetention": adminOnly,
	// Flow limits are namespace settings: admins set them, and whoever
	// may read the namespace may read them.
	"/aion.v1.NamespaceService/SetFlowLimit":   adminOnly,
	"/aion.v1.NamespaceService/ClearFlowLimit": adminOnly,
	"/aion.v1.NamespaceService/GetFlowLimit":   clientReader,
	"/aion.v1.NamespaceService/ListFlowLimits": clientReader,
	// ListWorkers answers only the workers serving a namespace of the
	// caller, so a reader of some namespaces sees just those.
	"/aion.v1.ClusterService/ListWorkers": reader,
	// A namespace's waiting work, as its activities are read.
	"/aion.v1.ClusterService/ListWaiting": clientReader,
	"/aion.v1.ClusterService/DrainWorker": adminOnly,
	"/aion.v1.ClusterService/Watch":       readerAll,
	MetricsMethod:                         readerAll,
	"/grpc.health.v1.Health/Check":        public,
	"/grpc.health.v1.Health/Watch":        public,
	"/grpc.health.v1.Health/List":         public,
}

func lookup(fullMethod string) access {
	if a, ok := methods[fullMethod]; ok {
		return a
	}
	if strings.HasPrefix(fullMethod, "/grpc.reflection.") {
		return public // the schema is public; it carries no data
	}
	return unknownMethod
}

// Public reports whether fullMethod may be called without a credential.
func Public(fullMethod string) bool {
	return lookup(fullMethod).public
}

// Authorize reports whether id may call fullMethod: nil when it may, else an
// error that names the caller, its roles and the roles that would be allowed.
func Authorize(id Identity, fullMethod string) error {
	a := lookup(fullMethod)
	if a.public || slices.Contains(id.Roles, RoleAdmin) {
		return nil
	}
	for _, r := range a.roles {
		if !slices.Contains(id.Roles, r) {
			continue
		}
		if r == RoleReader && a.readerNeedsAll && !id.AllNamespaces {
			continue
		}
		return nil
	}
	return fmt.Errorf("%q has roles %v; %s", id.Name, id.Roles, a.need())
}

// need says in words who may call a method.
func (a access) need() string {
	var names []string
	for _, r := range a.roles {
		if r == RoleReader && a.readerNeedsAll {
			names = append(names, `reader (with namespaces "*", as the answer covers every namespace)`)
			continue
		}
		names = append(names, string(r))
	}
	if !slices.Contains(a.roles, RoleAdmin) {
		names = append(names, string(RoleAdmin))
	}
	if len(names) == 1 {
		return "the " + names[0] + " role is needed"
	}
	return "one of the roles " + strings.Join(names, ", ") + " is needed"
}
