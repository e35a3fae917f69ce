//go:build cgo && linux

package nvmlsource_test

import (
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
)

// TestProcessReaderGPMRetry: a GpmQueryDeviceSupport that fails (the
// driver busy) is no answer: the reader weighs by slices meanwhile and
// asks again, and once GPM answers, weighs by activity. A board that
// answers "not supported" is not asked again.
func TestProcessReaderGPMRetry(t *testing.T) {
	srv, devs := fakeH100(t, steady)
	d := devs[0]
	var mu sync.Mutex
	queries, fail := 0, true
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		queries++
		if fail {
			return nvml.GpmSupport{}, nvml.ERROR_UNKNOWN
		}
		return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS
	}
	migSlots(d, migInstance("MIG-a", 1, 7, listing(30)), migInstance("MIG-b", 3, 9, listing(31)))
	busy := map[nvml.GpmSample]int{}
	srv.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		return &mock.GpmSample{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}, nvml.SUCCESS
	}
	d.GpmMigSampleGetFunc = func(id int, smp nvml.GpmSample) nvml.Return {
		mu.Lock()
		defer mu.Unlock()
		busy[smp] = id
		return nvml.SUCCESS
	}
	srv.GpmMetricsGetFunc = func(mg *nvml.GpmMetricsGetType) nvml.Return {
		mu.Lock()
		defer mu.Unlock()
		mg.Metrics[0].Value = map[int]float64{7: 90, 9: 10}[busy[mg.Sample2]]
		return nvml.SUCCESS
	}
	s := newSource(t, srv, nvmlsource.WithDevices("0"))
	r := s.NewProcessReader()
	var b nvmlsource.BoardProcesses
	for range 5 {
		if err := r.Read(0, &b); err != nil {
			t.Fatal(err)
		}
	}
	if b.Processes[0].Weight != 1_000_000 || b.Processes[1].Weight != 3_000_000 {
		t.Fatalf("while GPM fails: %+v, want weights by slices", b.Processes)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	for range 40 {
		if err := r.Read(0, &b); err != nil {
			t.Fatal(err)
		}
	}
	if b.Processes[0].Weight != 900_000 || b.Processes[1].Weight != 300_000 {
		t.Fatalf("after GPM answered: %+v, want weights by slices × activity", b.Processes)
	}
	mu.Lock()
	defer mu.Unlock()
	if queries != 2 {
		t.Fatalf("%d support queries, want 2: the failed one and its one retry", queries)
	}
}
