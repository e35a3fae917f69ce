package simgpu

import "time"

// Board profiles: the physics of real boards serving a small model, as far
// as public sources give it. Each returns a Config whose unset fields
// (Devices, Seed, Now, the counter's phase and range) take their defaults,
// so that a caller sets what it needs on the value. A figure a profile
// cannot source is named as an assumption in its doc.
//
// What the profiles share comes from one public run: Qwen3-8B served by
// vLLM on one H100, 200 requests at about 4 per second, the board's power
// read by nvidia-smi at 4 Hz (docs/attribution.md, "A real H100's power").
// It showed that a busy board draws a plateau, not power that follows its
// batch: 122.7 W idle, flat to ±0.1 W; 204–207 W within 250 ms of the
// first request; 380–400 W within 2 s while only a few requests ran;
// 390–465 W from 1 to about 30 concurrent requests, only loosely related
// to the batch; and 290 W within 250 ms of the last request. Its
// inter-token latency was 7.3–8.3 ms and its time to first token 13–105 ms
// for prompts of 4–3,533 tokens. The other boards scale what depends on
// the hardware by its data sheet: decode by memory bandwidth (decode is
// memory-bound), prefill by dense 16-bit compute (prefill is
// compute-bound), and the power above idle by the board's power limit.

// H100 returns one H100 SXM serving an 8B model under vLLM, from the
// public run above:
//   - IdleWatts 122.7;
//   - decode power above idle along a plateau: 270 W with one request
//     decoding, 335 W with 32 (392.7–457.7 W on the board);
//   - the power state: a first request draws 30% of its power (RampFloor
//     0.3: 122.7 + 0.3 × 270 ≈ 204 W), rising with a time constant of
//     750 ms (95% of the plateau, about 380 W, after 2 s);
//   - the tail: 167.3 W above idle just after the last request ends
//     (290 W), decaying with a time constant of 1 s (the decay's time
//     constant is an assumption: the run's 4 Hz readings show only its
//     first step);
//   - a decode step of 7.7 ms (the median inter-token latency), and a
//     prefill of 12 ms + 26 µs per uncached prompt token (13–105 ms for
//     prompts of 4–3,533 tokens), spread ±20%, at 250 W above idle alone
//     (an assumption: compute-bound prefill draws more than decode, and
//     prefills of tens of ms disappear into nvidia-smi's one-second
//     average);
//   - 5 mJ per output token beside the batch's power (an assumption);
//   - a counter that steps every 100 ms (99–101 ms on H100, Yang et al.,
//     "Part-time Power Measurements", SC'24, arXiv:2312.02741) and a
//     power bound of 700 W, the board's limit.
func H100() Config {
	return Config{
		IdleWatts: 122.7,
		DecodeCurve: []BatchPower{
			{Batch: 1, Watts: 270}, {Batch: 4, Watts: 285}, {Batch: 8, Watts: 295},
			{Batch: 16, Watts: 310}, {Batch: 32, Watts: 335}, {Batch: 64, Watts: 345},
		},
		JoulesPerToken:       0.005,
		DecodeStep:           7700 * time.Microsecond,
		PrefillWatts:         250,
		PrefillBase:          12 * time.Millisecond,
		PrefillPerInputToken: 26 * time.Microsecond,
		PrefillSpread:        0.2,
		RampTime:             750 * time.Millisecond,
		RampFloor:            0.3,
		TailWatts:            167.3,
		TailTime:             time.Second,
		UpdatePeriod:         100 * time.Millisecond,
		MaxWatts:             700,
	}
}

// A100 returns one A100 SXM4 80 GB serving the same model: [H100] with
// decode 1.68 times slower (2.0 TB/s of HBM2e against 3.35 TB/s), prefill
// 3.17 times slower (312 against 989 dense BF16 TFLOPS), and the power
// above idle scaled by the power limit, 400 W against 700 W (NVIDIA A100
// and H100 data sheets), and a counter that steps every 102 ms (101–104 ms
// on A100, Yang et al., SC'24). Its idle power, 75 W with a model loaded,
// and its ramp and tail, taken as the H100's, are assumptions.
func A100() Config {
	c := H100()
	c.IdleWatts = 75
	c.DecodeCurve = scaleCurve(c.DecodeCurve, 400.0/700)
	c.PrefillWatts *= 400.0 / 700
	c.TailWatts *= 400.0 / 700
	c.DecodeStep = 12900 * time.Microsecond
	c.PrefillBase = 20 * time.Millisecond
	c.PrefillPerInputToken = 82 * time.Microsecond
	c.UpdatePeriod = 102 * time.Millisecond
	c.MaxWatts = 400
	return c
}

// H200 returns one H200 SXM 141 GB serving the same model, a board whose
// decode power follows its batch: 137 W on the board decoding one request
// to 300 W at a batch of 32 (small-batch decode on H200, 137–300 W,
// docs/attribution.md), 100 W idle (an H100 SXM with a CUDA context idles
// at 90–130 W, arXiv:2605.23918), decode 1.43 times faster than the
// H100's (4.8 TB/s of HBM3e against 3.35), the H100's compute for
// prefill at 450 W above idle, its ramp and tail (assumptions), and the
// H100's counter period.
func H200() Config {
	c := H100()
	c.IdleWatts = 100
	c.DecodeCurve = []BatchPower{
		{Batch: 1, Watts: 37}, {Batch: 8, Watts: 130}, {Batch: 32, Watts: 200},
		{Batch: 128, Watts: 280}, {Batch: 256, Watts: 320},
	}
	c.DecodeStep = 5400 * time.Microsecond
	c.PrefillWatts = 450
	c.TailWatts = 100
	return c
}

// MI300X returns one AMD Instinct MI300X serving the same model: [H100]
// with decode 1.58 times faster (5.3 TB/s of HBM3 against 3.35), prefill
// 1.32 times faster (1,307 against 989 dense FP16 TFLOPS), and the power
// above idle scaled by the power limit, 750 W against 700 W (AMD's
// MI300X data sheet). Its idle power (140 W), its ramp and tail (the
// H100's), and its counter's period are assumptions: AMD SMI stamps each
// update of its energy accumulator, and the profile takes it as updating
// every millisecond, faster than any read, so that every read sees a
// step.
func MI300X() Config {
	c := H100()
	c.IdleWatts = 140
	c.DecodeCurve = scaleCurve(c.DecodeCurve, 750.0/700)
	c.PrefillWatts *= 750.0 / 700
	c.TailWatts *= 750.0 / 700
	c.DecodeStep = 4900 * time.Microsecond
	c.PrefillBase = 9 * time.Millisecond
	c.PrefillPerInputToken = 20 * time.Microsecond
	c.UpdatePeriod = time.Millisecond
	c.MaxWatts = 750
	return c
}

// scaleCurve returns curve with every power scaled by f.
func scaleCurve(curve []BatchPower, f float64) []BatchPower {
	out := make([]BatchPower, len(curve))
	for i, p := range curve {
		out[i] = BatchPower{Batch: p.Batch, Watts: p.Watts * f}
	}
	return out
}
