package registry

// workflowKey names a workflow type inside a pool, whatever the build.
type workflowKey struct {
	pool PoolAddress
	typ  string
}

// buildOrder remembers when the server first saw each build id of one
// workflow type, so the newest build is the default for new runs.
type buildOrder struct {
	next  uint64
	first map[string]uint64
}

// maxBuilds bounds the build ids remembered per workflow type: beyond it,
// those no connected worker runs are forgotten.
const maxBuilds = 16

// noteBuildLocked records build as seen for k, keeping its first sighting.
func (r *Registry) noteBuildLocked(k workflowKey, build string) {
	o := r.builds[k]
	if o == nil {
		o = &buildOrder{first: make(map[string]uint64)}
		r.builds[k] = o
	}
	if _, ok := o.first[build]; ok {
		return
	}
	o.next++
	o.first[build] = o.next
	if len(o.first) > maxBuilds {
		for b := range o.first {
			if r.triples[NewWorkflowTriple(k.pool.Namespace, k.pool.TaskQueue, k.typ, b)] == nil {
				delete(o.first, b)
			}
		}
	}
}

// forgetBuildsLocked drops the order of k once no worker of any build of it
// is connected, so nothing keyed by caller names outlives its workers.
func (r *Registry) forgetBuildsLocked(k workflowKey) {
	o := r.builds[k]
	if o == nil {
		return
	}
	for b := range o.first {
		if r.triples[NewWorkflowTriple(k.pool.Namespace, k.pool.TaskQueue, k.typ, b)] != nil {
			return
		}
	}
	delete(r.builds, k)
}

// DefaultBuild returns the build new runs of workflowType in pool start on:
// of the builds a connected worker runs, the one the server saw first most
// recently. A build that joins later becomes the default; a worker of an
// older build reconnecting does not take it back while any worker of the
// type stayed connected. It reports false when no worker runs the type.
func (r *Registry) DefaultBuild(pool PoolAddress, workflowType string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.builds[workflowKey{pool, workflowType}]
	if o == nil {
		return "", false
	}
	var (
		best  string
		bestN uint64
	)
	for b, n := range o.first {
		if n > bestN && r.triples[NewWorkflowTriple(pool.Namespace, pool.TaskQueue, workflowType, b)] != nil {
			best, bestN = b, n
		}
	}
	return best, bestN > 0
}

// WorkflowCandidates describes the connected workers of pool that serve
// workflowType, whatever their build, each once.
func (r *Registry) WorkflowCandidates(pool PoolAddress, workflowType string) []WorkerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.builds[workflowKey{pool, workflowType}]
	if o == nil {
		return nil
	}
	seen := make(map[WorkerID]bool)
	var out []WorkerInfo
	for b := range o.first {
		tr := r.triples[NewWorkflowTriple(pool.Namespace, pool.TaskQueue, workflowType, b)]
		if tr == nil {
			continue
		}
		for _, w := range tr.members {
			if !seen[w.id] {
				seen[w.id] = true
				out = append(out, w.infoLocked())
			}
		}
	}
	return out
}
