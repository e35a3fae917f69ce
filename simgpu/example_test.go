package simgpu_test

import (
	"fmt"
	"time"

	"github.com/otelenergy/otelenergy/simgpu"
)

// One board at 100 W idle runs one request: a prefill at 300 W extra, then
// decode, alone in its batch at 200 W extra, and 100 tokens at once. The
// counter steps at 50 ms, 150 ms, 250 ms, ...
func Example() {
	clk := newFakeClock()
	g, err := simgpu.New(simgpu.Config{
		Phase:              50 * time.Millisecond,
		PrefillSpread:      -1, // no per-job randomness, for round numbers
		PrefillPowerSpread: -1,
		Now:                clk.Now,
	})
	if err != nil {
		panic(err)
	}
	readAt := func(ms float64) {
		at(clk, ms)
		v, _ := g.ReadEnergy(0)
		fmt.Printf("read at %3.0f ms: %d mJ\n", ms, v)
	}

	job := g.Begin(400)
	fmt.Println("prefill lasts", job.PrefillEnd().Sub(job.BeganAt()))
	readAt(40)
	readAt(50)
	readAt(120)
	clk.Set(job.PrefillEnd())
	job.Tokens(100) // 100 × 0.02 J
	readAt(250)
	at(clk, 300)
	job.End()
	readAt(350)

	fmt.Printf("job: %.0f mJ, nobody's: %.0f mJ, board: %d mJ\n",
		job.TrueEnergyMJ(), g.UnownedEnergyMJ(), g.TrueEnergyMJ(0))
	// Output:
	// prefill lasts 180ms
	// read at  40 ms: 1000000 mJ
	// read at  50 ms: 1020000 mJ
	// read at 120 ms: 1020000 mJ
	// read at 250 ms: 1095000 mJ
	// read at 350 ms: 1115000 mJ
	// job: 110000 mJ, nobody's: 5000 mJ, board: 115000 mJ
}
