package otelenergy

import (
	"context"
	"io"
	"math"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/simgpu"
)

// genService is a hand-written gRPC service (no generated code): a unary
// Complete and a server-streaming Stream, each producing tokens.
func genService(rig *testRig) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "otelenergy.test.Gen",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Complete",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, _ any) (any, error) {
					for range 4 {
						rig.m.AddTokens(ctx, 5)
						rig.tick(step)
					}
					return wrapperspb.String("done"), nil
				}
				info := &grpc.UnaryServerInfo{FullMethod: "/otelenergy.test.Gen/Complete"}
				if ic == nil {
					return h(ctx, in)
				}
				return ic(ctx, in, info, h)
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Stream",
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); err != nil {
					return err
				}
				for range 6 {
					if err := ss.SendMsg(wrapperspb.String("tok")); err != nil {
						return err
					}
					rig.m.AddTokens(ss.Context(), 3)
					rig.tick(step)
				}
				return nil
			},
		}},
	}
}

// TestGRPCInterceptorsBesideOtelgrpc serves a unary call and a stream
// with otelgrpc's stats handler and the energy interceptors, with carbon
// at 436 g/kWh: each server span carries its tokens, its energy and its
// emissions, the latter End's energy at that intensity.
func TestGRPCInterceptorsBesideOtelgrpc(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, ideal(simgpu.Config{}), WithCarbon(newCarbonModel(t, carbon.NewStatic(carbon.Intensity{MgPerKWh: 436_000}))))
	rig.m.Sample()

	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))),
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(rig.m)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(rig.m)),
	)
	srv.RegisterService(genService(rig), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, "/otelenergy.test.Gen/Complete", wrapperspb.String("hi"), out); err != nil {
		t.Fatal(err)
	}
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/otelenergy.test.Gen/Stream")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	got := 0
	for {
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != 6 {
		t.Fatalf("received %d stream messages, want 6", got)
	}
	srv.GracefulStop() // every server span has ended once the handlers are done

	want := map[string]int64{"otelenergy.test.Gen/Complete": 20, "otelenergy.test.Gen/Stream": 18}
	seen := 0
	for _, s := range sr.Ended() {
		if s.SpanKind() != trace.SpanKindServer {
			continue
		}
		tokens, ok := want[s.Name()]
		if !ok {
			t.Fatalf("unexpected server span %q", s.Name())
		}
		seen++
		a := spanAttrs(s)
		if a["gen_ai.usage.output_tokens"].AsInt64() != tokens {
			t.Errorf("%s: output tokens %d, want %d", s.Name(), a["gen_ai.usage.output_tokens"].AsInt64(), tokens)
		}
		// Alone on the GPU, each call gets energy.
		mj, ok := a[EnergyMillijoulesKey]
		if !ok || mj.AsInt64() <= 0 {
			t.Errorf("%s: energy.millijoules = %v, %v", s.Name(), mj.AsInt64(), ok)
		}
		if a["otelenergy.run.id"].AsString() != rig.m.Run().ID() {
			t.Errorf("%s: run id %q", s.Name(), a["otelenergy.run.id"].AsString())
		}
		// µg = mJ × 436 000 mg/kWh / 3.6e6, each interval's share and the
		// estimated rest rounded once: within a few µg.
		mg, ok := a[co2eKey]
		want := float64(mj.AsInt64()) * 436_000 / 3.6e6
		if got := mg.AsFloat64() * 1000; !ok || math.Abs(got-want) > 5+want/1000 {
			t.Errorf("%s: energy.co2e.milligrams = %v (%v), want %d mJ at 436 g/kWh, %.3f mg", s.Name(), mg.AsFloat64(), ok, mj.AsInt64(), want/1000)
		}
	}
	if seen != 2 {
		t.Fatalf("saw %d server spans, want 2", seen)
	}
}
