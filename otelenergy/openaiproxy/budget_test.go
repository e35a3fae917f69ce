package openaiproxy_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// TestBudgetConcurrentSafe takes and gives from many goroutines: what is
// held at once never passes the bound, and all of it comes back.
func TestBudgetConcurrentSafe(t *testing.T) {
	b := openaiproxy.NewBudget(1000)
	var held atomic.Int64
	var over atomic.Bool
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				n := int64(1 + (g*31+i)%300)
				if b.Take(n) {
					if held.Add(n) > 1000 {
						over.Store(true)
					}
					held.Add(-n)
					b.Give(n)
				}
			}
		}()
	}
	wg.Wait()
	if over.Load() {
		t.Fatal("more than the bound was held at once")
	}
	if !b.Take(1000) {
		t.Fatal("the whole bound is not free once everything was given back")
	}
}
