package otelenergy

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/ledger"
)

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHungSamplerHoldsBoundedRequests starts and ends 200,000 requests
// while the sampler hangs in a device read. The ledger may hold at most
// its 65,536 tracked requests: the memory they retain stops growing at
// that limit, every request beyond it is refused at once and counted in
// DroppedRequests and reports no energy, and once the read returns the
// sampler resumes with no panic, and Shutdown leaves no goroutine behind.
func TestHungSamplerHoldsBoundedRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 200,000 requests")
	}
	release := make(chan struct{})
	hung := make(chan struct{})
	var reads atomic.Uint64
	src, err := NewFuncSource([]Device{{ID: "d"}}, func(int) (uint64, error) {
		n := reads.Add(1)
		if n == 2 {
			close(hung)
			<-release
		}
		return n * 1000, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(src, WithInterval(10*time.Millisecond), WithMeterProvider(mpNoop()))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	<-hung
	ctx := context.Background()
	const n = 200_000
	start := func(k int) (withEnergy int) {
		for range k {
			if m.StartRequest(ctx).End().HasEnergy {
				withEnergy++
			}
		}
		return withEnergy
	}
	base := heapInUse()
	e1 := start(ledger.DefaultMaxActive)
	atLimit := heapInUse()
	e2 := start(n - ledger.DefaultMaxActive)
	after := heapInUse()
	perReq := float64(atLimit-base) / ledger.DefaultMaxActive
	t.Logf("retained %d B for the first %d requests (%.0f B each), %d B more for the next %d",
		atLimit-base, ledger.DefaultMaxActive, perReq, int64(after)-int64(atLimit), n-ledger.DefaultMaxActive)
	// The next 134,464 requests must retain nothing: allow 1 MiB of noise,
	// a few bytes per request where each would hold hundreds.
	if grew := int64(after) - int64(atLimit); grew > 1<<20 {
		t.Errorf("the heap grew by %d B over %d requests refused by a full ledger", grew, n-ledger.DefaultMaxActive)
	}
	if e1 != ledger.DefaultMaxActive {
		t.Errorf("%d of the first %d requests report energy, want all", e1, ledger.DefaultMaxActive)
	}
	if e2 != 0 {
		t.Errorf("%d requests refused by a full ledger report energy", e2)
	}
	if got, want := m.Stats().DroppedRequests, uint64(n-ledger.DefaultMaxActive); got != want {
		t.Errorf("DroppedRequests = %d while the sampler hangs, want %d", got, want)
	}
	close(release)
	// The sampler adopts what the ledger admitted and goes on.
	deadline := time.Now().Add(10 * time.Second)
	for reads.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if reads.Load() < 5 {
		t.Fatal("the sampler did not resume after its read returned")
	}
	if got, want := m.Stats().DroppedRequests, uint64(n-ledger.DefaultMaxActive); got != want {
		t.Errorf("DroppedRequests = %d after the sampler resumed, want %d", got, want)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
