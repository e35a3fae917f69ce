//go:build cgo && linux

package nvmlsource_test

import (
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

// energyFunc answers the n-th GetTotalEnergyConsumption call on GPU gpu,
// counting from 0; call 0 is the probe New makes.
type energyFunc func(gpu, n int) (uint64, nvml.Return)

// steady is an energyFunc whose counters all advance: GPU g reads
// g*1e6 + n*100 mJ on its n-th call.
func steady(gpu, n int) (uint64, nvml.Return) {
	return uint64(gpu)*1_000_000 + uint64(n)*100, nvml.SUCCESS
}

// fakeH100 returns the fake 8-GPU DGX H100 with energy wired through fn,
// and its devices. The fake server does not implement energy itself.
func fakeH100(t testing.TB, fn energyFunc) (*server.Server, []*server.Device) {
	t.Helper()
	srv := dgxh100.New()
	devs := make([]*server.Device, len(srv.Devices))
	for g, d := range srv.Devices {
		dev, ok := d.(*server.Device)
		if !ok {
			t.Fatalf("fake device %d is %T, want *server.Device", g, d)
		}
		devs[g] = dev
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
			// The mock records a call before running this function.
			return fn(g, len(dev.GetTotalEnergyConsumptionCalls())-1)
		}
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return h100PowerLimitMW, nvml.SUCCESS }
		dev.GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) {
			return h100MinPowerLimitMW, h100PowerLimitMW, nvml.SUCCESS
		}
		// No process holds any GPU until a test says otherwise.
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
	}
	return srv, devs
}

// h100PowerLimitMW is the enforced power limit of an H100 SXM5 at its
// default setting, 700 W, which is also the most it can be set to;
// h100MinPowerLimitMW is the least, 200 W.
const (
	h100PowerLimitMW    = 700_000
	h100MinPowerLimitMW = 200_000
)

// testOpts makes New use lib, an empty environment and no listing
// goroutine, followed by opts.
func testOpts(lib nvml.Interface, opts ...nvmlsource.Option) []nvmlsource.Option {
	return append([]nvmlsource.Option{
		nvmlsource.WithInterface(lib),
		nvmlsource.WithEnv(nil),
		nvmlsource.WithShareInterval(0),
		nvmlsource.WithHostPIDs(true),
		// No process tree: the fake boards' pids are no one's on this
		// machine, and their ancestry must not depend on what runs here.
		nvmlsource.WithProcRoot(filepath.Join("testdata", "no-proc")),
	}, opts...)
}

// newSource calls New on lib with testOpts and fails the test on error. It
// closes the source at cleanup.
func newSource(t *testing.T, lib nvml.Interface, opts ...nvmlsource.Option) *nvmlsource.Source {
	t.Helper()
	s, err := nvmlsource.New(testOpts(lib, opts...)...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// energyCalls returns how many times each fake GPU's counter was read.
func energyCalls(devs []*server.Device) []int {
	n := make([]int, len(devs))
	for g, d := range devs {
		n[g] = len(d.GetTotalEnergyConsumptionCalls())
	}
	return n
}

// callCounts returns, for every moq call record on m (each method named
// ...Calls), how many calls it holds, keyed by the NVML method name.
func callCounts(m any) map[string]int {
	v := reflect.ValueOf(m)
	counts := make(map[string]int)
	for i := range v.NumMethod() {
		name := v.Type().Method(i).Name
		mt := v.Method(i).Type()
		if !strings.HasSuffix(name, "Calls") || mt.NumIn() != 0 || mt.NumOut() != 1 || mt.Out(0).Kind() != reflect.Slice {
			continue
		}
		counts[strings.TrimSuffix(name, "Calls")] = v.Method(i).Call(nil)[0].Len()
	}
	return counts
}

func TestKind(t *testing.T) {
	srv, _ := fakeH100(t, steady)
	if got := newSource(t, srv).Kind(); got != "nvml" {
		t.Errorf("Kind() = %q, want %q", got, "nvml")
	}
}

func TestReadsAllEightGPUs(t *testing.T) {
	srv, fake := fakeH100(t, steady)
	s := newSource(t, srv)

	devs := s.Devices()
	if len(devs) != len(fake) {
		t.Fatalf("len(Devices()) = %d, want %d", len(devs), len(fake))
	}
	if sk := s.Skipped(); len(sk) != 0 {
		t.Errorf("Skipped() = %v, want none", sk)
	}
	seen := make(map[string]bool)
	for i, d := range devs {
		want := source.Device{
			ID: fake[i].UUID, Name: fake[i].Config.Name, Vendor: "NVIDIA", Index: i, CounterMax: 0,
			Type: "gpu", MaxWatts: 700 * 1.5, MaxWattsFirm: true,
		}
		if d != want {
			t.Errorf("Devices()[%d] = %+v, want %+v", i, d, want)
		}
		if d.ID == "" || seen[d.ID] {
			t.Errorf("Devices()[%d].ID = %q is empty or repeated", i, d.ID)
		}
		seen[d.ID] = true
	}

	devs[0].ID = "changed by caller"
	if got := s.Devices()[0].ID; got != fake[0].UUID {
		t.Errorf("Devices() shares its slice with the caller: ID became %q", got)
	}

	for tick := 1; tick <= 3; tick++ {
		for i := range devs {
			got, err := s.ReadEnergy(i)
			want, _ := steady(i, tick)
			if err != nil || got != want {
				t.Errorf("tick %d: ReadEnergy(%d) = %d, %v; want %d, nil", tick, i, got, err, want)
			}
		}
	}
	for g, n := range energyCalls(fake) {
		if n != 1+3 {
			t.Errorf("GPU %d counter read %d times, want 4 (probe + 3 ticks)", g, n)
		}
	}
}

func TestNewSkipsUnreadableGPU(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(d *server.Device) // breaks GPU 2
		wantErr []error
		wantID  bool // whether the skipped Device still carries its UUID
	}{
		{
			name: "energy not supported",
			setup: func(d *server.Device) {
				d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			},
			wantErr: []error{source.ErrNotSupported, nvml.ERROR_NOT_SUPPORTED},
			wantID:  true,
		},
		{
			name: "lost while probed",
			setup: func(d *server.Device) {
				d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
			},
			wantErr: []error{source.ErrDeviceLost, nvml.ERROR_GPU_IS_LOST},
			wantID:  true,
		},
		{
			name: "energy read fails",
			setup: func(d *server.Device) {
				d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
			},
			wantErr: []error{source.ErrRead, nvml.ERROR_UNKNOWN},
			wantID:  true,
		},
		{
			name: "UUID fails",
			setup: func(d *server.Device) {
				d.GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
			},
			wantErr: []error{source.ErrRead, nvml.ERROR_UNKNOWN},
			wantID:  false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const broken = 2
			srv, fake := fakeH100(t, steady)
			tt.setup(fake[broken])
			s := newSource(t, srv)

			sk := s.Skipped()
			if len(sk) != 1 {
				t.Fatalf("Skipped() = %v, want one entry", sk)
			}
			if sk[0].Device.Index != broken || sk[0].Device.Vendor != "NVIDIA" {
				t.Errorf("Skipped()[0].Device = %+v, want index %d, vendor NVIDIA", sk[0].Device, broken)
			}
			if gotID := sk[0].Device.ID == fake[broken].UUID; gotID != tt.wantID {
				t.Errorf("Skipped()[0].Device.ID = %q, carries UUID %v, want %v", sk[0].Device.ID, gotID, tt.wantID)
			}
			for _, want := range tt.wantErr {
				if !errors.Is(sk[0].Reason, want) {
					t.Errorf("Skipped()[0].Reason = %v, want it to match %v", sk[0].Reason, want)
				}
			}

			devs := s.Devices()
			if len(devs) != len(fake)-1 {
				t.Fatalf("len(Devices()) = %d, want %d", len(devs), len(fake)-1)
			}
			for i, d := range devs {
				if d.Index == broken {
					t.Fatalf("Devices()[%d] is the broken GPU", i)
				}
				got, err := s.ReadEnergy(i)
				want, _ := steady(d.Index, 1)
				if err != nil || got != want {
					t.Errorf("ReadEnergy(%d) (GPU %d) = %d, %v; want %d, nil", i, d.Index, got, err, want)
				}
			}
		})
	}
}

func TestNewNoReadableDevices(t *testing.T) {
	tests := []struct {
		name    string
		lib     func(t *testing.T) *server.Server
		wantErr []error
	}{
		{
			name: "no GPU supports energy",
			lib: func(t *testing.T) *server.Server {
				srv, _ := fakeH100(t, func(int, int) (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED })
				return srv
			},
			wantErr: []error{source.ErrNoDevices, source.ErrNotSupported, nvml.ERROR_NOT_SUPPORTED},
		},
		{
			name: "no GPUs",
			lib: func(t *testing.T) *server.Server {
				srv, _ := fakeH100(t, steady)
				srv.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
				return srv
			},
			wantErr: []error{source.ErrNoDevices},
		},
		{
			name: "count fails",
			lib: func(t *testing.T) *server.Server {
				srv, _ := fakeH100(t, steady)
				srv.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
				return srv
			},
			wantErr: []error{source.ErrUnavailable, nvml.ERROR_UNKNOWN},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := tt.lib(t)
			s, err := nvmlsource.New(testOpts(srv)...)
			if s != nil {
				t.Errorf("New() source = %v, want nil", s)
			}
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("New() error = %v, want it to match %v", err, want)
				}
			}
			if n := len(srv.ShutdownCalls()); n != 1 {
				t.Errorf("Shutdown called %d times, want 1", n)
			}
		})
	}
}

// TestInitFailureCallsNothingElse checks the rule that keeps the process
// alive: after a failed Init, no other NVML function is called.
func TestInitFailureCallsNothingElse(t *testing.T) {
	tests := []struct {
		name     string
		ret      nvml.Return
		wantText string
	}{
		{name: "library not found", ret: nvml.ERROR_LIBRARY_NOT_FOUND, wantText: "ERROR_LIBRARY_NOT_FOUND"},
		{name: "driver not loaded", ret: nvml.ERROR_DRIVER_NOT_LOADED, wantText: "ERROR_DRIVER_NOT_LOADED"},
		{name: "no permission", ret: nvml.ERROR_NO_PERMISSION, wantText: "ERROR_NO_PERMISSION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Every other ...Func is nil, so any other call would also panic.
			lib := &mock.Interface{InitFunc: func() nvml.Return { return tt.ret }}
			s, err := nvmlsource.New(nvmlsource.WithInterface(lib))
			if s != nil {
				t.Errorf("New() source = %v, want nil", s)
			}
			if !errors.Is(err, source.ErrUnavailable) {
				t.Errorf("New() error = %v, want it to wrap source.ErrUnavailable", err)
			}
			if !errors.Is(err, tt.ret) {
				t.Errorf("New() error = %v, want it to match %s", err, tt.wantText)
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("New() error %q does not name %s", err, tt.wantText)
			}

			counts := callCounts(lib)
			if len(counts) < 300 {
				t.Fatalf("found only %d call records on mock.Interface; the reflection missed them", len(counts))
			}
			for _, name := range []string{"Init", "Shutdown", "DeviceGetCount", "DeviceGetHandleByIndex", "ErrorString", "Extensions"} {
				if _, ok := counts[name]; !ok {
					t.Errorf("no call record for %s on mock.Interface", name)
				}
			}
			for name, n := range counts {
				want := 0
				if name == "Init" {
					want = 1
				}
				if n != want {
					t.Errorf("%s called %d times after a failed Init, want %d", name, n, want)
				}
			}
		})
	}
}

func TestReadEnergyDeviceLost(t *testing.T) {
	const (
		lostGPU = 5
		ticks   = 8
	)
	tests := []struct {
		name      string
		goodReads int // reads of lostGPU that succeed before it is lost
	}{
		{name: "lost on first read", goodReads: 0},
		{name: "lost after 3 reads", goodReads: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, fake := fakeH100(t, func(gpu, n int) (uint64, nvml.Return) {
				if gpu == lostGPU && n > tt.goodReads {
					return 0, nvml.ERROR_GPU_IS_LOST
				}
				return steady(gpu, n)
			})
			s := newSource(t, srv)

			for tick := 1; tick <= ticks; tick++ {
				for i := range s.Devices() {
					got, err := s.ReadEnergy(i)
					want, _ := steady(i, tick)
					switch {
					case i == lostGPU && tick > tt.goodReads:
						if !errors.Is(err, source.ErrDeviceLost) {
							t.Errorf("tick %d: ReadEnergy(%d) error = %v, want source.ErrDeviceLost", tick, i, err)
						}
					case err != nil || got != want:
						t.Errorf("tick %d: ReadEnergy(%d) = %d, %v; want %d, nil", tick, i, got, err, want)
					}
				}
			}
			for g, n := range energyCalls(fake) {
				want := 1 + ticks
				if g == lostGPU {
					want = 1 + tt.goodReads + 1 // probe, good reads, the read that found it lost
				}
				if n != want {
					t.Errorf("GPU %d counter read %d times, want %d", g, n, want)
				}
			}
		})
	}
}

func TestReadEnergyTransientError(t *testing.T) {
	srv, fake := fakeH100(t, func(gpu, n int) (uint64, nvml.Return) {
		if gpu == 1 && n == 2 {
			return 0, nvml.ERROR_TIMEOUT
		}
		return steady(gpu, n)
	})
	s := newSource(t, srv)

	steps := []struct {
		name    string
		want    uint64
		wantErr []error
	}{
		{name: "good read", want: 1_000_100},
		{name: "timeout", wantErr: []error{source.ErrRead, nvml.ERROR_TIMEOUT}},
		{name: "good again", want: 1_000_300},
	}
	for _, st := range steps {
		got, err := s.ReadEnergy(1)
		if len(st.wantErr) == 0 {
			if err != nil || got != st.want {
				t.Errorf("%s: ReadEnergy(1) = %d, %v; want %d, nil", st.name, got, err, st.want)
			}
			continue
		}
		for _, want := range st.wantErr {
			if !errors.Is(err, want) {
				t.Errorf("%s: ReadEnergy(1) error = %v, want it to match %v", st.name, err, want)
			}
		}
		if errors.Is(err, source.ErrDeviceLost) {
			t.Errorf("%s: a transient error marked the device lost: %v", st.name, err)
		}
	}
	if n := len(fake[1].GetTotalEnergyConsumptionCalls()); n != 4 {
		t.Errorf("GPU 1 counter read %d times, want 4", n)
	}
}

// TestReadEnergyPassesRawCounter checks that the adapter returns what NVML
// says, backwards steps included: telling a reset from a wrap is the
// tracker's job.
func TestReadEnergyPassesRawCounter(t *testing.T) {
	steps := []struct {
		name string
		raw  uint64
	}{
		{name: "first", raw: 1_000},
		{name: "forward", raw: 2_500},
		{name: "no update yet", raw: 2_500},
		{name: "driver reload resets", raw: 40},
		{name: "forward after reset", raw: 900},
		{name: "near the top", raw: math.MaxUint64 - 10},
		{name: "past the top", raw: 5},
	}
	srv, _ := fakeH100(t, func(gpu, n int) (uint64, nvml.Return) {
		if gpu != 0 || n == 0 {
			return steady(gpu, n)
		}
		return steps[n-1].raw, nvml.SUCCESS
	})
	s := newSource(t, srv)
	for _, st := range steps {
		got, err := s.ReadEnergy(0)
		if err != nil || got != st.raw {
			t.Errorf("%s: ReadEnergy(0) = %d, %v; want %d, nil", st.name, got, err, st.raw)
		}
	}
}

func TestReadEnergyIndexOutOfRange(t *testing.T) {
	srv, fake := fakeH100(t, steady)
	s := newSource(t, srv)
	before := energyCalls(fake)
	for _, tt := range []struct {
		name string
		i    int
	}{
		{name: "negative", i: -1},
		{name: "one past the end", i: len(fake)},
		{name: "far past the end", i: 1 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.ReadEnergy(tt.i); err == nil {
				t.Errorf("ReadEnergy(%d) error = nil, want an error", tt.i)
			}
		})
	}
	if after := energyCalls(fake); !reflect.DeepEqual(before, after) {
		t.Errorf("out-of-range reads reached NVML: calls %v, then %v", before, after)
	}
}

func TestReadEnergyAfterClose(t *testing.T) {
	srv, fake := fakeH100(t, steady)
	s := newSource(t, srv)
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	before := energyCalls(fake)
	for i := range s.Devices() {
		if _, err := s.ReadEnergy(i); !errors.Is(err, source.ErrUnavailable) {
			t.Errorf("ReadEnergy(%d) after Close error = %v, want source.ErrUnavailable", i, err)
		}
	}
	if after := energyCalls(fake); !reflect.DeepEqual(before, after) {
		t.Errorf("reads after Close reached NVML: calls %v, then %v", before, after)
	}
}

func TestCloseShutsDownOnce(t *testing.T) {
	tests := []struct {
		name      string
		shutdown  nvml.Return
		wantFirst error // nil: want no error
	}{
		{name: "shutdown succeeds", shutdown: nvml.SUCCESS},
		{name: "shutdown fails", shutdown: nvml.ERROR_UNKNOWN, wantFirst: nvml.ERROR_UNKNOWN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := fakeH100(t, steady)
			srv.ShutdownFunc = func() nvml.Return { return tt.shutdown }
			s, err := nvmlsource.New(testOpts(srv)...)
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			first := s.Close()
			if tt.wantFirst == nil && first != nil || tt.wantFirst != nil && !errors.Is(first, tt.wantFirst) {
				t.Errorf("first Close() = %v, want %v", first, tt.wantFirst)
			}
			if second := s.Close(); second != nil {
				t.Errorf("second Close() = %v, want nil", second)
			}
			if n := len(srv.ShutdownCalls()); n != 1 {
				t.Errorf("Shutdown called %d times after two Close calls, want 1", n)
			}
		})
	}
}

// TestCloseConcurrentSafe races several Close calls against a reader, as
// when the sampler reads while the application shuts down. Run it with -race.
func TestCloseConcurrentSafe(t *testing.T) {
	var shutdown atomic.Bool
	srv, fake := fakeH100(t, func(gpu, n int) (uint64, nvml.Return) {
		if shutdown.Load() {
			t.Errorf("GPU %d counter read after Shutdown", gpu)
		}
		return steady(gpu, n)
	})
	srv.ShutdownFunc = func() nvml.Return {
		shutdown.Store(true)
		return nvml.SUCCESS
	}
	s, err := nvmlsource.New(testOpts(srv)...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	n := len(s.Devices())

	var (
		wg        sync.WaitGroup
		readOnce  = make(chan struct{})
		goodReads atomic.Int64
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for round := 0; ; round++ {
			closed := 0
			for i := range n {
				_, err := s.ReadEnergy(i)
				switch {
				case err == nil:
					goodReads.Add(1)
				case errors.Is(err, source.ErrUnavailable):
					closed++
				default:
					t.Errorf("ReadEnergy(%d) = %v, want nil or source.ErrUnavailable", i, err)
				}
			}
			if round == 0 {
				close(readOnce)
			}
			if closed == n {
				return
			}
		}
	}()

	<-readOnce
	const closers = 4
	errs := make(chan error, closers)
	for range closers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Close()
		}()
	}
	wg.Wait()
	close(errs)

	for err := range errs {
		if err != nil {
			t.Errorf("Close() = %v", err)
		}
	}
	if got := len(srv.ShutdownCalls()); got != 1 {
		t.Errorf("Shutdown called %d times by %d concurrent Close calls, want 1", got, closers)
	}
	if goodReads.Load() < int64(n) {
		t.Errorf("only %d good reads before Close, want at least %d", goodReads.Load(), n)
	}
	before := energyCalls(fake)
	if _, err := s.ReadEnergy(0); !errors.Is(err, source.ErrUnavailable) {
		t.Errorf("ReadEnergy(0) after Close = %v, want source.ErrUnavailable", err)
	}
	if after := energyCalls(fake); !reflect.DeepEqual(before, after) {
		t.Errorf("a read after Close reached NVML: calls %v, then %v", before, after)
	}
}

// TestMIGReadsBoardOnce checks that a MIG-partitioned GPU is still one
// device, read once per ReadEnergy, and that no MIG handle is ever used.
func TestMIGReadsBoardOnce(t *testing.T) {
	srv, fake := fakeH100(t, steady)
	for _, d := range fake[:2] {
		if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			t.Fatalf("SetMigMode = %v", ret)
		}
		info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
		if ret != nvml.SUCCESS {
			t.Fatalf("GetGpuInstanceProfileInfo = %v", ret)
		}
		for range 3 {
			if _, ret := d.CreateGpuInstance(&info); ret != nvml.SUCCESS {
				t.Fatalf("CreateGpuInstance = %v", ret)
			}
		}
	}
	s := newSource(t, srv)
	if got := len(s.Devices()); got != len(fake) {
		t.Fatalf("len(Devices()) = %d with MIG enabled, want %d boards", got, len(fake))
	}
	before := energyCalls(fake)
	for i := range s.Devices() {
		if _, err := s.ReadEnergy(i); err != nil {
			t.Fatalf("ReadEnergy(%d) = %v", i, err)
		}
	}
	after := energyCalls(fake)
	for g := range fake {
		if after[g]-before[g] != 1 {
			t.Errorf("GPU %d read %d times for one ReadEnergy each, want 1", g, after[g]-before[g])
		}
	}
	if n := len(srv.DeviceGetMigDeviceHandleByIndexCalls()); n != 0 {
		t.Errorf("DeviceGetMigDeviceHandleByIndex called %d times, want 0", n)
	}
	for g, d := range fake {
		if n := len(d.GetMigDeviceHandleByIndexCalls()); n != 0 {
			t.Errorf("GPU %d: GetMigDeviceHandleByIndex called %d times, want 0", g, n)
		}
	}
}

// TestMaxWatts checks the power bound: the most the board's limit can be
// set to, so that raising the limit at run time (nvidia-smi -pl, a DCGM
// policy) never turns real steps into glitches; the enforced limit where
// the constraints do not answer; nothing, so the sampler's default
// applies, where neither does.
func TestMaxWatts(t *testing.T) {
	const notSupported = nvml.ERROR_NOT_SUPPORTED
	tests := []struct {
		name         string
		maxMW        uint32
		maxRet       nvml.Return
		enforcedMW   uint32
		enforcedRet  nvml.Return
		wantMaxWatts float64
		// wantFirm: the bound comes from the board's own ceiling, which
		// no one can raise at run time, so the sampler must never learn
		// past it.
		wantFirm bool
	}{
		{name: "limit lowered below the board's maximum", maxMW: 700_000, enforcedMW: 300_000, wantMaxWatts: 700 * 1.5, wantFirm: true},
		{name: "limit at the maximum", maxMW: 700_000, enforcedMW: 700_000, wantMaxWatts: 700 * 1.5, wantFirm: true},
		{name: "constraints not supported", maxRet: notSupported, enforcedMW: 300_000, wantMaxWatts: 300 * 1.5},
		{name: "constraints answer 0", maxMW: 0, enforcedMW: 300_000, wantMaxWatts: 300 * 1.5},
		{name: "enforced above the reported maximum", maxMW: 250_000, enforcedMW: 300_000, wantMaxWatts: 300 * 1.5},
		{name: "neither answers", maxRet: notSupported, enforcedRet: notSupported, wantMaxWatts: 0},
		{name: "maximum only", maxMW: 600_000, enforcedRet: notSupported, wantMaxWatts: 600 * 1.5, wantFirm: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, fake := fakeH100(t, steady)
			fake[1].GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) {
				return h100MinPowerLimitMW, tt.maxMW, tt.maxRet
			}
			fake[1].GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return tt.enforcedMW, tt.enforcedRet }
			s := newSource(t, srv)
			if got := s.Devices()[1].MaxWatts; math.Abs(got-tt.wantMaxWatts) > 1e-9 {
				t.Errorf("Devices()[1].MaxWatts = %v, want %v", got, tt.wantMaxWatts)
			}
			if got := s.Devices()[1].MaxWattsFirm; got != tt.wantFirm {
				t.Errorf("Devices()[1].MaxWattsFirm = %v, want %v", got, tt.wantFirm)
			}
			if got := s.Devices()[0].MaxWatts; got != 700*1.5 {
				t.Errorf("Devices()[0].MaxWatts = %v, want %v", got, 700*1.5)
			}
		})
	}
}
