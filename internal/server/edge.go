package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/limit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The gRPC edge admits a call before any of its body is read: the bearer
// token and the caller's receive rate are checked in the transport's tap,
// so a caller without a valid credential, or one sending too fast, never
// makes the server buffer or decode a message. Until a handler asks for its
// request, HTTP/2 flow control holds what a call may have sent to its
// stream window (64 KiB, and 1 MiB a connection); reading the request then
// takes room for a whole message (limit.Message) in the receive budget,
// waiting for it if need be, and gives it back once the request is in. So
// the budget bounds the memory all requests being read can hold, and a
// burst of calls waits its turn instead of being refused.

// anonymous is the budget account of calls to public methods (health and
// reflection) and of every caller when auth is off.
const anonymous = "(anonymous)"

// receiveBudget counts requests being read, each holding room for a whole
// message: at most total at once, at most perCaller of them for one
// caller, so one caller cannot take all of it. A read past either waits.
type receiveBudget struct {
	mu        sync.Mutex
	total     int
	perCaller int
	used      int
	byCaller  map[string]int
	freed     chan struct{} // closed and replaced whenever room is given back
}

// defaultReceiveMemory is the receive budget when none is configured: 32
// messages of the largest size being read at once.
const defaultReceiveMemory = 32 * limit.Message

// defaultReceiveRate is the receive rate of one caller when none is
// configured: far above what schedules of ordinary payloads need.
const defaultReceiveRate = 64 << 20

func newReceiveBudget(bytes int64) *receiveBudget {
	if bytes <= 0 {
		bytes = defaultReceiveMemory
	}
	total := max(int(bytes/limit.Message), 2)
	return &receiveBudget{total: total, perCaller: max(total/2, 1), byCaller: make(map[string]int), freed: make(chan struct{})}
}

// take reserves room for one message for caller, waiting until there is
// some or ctx ends; release gives it back and may be called more than once.
func (b *receiveBudget) take(ctx context.Context, caller string) (release func(), err error) {
	b.mu.Lock()
	for b.used >= b.total || b.byCaller[caller] >= b.perCaller {
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, status.FromContextError(fmt.Errorf("waiting for room to read the request (--max-receive-memory): %w", ctx.Err())).Err()
		}
		b.mu.Lock()
	}
	b.used++
	b.byCaller[caller]++
	b.mu.Unlock()
	var done atomic.Bool
	return func() {
		if !done.CompareAndSwap(false, true) {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		b.used--
		if b.byCaller[caller]--; b.byCaller[caller] == 0 {
			delete(b.byCaller, caller)
		}
		close(b.freed)
		b.freed = make(chan struct{})
	}, nil
}

// receiveRate bounds the request bytes each caller may send a second, as a
// debt that drains at rate: every request's size is added once it has
// arrived, and a call whose caller owes more than burst is refused from its
// headers, so its body is never read. Receiving and refusing megabytes costs
// the server CPU and disk even when nothing is kept; this is what keeps one
// tenant's flood of large requests from slowing everyone else's calls.
type receiveRate struct {
	rate, burst float64 // bytes; rate a second, 0: no limit
	now         func() time.Time

	mu   sync.Mutex
	owes map[string]debt
}

type debt struct {
	bytes float64
	at    time.Time
}

func newReceiveRate(bytesPerSecond int64, now func() time.Time) *receiveRate {
	burst := max(float64(bytesPerSecond), limit.Message) // a second's worth, at least one message
	return &receiveRate{rate: float64(bytesPerSecond), burst: burst, now: now, owes: make(map[string]debt)}
}

// drained is caller's debt now; the caller's entry goes once it is paid.
func (r *receiveRate) drained(caller string, now time.Time) float64 {
	d, ok := r.owes[caller]
	if !ok {
		return 0
	}
	left := d.bytes - now.Sub(d.at).Seconds()*r.rate
	if left <= 0 {
		delete(r.owes, caller)
		return 0
	}
	return left
}

// limited reports whether a rate applies at all.
func (r *receiveRate) limited() bool { return r.rate > 0 }

// admit refuses a call from caller while it owes more than the burst.
func (r *receiveRate) admit(caller string) error {
	if !r.limited() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	owed := r.drained(caller, r.now())
	if owed <= r.burst {
		return nil
	}
	wait := time.Duration((owed - r.burst) / r.rate * float64(time.Second))
	return status.Errorf(codes.ResourceExhausted,
		"%q is sending requests faster than %d bytes a second (--max-receive-rate); retry in %v",
		caller, int64(r.rate), wait.Round(time.Millisecond)+time.Millisecond)
}

// charge adds a request of n bytes that arrived from caller.
func (r *receiveRate) charge(caller string, n int) {
	if !r.limited() || n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.owes[caller] = debt{bytes: r.drained(caller, now) + float64(n), at: now}
}

// callerKey holds, in a call's context, the account its requests are read
// under; a call without one (a worker stream) reads its frames unmetered.
type callerKey struct{}

// refusedKey holds, in a call's context, why the tap refused it.
type refusedKey struct{}

// admitCall is the transport tap: it runs when a call's headers arrive,
// before its body is read, on the connection's reading goroutine, so it
// must not block.
//
// The decision itself runs aside (see asides) while the reading goroutine
// waits: deciding (authentication, authorization, the
// receive rate) calls deeper than the reading goroutine otherwise goes, and
// a goroutine's stack, once grown, shrinks only while it is at most a
// quarter used. The reading goroutine lives as long as its connection and,
// parked, uses about 1.4 KiB of stack: deciding on it would grow its stack
// from 4 to 8 KiB for good.
//
// It decides there, but a refusal is carried in the call's context and
// answered by the handler wrapper before the body is read (see refusal),
// not by failing the tap: grpc-go never ends the context of a call its tap
// refused, so that context and the timer of the caller's deadline
// (grpc-timeout, which may be years) would stay in memory until the
// deadline, a few hundred bytes per refused call. A call that returns from
// its handler ends its context at once.
func (s *Server) admitCall(ctx context.Context, info *tap.Info) (context.Context, error) {
	var (
		out context.Context
		err error
	)
	s.asides.run(func() { out, err = s.decideCall(ctx, info) })
	if err != nil {
		out = context.WithValue(ctx, refusedKey{}, err)
		s.refusedOpen.Add(1)
		context.AfterFunc(out, func() { s.refusedOpen.Add(-1) })
		return out, nil
	}
	return out, nil
}

// refusal is the error the tap decided for a call, or nil.
func refusal(ctx context.Context) error {
	err, _ := ctx.Value(refusedKey{}).(error)
	return err
}

// decideCall authenticates, authorizes and rate-checks a call from its
// headers.
func (s *Server) decideCall(ctx context.Context, info *tap.Info) (context.Context, error) {
	method := info.FullMethodName
	public := auth.Public(method)
	caller := anonymous
	if !public {
		token := ""
		if v := info.Header.Get("authorization"); len(v) > 0 {
			token = auth.BearerToken(v[0])
		}
		var err error
		if ctx, err = s.admit(ctx, token, method, method); err != nil {
			return nil, err
		}
		id, _ := identityFrom(ctx)
		caller = id.Name
	}
	clientStream, known := s.clientStreams[method]
	if !known {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	if clientStream && !public {
		return ctx, nil // a worker stream: one frame at a time, from an authenticated worker
	}
	if err := s.receiveRate.admit(caller); err != nil {
		return nil, err
	}
	return context.WithValue(ctx, callerKey{}, caller), nil
}

// read reads one request into m with next, holding room for a whole message
// in the receive budget while it does (waiting for room if need be), and
// charges its size to the caller's receive rate.
func (s *Server) read(ctx context.Context, m any, next func(any) error) error {
	caller, metered := ctx.Value(callerKey{}).(string)
	if !metered {
		return s.decoder.recv(m, next)
	}
	release, err := s.receiving.take(ctx, caller)
	if err != nil {
		return err
	}
	err = s.decoder.recv(m, next)
	release()
	if msg, ok := m.(proto.Message); ok && s.receiveRate.limited() {
		s.receiveRate.charge(caller, proto.Size(msg)) // sized only when a rate applies
	}
	return err
}

// decoder decodes requests like the standard protobuf codec, but a message
// of the aion API that does not decode is refused with InvalidArgument
// naming its field. grpc would end the call as Internal the moment its codec
// failed, so the codec reports success and leaves the failure here, keyed
// by the message, for the edge to return before any handler sees it.
type decoder struct {
	encoding.CodecV2
	failed sync.Map // message pointer → error
	asides *asides
}

func newDecoder(a *asides) *decoder {
	return &decoder{CodecV2: encoding.GetCodecV2("proto"), asides: a}
}

// Unmarshal decodes data into v. A worker's frame larger than a ping is
// decoded aside (see asides) while the caller waits: it is decoded on the
// stream's handler, whose stack, grown once, stays grown for the stream's
// life (see workerService).
func (d *decoder) Unmarshal(data mem.BufferSlice, v any) error {
	if _, ok := v.(*aionv1.WorkerMessage); ok && data.Len() > decodeAsideFrom {
		var err error
		d.asides.run(func() { err = d.unmarshal(data, v) })
		return err
	}
	return d.unmarshal(data, v)
}

// decodeAsideFrom is the size in bytes above which a worker's frame is
// decoded aside; a ping (with its nonce) is smaller.
const decodeAsideFrom = 32

func (d *decoder) unmarshal(data mem.BufferSlice, v any) error {
	err := d.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	desc := m.ProtoReflect().Descriptor()
	if !strings.HasPrefix(string(desc.FullName()), "aion.") {
		return err // health and reflection: grpc's own answer
	}
	if path := badField(desc, data.Materialize(), ""); path != "" {
		err = fmt.Errorf("%s: not valid UTF-8", path)
	} else {
		err = fmt.Errorf("%s does not decode: %v", desc.Name(), err)
	}
	d.failed.Store(v, status.Error(codes.InvalidArgument, "malformed message: "+err.Error()))
	return nil
}

// recv receives into v with read, then returns the decode failure, if any.
func (d *decoder) recv(v any, read func(any) error) error {
	if err := read(v); err != nil {
		return err
	}
	if f, ok := d.failed.LoadAndDelete(v); ok {
		return f.(error)
	}
	return nil
}

// badField finds the first string field of msg, at any depth, whose bytes
// in b are not valid UTF-8, and names it (e.g. "register.identity").
func badField(msg protoreflect.MessageDescriptor, b []byte, prefix string) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := msg.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		path := prefix + string(fd.Name())
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return path
			}
		case protoreflect.MessageKind:
			if fd.IsMap() {
				continue
			}
			if p := badField(fd.Message(), v, path+"."); p != "" {
				return p
			}
		}
	}
	return ""
}

// decodingStream receives worker frames and streaming requests through the
// decoder.
type decodingStream struct {
	grpc.ServerStream
	srv *Server
}

func (s decodingStream) RecvMsg(m any) error {
	return s.srv.read(s.Context(), m, s.ServerStream.RecvMsg)
}

func (s *Server) streamDecode(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := refusal(ss.Context()); err != nil {
		return err
	}
	return h(srv, decodingStream{ServerStream: ss, srv: s})
}

// register serves impl under desc, each unary method receiving its request
// through the decoder (a request is decoded before any interceptor runs).
func (s *Server) register(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			if err := refusal(ctx); err != nil {
				return nil, err // before the body is read
			}
			return h(srv, ctx, func(v any) error { return s.read(ctx, v, dec) }, ic)
		}
		d.Methods[i] = m
	}
	s.grpc.RegisterService(&d, impl)
	if s.methods == nil {
		s.methods = make(map[string]method)
	}
	for i := range d.Methods {
		s.methods["/"+d.ServiceName+"/"+d.Methods[i].MethodName] = method{impl: impl, unary: &d.Methods[i]}
	}
	for i := range d.Streams {
		s.methods["/"+d.ServiceName+"/"+d.Streams[i].StreamName] = method{impl: impl, stream: &d.Streams[i]}
	}
}

// method is one registered method, for the calls the lean transport serves.
type method struct {
	impl   any
	unary  *grpc.MethodDesc
	stream *grpc.StreamDesc
}

// chainStream runs outer around inner.
func chainStream(outer, inner grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return outer(srv, ss, info, func(srv any, ss grpc.ServerStream) error { return inner(srv, ss, info, h) })
	}
}
