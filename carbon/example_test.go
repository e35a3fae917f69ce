package carbon_test

import (
	"fmt"

	"github.com/otelenergy/otelenergy/carbon"
)

// One 100 ms counter interval of 70 J, split by the ledger among three
// requests with 4 J unattributed, converted at 436 g/kWh and a PUE of
// 1.135: the parts add up to the interval's emissions, rounded once.
func ExampleFactor_Operational() {
	mg, _ := carbon.ParseGramsPerKWh("436")
	pue, _ := carbon.ParsePUE("1.135")
	f, _ := carbon.NewFactor(mg, pue)

	shares := []uint64{30_000, 25_000, 11_000} // mJ
	out := make([]uint64, len(shares))
	unattributed := f.Operational(shares, 4_000, out)

	fmt.Println("requests µg:", out)
	fmt.Println("unattributed µg:", unattributed)
	fmt.Println("interval µg:", f.Of(70_000), "=", out[0]+out[1]+out[2]+unattributed)
	fmt.Println("first request mg:", carbon.Milligrams(out[0]))
	// Output:
	// requests µg: [4124 3436 1512]
	// unattributed µg: 550
	// interval µg: 9622 = 9622
	// first request mg: 4
}

// Embodied emissions of 12.5 g per device-hour follow device time: over a
// 100 ms interval, a request alone for 60 ms and sharing 20 ms with
// another, 20 ms idle.
func ExampleEmbodied_Split() {
	ug, _ := carbon.ParseGramsPerHour("12.5")
	e := carbon.Embodied(ug)
	const ms = 1_000_000
	out := make([]uint64, 2)
	idle := e.Split([]uint64{70 * ms, 10 * ms}, 20*ms, out)
	fmt.Println(out, idle, e.Of(100*ms))
	// Output:
	// [243 35] 69 347
}
