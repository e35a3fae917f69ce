//go:build cgo && linux

package nvmlsource_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

// withMIG enables MIG on d and gives it MIG devices whose UUIDs it returns.
// The fake server does not wire MIG device handles, so they are built here.
func withMIG(t *testing.T, d *server.Device, n int) []string {
	t.Helper()
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode = %v", ret)
	}
	const slots = 7
	uuids := make([]string, n)
	migs := make([]nvml.Device, n)
	for j := range n {
		uuids[j] = fmt.Sprintf("MIG-%s-%d", strings.TrimPrefix(d.UUID, "GPU-")[:23], j)
		u := uuids[j]
		migs[j] = &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return u, nvml.SUCCESS }}
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return slots, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		if j < 0 || j >= slots {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if j >= n {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return migs[j], nvml.SUCCESS
	}
	return uuids
}

// captureErrors routes otel.Handle to a slice for the rest of the test and
// restores the previous handler at cleanup. Tests that use it must not run
// in parallel.
func captureErrors(t *testing.T) func() []error {
	t.Helper()
	var (
		mu   sync.Mutex
		errs []error
	)
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}))
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	return func() []error {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(errs)
	}
}

// indices returns the NVML index of each device.
func indices(devs []source.Device) []int {
	idx := make([]int, len(devs))
	for i, d := range devs {
		idx[i] = d.Index
	}
	return idx
}

// layout holds the GPU UUIDs of a fake server and the MIG UUIDs on its MIG
// board.
type layout struct{ ids, migs []string }

func TestDeviceScope(t *testing.T) {
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	const migBoard = 6
	tests := []struct {
		name      string
		env       func(l layout) map[string]string
		devices   func(l layout) []string // WithDevices ids; nil for none
		want      []int
		wantNotes int     // otel.Handle calls
		wantErr   []error // New fails with these
		wantText  func(l layout) []string
	}{
		{name: "unset", want: all},
		{name: "index", env: cuda("2"), want: []int{2}},
		{
			name: "GPU UUID",
			env:  func(l layout) map[string]string { return map[string]string{"CUDA_VISIBLE_DEVICES": l.ids[3]} },
			want: []int{3},
		},
		{
			name: "UUID prefix with GPU-",
			env:  func(l layout) map[string]string { return map[string]string{"CUDA_VISIBLE_DEVICES": l.ids[4][:14]} },
			want: []int{4},
		},
		// CUDA reads an entry that does not start with GPU- or MIG- as an
		// index, like strtoul (pytorch/pytorch PR 84879): a UUID prefix
		// without GPU- is an index, or invalid.
		{name: "UUID prefix without GPU- is read as an index", env: cuda("3f2a9c"), want: []int{3}, wantNotes: 1},
		{
			name:     "UUID prefix without GPU- and no leading digit is invalid",
			env:      cuda("f2a9c"),
			wantErr:  []error{source.ErrNoDevices, source.ErrNotVisible},
			wantText: func(layout) []string { return []string{`"f2a9c" is not an index`} },
		},
		{name: "strtoul reads 1gpu2 as 1", env: cuda("1gpu2,2ampere"), want: []int{1, 2}, wantNotes: 1},
		{name: "leading plus sign", env: cuda("+4"), want: []int{4}},
		{name: "empty entry ends the list", env: cuda("1,,2"), want: []int{1}, wantNotes: 1},
		// The first entry decides the list's kind (PR 92315, matched
		// against the 525.60.13 driver): a UUID in an index list is an
		// invalid index, an index in a UUID list ends it.
		{
			name: "index list followed by a UUID",
			env: func(l layout) map[string]string {
				return map[string]string{"CUDA_VISIBLE_DEVICES": "2," + l.ids[3] + ",4"}
			},
			want: []int{2}, wantNotes: 1,
		},
		{
			name: "UUID list followed by an index",
			env:  func(l layout) map[string]string { return map[string]string{"CUDA_VISIBLE_DEVICES": l.ids[3] + ",2"} },
			want: []int{3}, wantNotes: 1,
		},
		{
			name: "GPU UUID list followed by a MIG UUID",
			env: func(l layout) map[string]string {
				return map[string]string{"CUDA_VISIBLE_DEVICES": l.ids[3] + "," + l.migs[0]}
			},
			want: []int{3}, wantNotes: 1,
		},
		// A repeated device leaves no device visible at all (PRs 84879
		// and 92315: "Repeated ordinal results in empty set").
		{
			name:     "repeated index hides every GPU",
			env:      cuda("5, 2,5"),
			wantErr:  []error{source.ErrNoDevices, source.ErrNotVisible},
			wantText: func(layout) []string { return []string{"repeats index 5", "shows no GPU"} },
		},
		{
			// The repeat is found as the list is read, before indices are
			// checked against the GPUs there are.
			name:     "repeat after an index past the end hides every GPU",
			env:      cuda("0,9,0"),
			wantErr:  []error{source.ErrNoDevices, source.ErrNotVisible},
			wantText: func(layout) []string { return []string{"repeats index 0"} },
		},
		{
			name:      "repeat after an invalid entry is never read",
			env:       cuda("0,bogus,0"),
			want:      []int{0},
			wantNotes: 1,
		},
		{
			name: "UUID list naming a GPU twice hides every GPU",
			env: func(l layout) map[string]string {
				return map[string]string{"CUDA_VISIBLE_DEVICES": l.ids[3] + "," + l.ids[1] + "," + l.ids[3][:12]}
			},
			wantErr:  []error{source.ErrNoDevices, source.ErrNotVisible},
			wantText: func(layout) []string { return []string{"names GPU 3 twice"} },
		},
		{
			name: "MIG UUID repeated hides every GPU",
			env: func(l layout) map[string]string {
				return map[string]string{"CUDA_VISIBLE_DEVICES": l.migs[0] + "," + l.migs[0]}
			},
			wantErr:  []error{source.ErrNoDevices, source.ErrNotVisible},
			wantText: func(layout) []string { return []string{"twice"} },
		},
		{
			name: "ambiguous UUID prefix ends the list",
			env:  func(l layout) map[string]string { return map[string]string{"CUDA_VISIBLE_DEVICES": l.ids[2] + ",GPU-"} },
			want: []int{2}, wantNotes: 1,
		},
		{
			name: "MIG UUID names its board",
			env:  func(l layout) map[string]string { return map[string]string{"CUDA_VISIBLE_DEVICES": l.migs[1]} },
			want: []int{migBoard},
		},
		{
			name: "legacy MIG UUID names its board",
			env: func(l layout) map[string]string {
				return map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-" + l.ids[migBoard] + "/1/0"}
			},
			want: []int{migBoard},
		},
		{
			name: "several MIG instances of one board meter it once",
			env: func(l layout) map[string]string {
				return map[string]string{"CUDA_VISIBLE_DEVICES": l.migs[0] + "," + l.migs[1]}
			},
			want: []int{migBoard},
		},
		{
			name: "MIG list followed by an index",
			env: func(l layout) map[string]string {
				return map[string]string{"CUDA_VISIBLE_DEVICES": l.migs[0] + ",2"}
			},
			want: []int{migBoard}, wantNotes: 1,
		},
		{name: "two indices", env: cuda("2,5"), want: []int{2, 5}},
		{name: "order and spaces", env: cuda(" 5, 2 "), want: []int{2, 5}},
		{name: "invalid entry hides the rest", env: cuda("2,bogus,5"), want: []int{2}, wantNotes: 1},
		{name: "index past the end hides the rest", env: cuda("1,8,3"), want: []int{1}, wantNotes: 1},
		{
			name:    "empty hides every GPU",
			env:     cuda(""),
			wantErr: []error{source.ErrNoDevices, source.ErrNotVisible},
			wantText: func(layout) []string {
				return []string{`CUDA_VISIBLE_DEVICES=""`}
			},
		},
		{
			name:    "-1 hides every GPU",
			env:     cuda("-1"),
			wantErr: []error{source.ErrNoDevices, source.ErrNotVisible},
			wantText: func(l layout) []string {
				return []string{`"-1"`, "0 " + l.ids[0]}
			},
		},
		{
			name: "NVIDIA_VISIBLE_DEVICES UUIDs",
			env: func(l layout) map[string]string {
				return map[string]string{"NVIDIA_VISIBLE_DEVICES": l.ids[1] + "," + l.ids[3]}
			},
			want: []int{1, 3},
		},
		{
			name: "NVIDIA_VISIBLE_DEVICES MIG UUID",
			env:  func(l layout) map[string]string { return map[string]string{"NVIDIA_VISIBLE_DEVICES": l.migs[0]} },
			want: []int{migBoard},
		},
		{name: "NVIDIA_VISIBLE_DEVICES indices are the host's", env: nvidia("1,3"), want: all},
		{name: "NVIDIA_VISIBLE_DEVICES all", env: nvidia("all"), want: all},
		{name: "NVIDIA_VISIBLE_DEVICES none", env: nvidia("none"), want: all},
		{name: "NVIDIA_VISIBLE_DEVICES void", env: nvidia("void"), want: all},
		{
			name: "NVIDIA_VISIBLE_DEVICES UUID of another machine",
			env:  nvidia("GPU-00000000-0000-0000-0000-000000000000"), want: all, wantNotes: 1,
		},
		{
			name: "both variables intersect",
			env: func(l layout) map[string]string {
				return map[string]string{
					"CUDA_VISIBLE_DEVICES":   "1,3,6",
					"NVIDIA_VISIBLE_DEVICES": l.ids[3] + "," + l.ids[6] + "," + l.ids[7],
				}
			},
			want: []int{3, 6},
		},
		{
			name: "WithDevices overrides both",
			env: func(l layout) map[string]string {
				return map[string]string{"CUDA_VISIBLE_DEVICES": "2", "NVIDIA_VISIBLE_DEVICES": l.ids[1]}
			},
			devices: func(l layout) []string { return []string{"7", l.ids[4][:12], l.migs[0]} },
			want:    []int{4, 6, 7},
		},
		{
			name:    "WithDevices duplicates",
			devices: func(l layout) []string { return []string{l.ids[0], "0"} },
			want:    []int{0},
		},
		{
			name:    "WithDevices unknown id",
			devices: func(layout) []string { return []string{"1", "bogus"} },
			wantErr: []error{source.ErrNotVisible},
			wantText: func(l layout) []string {
				return []string{`"bogus"`, "0 " + l.ids[0], "7 " + l.ids[7]}
			},
		},
		{
			name:     "WithDevices index past the end",
			devices:  func(layout) []string { return []string{"8"} },
			wantErr:  []error{source.ErrNotVisible},
			wantText: func(layout) []string { return []string{`"8"`} },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			notes := captureErrors(t)
			srv, fake := fakeH100(t, steady)
			var l layout
			for _, d := range fake {
				l.ids = append(l.ids, d.UUID)
			}
			l.migs = withMIG(t, fake[migBoard], 2)
			var env map[string]string
			if tt.env != nil {
				env = tt.env(l)
			}
			opts := testOpts(srv, nvmlsource.WithEnv(env))
			if tt.devices != nil {
				opts = append(opts, nvmlsource.WithDevices(tt.devices(l)...))
			}

			s, err := nvmlsource.New(opts...)
			if len(tt.wantErr) > 0 {
				if s != nil {
					_ = s.Close()
					t.Fatalf("New() succeeded with %v, want an error", indices(s.Devices()))
				}
				for _, want := range tt.wantErr {
					if !errors.Is(err, want) {
						t.Errorf("New() error = %v, want it to match %v", err, want)
					}
				}
				for _, text := range tt.wantText(l) {
					if err != nil && !strings.Contains(err.Error(), text) {
						t.Errorf("New() error %q does not contain %q", err, text)
					}
				}
				if n := len(srv.ShutdownCalls()); n != 1 {
					t.Errorf("Shutdown called %d times, want 1", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })

			if got := indices(s.Devices()); !slices.Equal(got, tt.want) {
				t.Errorf("metered GPUs = %v, want %v", got, tt.want)
			}
			sk := s.Skipped()
			if len(sk) != len(fake)-len(tt.want) {
				t.Errorf("Skipped() has %d entries, want %d", len(sk), len(fake)-len(tt.want))
			}
			for _, k := range sk {
				if !errors.Is(k.Reason, source.ErrNotVisible) {
					t.Errorf("Skipped GPU %d: reason %v, want source.ErrNotVisible", k.Device.Index, k.Reason)
				}
				if k.Device.ID != l.ids[k.Device.Index] {
					t.Errorf("Skipped GPU %d: ID %q, want %q", k.Device.Index, k.Device.ID, l.ids[k.Device.Index])
				}
			}
			if got := notes(); len(got) != tt.wantNotes {
				t.Errorf("otel.Handle got %d errors %v, want %d", len(got), got, tt.wantNotes)
			}
		})
	}
}

func cuda(v string) func(layout) map[string]string {
	return func(layout) map[string]string { return map[string]string{"CUDA_VISIBLE_DEVICES": v} }
}

func nvidia(v string) func(layout) map[string]string {
	return func(layout) map[string]string { return map[string]string{"NVIDIA_VISIBLE_DEVICES": v} }
}

// FuzzCUDAVisibleDevices reads arbitrary CUDA_VISIBLE_DEVICES values on the
// fake DGX H100: New never panics, reads a value the same way twice, and
// meters only GPUs that some entry names, by index (read like strtoul), by
// UUID prefix, or through a MIG UUID of the board.
func FuzzCUDAVisibleDevices(f *testing.F) {
	for _, seed := range []string{"", "0", "2,5", "5,2,5", "0,9,0", "1gpu2,2ampere", "+4", "-1", "1,,2",
		"GPU-", "GPU-0,1", "MIG-", "MIG-GPU-x/1/0", " 3 , 1", "18446744073709551616", "0,GPU-1"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		captureErrors(t)
		srv, fake := fakeH100(t, steady)
		migs := withMIG(t, fake[6], 2)
		read := func() []int {
			s, err := nvmlsource.New(testOpts(srv, nvmlsource.WithEnv(map[string]string{"CUDA_VISIBLE_DEVICES": v}))...)
			if err != nil {
				if !errors.Is(err, source.ErrNoDevices) {
					t.Fatalf("New() = %v, want success or ErrNoDevices", err)
				}
				return nil
			}
			defer s.Close()
			return indices(s.Devices())
		}
		got := read()
		if again := read(); !slices.Equal(got, again) {
			t.Fatalf("CUDA_VISIBLE_DEVICES=%q metered %v, then %v", v, got, again)
		}
		entries := strings.Split(v, ",")
		for _, i := range got {
			named := slices.ContainsFunc(entries, func(e string) bool {
				e = strings.ToLower(strings.TrimSpace(e))
				uuid := strings.ToLower(fake[i].UUID)
				if e != "" && (strings.HasPrefix(uuid, e) || strings.Contains(e, uuid)) {
					return true
				}
				if i == 6 && strings.HasPrefix(e, "mig-") && slices.ContainsFunc(migs, func(m string) bool {
					return strings.HasPrefix(strings.ToLower(m), e)
				}) {
					return true
				}
				// An index: a sign, then digits whose value is i; "-" only
				// before a zero.
				neg := false
				if e != "" && (e[0] == '+' || e[0] == '-') {
					neg, e = e[0] == '-', e[1:]
				}
				end := 0
				for end < len(e) && e[end] >= '0' && e[end] <= '9' {
					end++
				}
				n, err := strconv.ParseUint(e[:end], 10, 64)
				return err == nil && n == uint64(i) && (!neg || n == 0)
			})
			if !named {
				t.Errorf("CUDA_VISIBLE_DEVICES=%q meters GPU %d, which no entry names", v, i)
			}
		}
	})
}
