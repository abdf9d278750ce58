// Package target turns an aion address into a gRPC connection: one
// host:port, or several separated by commas (the servers of a cluster).
// With several, each connection tries them in its own shuffled order and
// moves to another when the one it uses goes away, so clients and workers
// spread over the servers and survive one of them dying. DialSDK is how
// both Go SDKs connect: the transport default and the bearer token live
// here once.
package target

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/aion-run/aion/internal/limit"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// DialSDK dials address as the client and worker SDKs do: insecure
// transport credentials unless opts replace them (for TLS, pass
// grpc.WithTransportCredentials), the bearer token on every call when token
// is not empty, then opts, which come last and so win.
func DialSDK(address, token string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearerToken(token)))
	}
	return Dial(address, append(dial, opts...)...)
}

// BearerToken returns call credentials that send "authorization: Bearer
// <token>", for a call on a connection dialed without them.
func BearerToken(token string) credentials.PerRPCCredentials { return bearerToken(token) }

// bearerToken sends "authorization: Bearer <token>" with every call.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so that a token also works with a
// server on a trusted network that speaks plain gRPC; with TLS
// credentials the token travels encrypted.
func (bearerToken) RequireTransportSecurity() bool { return false }

// shuffledPickFirst keeps one connection at a time, to the first reachable
// address of a shuffled list.
const shuffledPickFirst = `{"loadBalancingConfig":[{"pick_first":{"shuffleAddressList":true}}]}`

// Dial returns a client connection for address; opts are the caller's own
// and come after the defaults, which size messages by the wire limits: a
// response as large as the server may send (a Get of an activity with an
// input and a result of the largest size), a request as large as it accepts.
func Dial(address string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(limit.Response), grpc.MaxCallSendMsgSize(limit.Message))}, opts...)
	if !strings.Contains(address, ",") {
		return grpc.NewClient(address, opts...)
	}
	var list []resolver.Address
	for _, a := range strings.Split(address, ",") {
		a = strings.TrimSpace(a)
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("address %q: entry %q is not host:port: %w", address, a, err)
		}
		// ServerName keeps TLS verifying each server by its own host name.
		list = append(list, resolver.Address{Addr: a, ServerName: host})
	}
	r := manual.NewBuilderWithScheme("aion-servers")
	r.InitialState(resolver.State{Addresses: list})
	all := append([]grpc.DialOption{grpc.WithResolvers(r), grpc.WithDefaultServiceConfig(shuffledPickFirst)}, opts...)
	return grpc.NewClient(r.Scheme()+":///cluster", all...)
}
