package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/protobuf/proto"
)

// Calls between servers travel as messages in the store: a request names
// its kind, a reply copies the request's call number. The server a call is
// for has already been authorized by the server that took the request.

// Message kinds between servers.
const (
	msgCancel    = "cancel"
	msgDrain     = "drain"
	msgIntervene = "intervene"
	msgReply     = "reply"
)

// callTimeout bounds how long a call waits for its reply.
const callTimeout = 10 * time.Second

// ErrBadReply reports a reply from another server that could not be read.
var ErrBadReply = errors.New("unreadable reply from another server")

// call sends a request to another server and waits for its reply.
func (m *Membership) call(ctx context.Context, to store.ServerID, kind string, body []byte) ([]byte, error) {
	id := m.nextCall.Add(1)
	ch := make(chan store.Message, 1)
	m.callsMu.Lock()
	m.calls[id] = ch
	m.callsMu.Unlock()
	defer func() {
		m.callsMu.Lock()
		delete(m.calls, id)
		m.callsMu.Unlock()
	}()
	if _, err := m.d.Store.SendMessage(ctx, store.Message{From: m.d.Self.ID, To: to, Kind: kind, Body: body, Call: id}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	select {
	case r := <-ch:
		if msg, ok := strings.CutPrefix(string(r.Body), "error:"); ok {
			return nil, errors.New(msg)
		}
		return r.Body, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("server %d did not answer %s: %w", to, kind, ctx.Err())
	}
}

// receive takes this server's messages and handles each.
func (m *Membership) receive(ctx context.Context) {
	msgs, err := m.d.Store.ReceiveMessages(ctx, m.d.Self.ID)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("receive messages", "err", err)
		}
		return
	}
	for _, msg := range msgs {
		if msg.Kind == msgReply {
			m.callsMu.Lock()
			ch := m.calls[msg.Call]
			m.callsMu.Unlock()
			if ch != nil {
				ch <- msg
			}
			continue
		}
		body, err := m.handle(msg)
		if msg.Call == 0 {
			continue
		}
		if err != nil {
			body = []byte("error:" + err.Error())
		}
		reply := store.Message{From: m.d.Self.ID, To: msg.From, Kind: msgReply, Body: body, Call: msg.Call}
		if _, err := m.d.Store.SendMessage(ctx, reply); err != nil && ctx.Err() == nil {
			m.log.Warn("reply to server", "server_id", msg.From, "err", err)
		}
	}
}

// handle serves one request from another server.
func (m *Membership) handle(msg store.Message) ([]byte, error) {
	switch msg.Kind {
	case msgCancel:
		f := strings.SplitN(string(msg.Body), "\t", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("malformed cancel request %q: want namespace, id and reason separated by tabs", msg.Body)
		}
		m.d.Engine.CancelOwned(f[0], f[1], f[2])
		return nil, nil
	case msgDrain:
		id, err := strconv.ParseUint(string(msg.Body), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed drain request %q", msg.Body)
		}
		if !m.d.Registry.Drain(registry.WorkerID(id)) {
			return nil, fmt.Errorf("worker %d is not connected", id)
		}
		info, _ := m.d.Registry.Lookup(registry.WorkerID(id))
		return json.Marshal(info)
	case msgIntervene:
		var r aionv1.InterveneRequest
		if err := proto.Unmarshal(msg.Body, &r); err != nil {
			return nil, fmt.Errorf("malformed intervene request: %w", err)
		}
		out, err := m.d.Intervene(&r)
		if err != nil {
			return nil, err
		}
		return proto.Marshal(out)
	}
	return nil, fmt.Errorf("unknown request %q", msg.Kind)
}

// ForwardCancel asks the server running an activity to cancel it. It does
// not wait for the cancel: the request is also recorded on the activity, so
// a lost message only delays it to the owner's next poll.
func (m *Membership) ForwardCancel(ctx context.Context, owner store.ServerID, ns, id, reason string) {
	body := []byte(ns + "\t" + id + "\t" + reason)
	if _, err := m.d.Store.SendMessage(ctx, store.Message{From: m.d.Self.ID, To: owner, Kind: msgCancel, Body: body}); err != nil && ctx.Err() == nil {
		m.log.Warn("forward cancel", "server_id", owner, "namespace", ns, "activity", id, "err", err)
	}
}

// DrainWorker asks the server a worker is connected to to drain it, and
// returns the worker as that server describes it afterwards.
func (m *Membership) DrainWorker(ctx context.Context, server store.ServerID, id registry.WorkerID) (registry.WorkerInfo, error) {
	body, err := m.call(ctx, server, msgDrain, []byte(strconv.FormatUint(uint64(id), 10)))
	if err != nil {
		return registry.WorkerInfo{}, err
	}
	var info registry.WorkerInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return registry.WorkerInfo{}, fmt.Errorf("%w: %v", ErrBadReply, err)
	}
	return info, nil
}

// RunningElsewhere names the other server running an activity's attempt;
// 0 when none does (it is not running, or runs here).
func (m *Membership) RunningElsewhere(ctx context.Context, ns, id string) (store.ServerID, error) {
	owner, err := m.d.Store.GetActivityOwner(ctx, ns, id)
	if err != nil || owner == m.d.Self.ID {
		return 0, err
	}
	return owner, nil
}

// Intervene forwards an intervention to the server running the attempt and
// returns that server's answer.
func (m *Membership) Intervene(ctx context.Context, server store.ServerID, r *aionv1.InterveneRequest) (*aionv1.InterveneResponse, error) {
	body, err := proto.Marshal(r)
	if err != nil {
		return nil, err
	}
	reply, err := m.call(ctx, server, msgIntervene, body)
	if err != nil {
		return nil, err
	}
	out := &aionv1.InterveneResponse{}
	if err := proto.Unmarshal(reply, out); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadReply, err)
	}
	return out, nil
}
