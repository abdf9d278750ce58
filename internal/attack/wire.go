package attack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// frame is one protobuf message encoded in pieces. A large field is one
// piece shared by every send, so sixty concurrent 63 MiB requests cost the
// attacker one buffer rather than sixty copies.
type frame [][]byte

// size is the encoded length of the message.
func (f frame) size() int {
	n := 0
	for _, p := range f {
		n += len(p)
	}
	return n
}

// encode starts a frame with the small fields of m.
func encode(m proto.Message) frame {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("attack: encode %T: %v", m, err)) // a generated message always encodes
	}
	return frame{b}
}

// bytesField appends field (a bytes or string field of m's type) holding
// big, without copying big.
func (f frame) bytesField(m proto.Message, field string, big []byte) frame {
	hdr := protowire.AppendTag(nil, number(m, field), protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(len(big)))
	return append(f, hdr, big)
}

// nest wraps f as the message field named field of outer, after outer's
// own small fields.
func (f frame) nest(outer proto.Message, field string) frame {
	head := encode(outer)[0]
	head = protowire.AppendTag(head, number(outer, field), protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(f.size()))
	return append(frame{head}, f...)
}

func number(m proto.Message, field string) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(field))
	if fd == nil {
		panic(fmt.Sprintf("attack: %s has no field %q", m.ProtoReflect().Descriptor().FullName(), field))
	}
	return fd.Number()
}

// codec sends frames as they are and everything else as protobuf.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2("proto")} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(frame)
	if !ok {
		return c.proto.Marshal(v)
	}
	out := make(mem.BufferSlice, len(f))
	for i, p := range f {
		out[i] = mem.SliceBuffer(p) // never freed: the pieces are shared
	}
	return out, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (codec) Name() string { return "proto" }

// bearer sends a token on every call, over the plain loopback transport.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// dial connects to the server under attack with the given token (none when
// empty); every call may send and receive the largest message gRPC allows.
func dial(addr, token string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<31-1), grpc.MaxCallRecvMsgSize(1<<31-1), grpc.ForceCodecV2(newCodec())),
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	cc, err := grpc.NewClient(addr, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return cc, nil
}

// tally counts requests sent and their outcomes by label.
type tally struct {
	sent atomic.Int64
	mu   sync.Mutex
	by   map[string]int64
}

func newTally() *tally { return &tally{by: make(map[string]int64)} }

// add records n of outcome label.
func (t *tally) add(label string, n int64) {
	t.mu.Lock()
	t.by[label] += n
	t.mu.Unlock()
}

func (t *tally) snapshot() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.by)
}

// outcome names how a call ended: a gRPC code name, or the class of a
// transport error.
func outcome(err error) string {
	switch {
	case err == nil:
		return "OK"
	case errors.Is(err, io.EOF):
		return "stream ended"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "gave up (deadline)"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String()
	}
	return "error"
}

// sortedKeys returns m's keys in order, for stable output.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
