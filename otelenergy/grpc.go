package otelenergy

import (
	"context"

	"google.golang.org/grpc"
)

// UnaryServerInterceptor returns a gRPC unary interceptor that attributes
// energy to each call, setting the same span attributes as
// [NewMiddleware].
//
// It works beside otelgrpc's stats handler: interceptors finish before the
// stats handler ends the span, so the attributes land on the server span.
//
//	grpc.NewServer(
//		grpc.StatsHandler(otelgrpc.NewServerHandler()),
//		grpc.ChainUnaryInterceptor(otelenergy.UnaryServerInterceptor(mon)),
//	)
//
// A nil Monitor makes it a pass-through.
func UnaryServerInterceptor(m *Monitor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if m == nil {
			return handler(ctx, req)
		}
		r := m.StartRequest(ctx)
		defer m.finish(r)
		return handler(r, req)
	}
}

// StreamServerInterceptor returns a gRPC stream interceptor that attributes
// energy to each stream, as [UnaryServerInterceptor] does for unary calls.
// Handlers report tokens with [Monitor.AddTokens] on the stream's context as
// they send them.
func StreamServerInterceptor(m *Monitor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if m == nil {
			return handler(srv, ss)
		}
		r := m.StartRequest(ss.Context())
		defer m.finish(r)
		return handler(srv, &serverStream{ServerStream: ss, ctx: r})
	}
}

// serverStream replaces a stream's context with one carrying the Request.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }
