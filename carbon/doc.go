// Package carbon turns metered energy into emissions: grid carbon
// intensity from a provider or a static figure, a facility's PUE, and
// embodied emissions per device-hour, converted exactly, interval by
// interval, as the ledger (package ledger) splits energy among requests.
//
// A [Poller] asks a [Provider] (Electricity Maps, WattTime, the GB Carbon
// Intensity API, or a [Static] figure) for the intensity in a goroutine of its own;
// a [Model] holds it with the PUE and embodied emissions, notes the reading
// at every sampler read and converts each interval the ledger splits.
//
// It depends on the standard library and the OpenTelemetry API only
// (otel.Handle, for the poller's goroutine), and knows nothing of the
// Monitor: docs/carbon.md says where the Monitor, the proxy and the agent
// call it.
//
// # The formula
//
// The Software Carbon Intensity (ISO/IEC 21031) of a request is
// (E × I + M) per R: E its energy, times the PUE; I the grid's intensity
// while it ran; M its share of the device's embodied emissions. Here E is
// the ledger's integer mJ, I an integer mg CO2e per kWh, the PUE an
// integer in parts per million and M an integer µg per device-hour, so
// that every figure is an exact rational before it is rounded once.
//
// # Units
//
// Emissions are integer µg CO2e. A request's share of one 100 ms counter
// interval is typically a few to a few hundred µg (1 J at 400 g/kWh is
// 111 µg), so whole mg per interval would round most shares to nothing;
// [Milligrams] rounds a request's µg total once, for the
// Energy-Co2e-Milligrams trailer.
//
// # Guarantees
//
//   - Conservation: for every interval, Σ request µg + unattributed µg =
//     round(interval mJ × intensity × PUE / 3.6e12), exactly
//     ([Factor.Operational]); likewise for embodied emissions by device
//     time ([Embodied.Split]). Each figure is within 1 µg of its exact
//     value. FuzzOperational and FuzzEmbodied check them against
//     math/big.
//   - One intensity per interval: the [Model] gives the reading in force
//     at an interval's end, as noted ([Model.Note]) when the sampler read
//     it, so a request spanning a change integrates both values, interval
//     by interval, and a figure never changes when computed again (a
//     change is never stamped at or before an instant already noted). An
//     interval that ended before the oldest change the model keeps gets
//     the oldest kept, flagged ([IntervalResult].Known false).
//   - The request path reads the intensity with one atomic load
//     ([Poller.Current]): no lock, no allocation, never a wait for a
//     provider. BenchmarkCurrent measures it against a bare atomic load.
//   - A provider's failure never blocks a request: the last figure stays
//     in force up to the staleness bound ([WithStaleAfter]: by its last
//     answer, on a monotonic clock, or by the end of the period it
//     describes, whichever is older), then the
//     fallback ([WithFallback]) or none, said once through otel.Handle.
//     Every failure wraps an exported sentinel ([ErrRateLimited],
//     [ErrServer], [ErrTimeout], [ErrMalformed], [ErrUnknownZone],
//     [ErrUnauthorized], [ErrUnavailable]).
//   - Tokens and passwords are [Secret]s, read only from an environment
//     variable or a file; they print as "[redacted]" and no error carries
//     them.
package carbon
