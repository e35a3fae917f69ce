package sim_test

import "testing"

// TestWallStepNewProcesses runs the agent over BenchmarkAgentSplit's node
// with the wall clock stepped 3 s back at 60 s, on the simulator's boot
// time, which moves with the step as /proc/stat's btime does. The jobs
// that start after the step are split as well as the others: read once,
// the boot time would put their start 3 s after the samples the new
// timeline stamps, and the agent would give those samples to their
// predecessor on the pid (the exited series), a p90 error of 100 %.
func TestWallStepNewProcesses(t *testing.T) {
	var sc splitScenario
	for _, s := range splitScenarios {
		if s.name == "held-wallstep" {
			sc = s
		}
	}
	f := runSplit(t, sc, 2)
	t.Logf("held-wallstep, seed 2: mean %.2f %%, p90 %.2f %%, unattributed %.3f %%", f.mean, f.p90, f.unattributed)
	if f.mean > 2 || f.p90 > 5 || f.violations != 0 {
		t.Fatalf("held-wallstep: mean %.2f %%, p90 %.2f %%, %d conservation violations; want at most 2 %% and 5 %%", f.mean, f.p90, f.violations)
	}
}
