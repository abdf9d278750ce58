package auth

import "strings"

// access says who may call one method: nobody needs a credential for
// public methods; others need a role.
type access struct {
	public bool
	role   Role
}

// methods maps every gRPC method to the role it needs. A method missing
// here needs admin, so a new RPC is closed until it is listed.
var methods = map[string]access{
	"/aion.v1.WorkerService/Connect":         {role: RoleWorker},
	"/aion.v1.ActivityService/Schedule":      {role: RoleClient},
	"/aion.v1.ActivityService/ScheduleBatch": {role: RoleClient},
	"/aion.v1.ActivityService/Get":           {role: RoleClient},
	"/aion.v1.ActivityService/Wait":          {role: RoleClient},
	"/aion.v1.ActivityService/Cancel":        {role: RoleClient},
	"/aion.v1.ActivityService/List":          {role: RoleClient},
	"/aion.v1.ActivityService/Intervene":     {role: RoleClient},
	"/aion.v1.NamespaceService/Get":          {role: RoleClient},
	"/aion.v1.NamespaceService/List":         {role: RoleClient},
	"/aion.v1.NamespaceService/Create":       {role: RoleAdmin},
	"/aion.v1.NamespaceService/SetPlacement": {role: RoleAdmin},
	"/aion.v1.ClusterService/ListWorkers":    {role: RoleAdmin},
	"/aion.v1.ClusterService/DrainWorker":    {role: RoleAdmin},
	"/aion.v1.ClusterService/Watch":          {role: RoleAdmin},
	"/grpc.health.v1.Health/Check":           {public: true},
	"/grpc.health.v1.Health/Watch":           {public: true},
	"/grpc.health.v1.Health/List":            {public: true},
}

// Required returns the role a gRPC method needs, and whether it is public.
func Required(fullMethod string) (role Role, public bool) {
	if a, ok := methods[fullMethod]; ok {
		return a.role, a.public
	}
	if strings.HasPrefix(fullMethod, "/grpc.reflection.") {
		return "", true // the schema is public; it carries no data
	}
	return RoleAdmin, false
}
