package registry

// ring is a circular, intrusive list of the workers that can take work now.
// Its cursor is the next worker to hand out. Linking and unlinking are O(1)
// and a newcomer joins just behind the cursor, so a full pass of the cursor
// visits every member exactly once however members come and go: that is the
// round-robin guarantee, at no per-selection cost.
type ring struct {
	cursor *link
	// members counts the workers assigned to this ring, linked or not; the
	// ring is deleted when it reaches zero.
	members int
}

// link is one worker's place in one ring.
type link struct {
	w          *Worker
	ring       *ring
	prev, next *link
	linked     bool
	// kind is the kind of the triple the ring belongs to: a worker leaves
	// the rings of one kind when its slots of that kind fill.
	kind TaskKind
}

// next returns the worker under the cursor and moves the cursor on, or nil
// when no worker is linked.
func (r *ring) next() *Worker {
	l := r.cursor
	if l == nil {
		return nil
	}
	r.cursor = l.next
	return l.w
}

// insert links l just behind the cursor: last in the current rotation.
func (r *ring) insert(l *link) {
	if l.linked {
		return
	}
	l.linked = true
	if r.cursor == nil {
		l.prev, l.next = l, l
		r.cursor = l
		return
	}
	c := r.cursor
	l.next, l.prev = c, c.prev
	c.prev.next = l
	c.prev = l
}

// remove unlinks l, moving the cursor past it if it was next.
func (r *ring) remove(l *link) {
	if !l.linked {
		return
	}
	l.linked = false
	if l.next == l {
		r.cursor = nil
	} else {
		if r.cursor == l {
			r.cursor = l.next
		}
		l.prev.next = l.next
		l.next.prev = l.prev
	}
	l.prev, l.next = nil, nil
}
