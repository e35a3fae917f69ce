package e2e

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	agentDuration = 25 * time.Second
	agentNode     = "e2e-node"
)

// TestAgentEndToEnd runs the node agent in -simulate mode (eight boards,
// scripted processes that come and go, one MIG board, the host's CPU
// packages and DRAM) exporting OTLP through the Collector (Jaeger v2) into
// Prometheus 3, and checks in PromQL that at each export, per node,
// Σ otelenergy.process.energy + otelenergy.energy.idle +
// otelenergy.energy.unattributed = hw.energy. It checks the dashboard's
// agent panels on the three paths a node's metrics take: Prometheus 3
// (OTLP), a Prometheus 2 scraping the Collector's exporter, and a
// Prometheus 2 scraping a second agent's own exporter.
//
// OTLP carries no staleness markers, so a series that ended stays visible
// for Prometheus's lookback delta (5 minutes) after its last sample. The
// conservation query therefore runs 50 ms after the timestamp of an
// export with a lookback of 100 ms, far shorter than the 1 s export
// interval: it sees that export's points, whose timestamps differ by a
// millisecond or so from one instrument to the next, and no other.
func TestAgentEndToEnd(t *testing.T) {
	summarize(t)
	if testing.Short() {
		t.Skip("end-to-end test: builds Jaeger, Prometheus 3 and the agent and runs them")
	}
	ctx := budgetContext(t, buildTimeout+10*time.Minute)
	root, binDir := repoDirs(t)
	jaegerBin := filepath.Join(binDir, "jaeger")
	prom3Bin := filepath.Join(binDir, "prometheus3")
	agentBin := filepath.Join(binDir, "otelenergy-agent")
	buildAll(ctx, t, append(backendBuilds(root, jaegerBin, prom3Bin),
		// The agent's module replaces the library with the checkout.
		goBuild{"agent", filepath.Join(root, "cmd", "otelenergy-agent"), append(os.Environ(), "GOWORK=off"), []string{"-o", agentBin, "."}, nil},
	))

	p := freePorts(t, 10)
	ports := backendPorts{
		OTLPGRPC: p[0], OTLPHTTP: p[1], QueryHTTP: p[2], QueryGRPC: p[3],
		Health: p[4], HealthGRPC: p[5], Exporter: p[6], Prometheus: p[7],
		Prometheus3: p[8],
	}
	admin := fmt.Sprintf("127.0.0.1:%d", p[9])
	prom3 := fmt.Sprintf("http://127.0.0.1:%d", ports.Prometheus3)
	promBin, err := findPrometheus(ctx, binDir)
	if err != nil {
		fatalf(t, "prometheus: %v", err)
	}
	startPrometheus3(ctx, t, prom3Bin, ports)
	startJaeger(ctx, t, jaegerBin, ports)
	startPrometheus(ctx, t, promBin, ports)

	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "OTEL_") || strings.HasPrefix(kv, "OTELENERGY_")
	})
	env = append(env,
		fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", ports.OTLPHTTP),
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_METRIC_EXPORT_INTERVAL=1000",
		"OTEL_RESOURCE_ATTRIBUTES=service.instance.id="+agentNode+",host.name="+agentNode,
	)
	agentStart := time.Now()
	agent := startProcess(t, "agent", root, env, agentBin,
		"-simulate", "-admin-listen", admin, "-duration", agentDuration.String(), "-log-format", "json",
		"-carbon-intensity", carbonGPerKWh, "-pue", carbonPUE)
	direct := startDirectScrape(ctx, t, promBin, root, "otelenergy-agent-direct", env, agentBin,
		"-simulate", "-admin-listen", "", "-duration", agentDuration.String(), "-carbon-intensity", carbonGPerKWh, "-pue", carbonPUE)
	direct.prom.at = agentStart.Add(agentDuration - 3*time.Second)
	if err := poll(ctx, startTimeout, func() error { return httpOK(ctx, "http://"+admin+"/readyz") }); err != nil {
		fatalf(t, "agent not ready: %v", err)
	}
	if err := agent.wait(ctx, agentDuration+appExitSlack); err != nil {
		fatalf(t, "agent did not exit 0 by itself: %v", err)
	}
	// The dashboard's queries are evaluated just after the final export:
	// their one-minute rates then cover the run.
	evalAt := time.Now().Add(2 * time.Second)
	if err := direct.proc.wait(ctx, agentDuration+appExitSlack); err != nil {
		fatalf(t, "the directly scraped agent did not exit 0 by itself: %v", err)
	}
	if log := readFile(t, agent.stderr); !strings.Contains(log, "simulated GPUs") {
		errorf(t, "the agent's log does not say its GPUs are simulated:\n%s", lastBytes([]byte(log), 2000))
	}

	names := map[string]string{}
	err = poll(ctx, assertTimeout, func() error {
		all, err := promClient{base: prom3}.metricNames(ctx)
		if err != nil {
			return err
		}
		for _, want := range []string{"hw_energy", "otelenergy_process_energy", "otelenergy_energy_idle", "otelenergy_energy_unattributed"} {
			for _, n := range all {
				if strings.HasPrefix(n, want+"_") || n == want {
					names[want] = n
				}
			}
			if names[want] == "" {
				return fmt.Errorf("no metric named %s* among %d", want, len(all))
			}
		}
		return nil
	})
	if err != nil {
		fatal(t, err)
	}
	t.Logf("metric names in Prometheus 3: %v", names)

	// The export instants: the timestamps of one board's hw.energy
	// samples, until the agent's final export has arrived.
	var stamps []float64
	sel := fmt.Sprintf(`%s{instance=%q}`, names["hw_energy"], agentNode)
	err = poll(ctx, assertTimeout, func() error {
		var err error
		stamps, err = sampleTimes(ctx, prom3, sel, time.Now(), agentDuration+time.Minute)
		if err == nil && len(stamps) < int(agentDuration/time.Second)/2 {
			err = fmt.Errorf("%d exports so far", len(stamps))
		}
		return err
	})
	if err != nil {
		fatal(t, err)
	}

	t.Run("conservation per node at every export", func(t *testing.T) {
		q := fmt.Sprintf(`sum by (job, instance) (%[1]s) + sum by (job, instance) (%[2]s) + sum by (job, instance) (%[3]s) - sum by (job, instance) (%[4]s)`,
			names["otelenergy_process_energy"], names["otelenergy_energy_idle"], names["otelenergy_energy_unattributed"], names["hw_energy"])
		checked := 0
		for _, ts := range stamps {
			res, err := queryLookback(ctx, prom3, q, ts+0.05, "100ms")
			if err != nil {
				fatal(t, err)
			}
			if len(res) != 1 || res[0].Metric["instance"] != agentNode {
				fatalf(t, "at %.3f: %d results %v, want one for %s", ts, len(res), res, agentNode)
			}
			if d := res[0].value(); math.Abs(d) >= 0.0005 {
				errorf(t, "at %.3f: Σ process + idle + unattributed − hw.energy = %.6f J, want 0 to the millijoule", ts, d)
			}
			checked++
		}
		total, err := queryLookback(ctx, prom3, fmt.Sprintf(`sum(%s)`, sel), stamps[len(stamps)-1]+0.05, "100ms")
		if err != nil || len(total) != 1 || !(total[0].value() > 0) {
			fatalf(t, "hw.energy at the last export: %v %v", total, err)
		}
		t.Logf("conservation held at %d exports; the node's hw.energy at the last one: %.3f J", checked, total[0].value())
	})

	last := stamps[len(stamps)-1] + 0.05
	t.Run("processes, containers and pods", func(t *testing.T) {
		proc := names["otelenergy_process_energy"]
		for _, q := range []string{
			proc + `{k8s_pod_uid!="", container_id!="", process_executable_name="vllm"}`,
			proc + `{container_id!="", k8s_pod_uid="", process_executable_name="trainer"}`,
			proc + `{otelenergy_energy_shared="true", otelenergy_gpu_instance!=""}`,
		} {
			res, err := queryLookback(ctx, prom3, q, last, "100ms")
			if err != nil || len(res) == 0 {
				errorf(t, "%s at the last export: %d series, %v", q, len(res), err)
			}
		}
	})
	t.Run("the host's CPU packages and DRAM, split among the processes", func(t *testing.T) {
		for _, q := range []string{
			names["hw_energy"] + `{hw_type="cpu"}`,
			names["hw_energy"] + `{hw_type="memory"}`,
			names["otelenergy_process_energy"] + `{hw_type="cpu", process_executable_name="vllm"}`,
			names["otelenergy_process_energy"] + `{hw_type="memory", process_executable_name="trainer"}`,
		} {
			res, err := queryLookback(ctx, prom3, q, last, "100ms")
			if err != nil || len(res) == 0 {
				errorf(t, "%s at the last export: %d series, %v", q, len(res), err)
			}
		}
		// Every process series carries the process's start on the wall
		// clock, within the run.
		res, err := queryLookback(ctx, prom3, names["otelenergy_process_energy"]+`{process_creation_time!=""}`, last, "100ms")
		if err != nil || len(res) == 0 {
			fatalf(t, "no process series at the last export: %v", err)
		}
		for _, r := range res {
			at, err := time.Parse(time.RFC3339Nano, r.Metric["process_creation_time"])
			if err != nil || at.Before(agentStart.Add(-time.Minute)) || at.After(time.Now()) {
				errorf(t, "process_creation_time %q (%v): want the process's start, in this run", r.Metric["process_creation_time"], err)
			}
		}
	})
	t.Run("short-lived processes end and are kept in the exited series", func(t *testing.T) {
		// pid 10000, the first short job, ran from 15 to 17.5 s.
		first := names["otelenergy_process_energy"] + `{process_pid="10000"}`
		seen, err := sampleTimes(ctx, prom3, first, time.Unix(int64(last), 0), agentDuration+time.Minute)
		if err != nil || len(seen) == 0 {
			fatalf(t, "the first short job never had a series: %v", err)
		}
		if res, err := queryLookback(ctx, prom3, first, last, "100ms"); err != nil || len(res) != 0 {
			errorf(t, "the first short job's series is still exported at the end: %v %v", res, err)
		}
		exited := names["otelenergy_process_energy"] + `{otelenergy_process_exited="true"}`
		res, err := queryLookback(ctx, prom3, "sum("+exited+")", last, "100ms")
		if err != nil || len(res) != 1 || !(res[0].value() > 0) {
			errorf(t, "no exited energy at the end: %v %v", res, err)
		}
	})
	for _, s := range []dashboardSetup{
		{name: "Prometheus 3", prom: promClient{base: prom3, at: evalAt}, service: "otelenergy-agent"},
		{name: "Collector", prom: promClient{base: fmt.Sprintf("http://127.0.0.1:%d", ports.Prometheus), at: evalAt}, service: "otelenergy-agent"},
		{name: "direct scrape", prom: direct.prom, service: "otelenergy-agent-direct"},
	} {
		s.from, s.has = "agent", map[string]bool{"carbon on": true}
		t.Run("dashboard on "+s.name, func(t *testing.T) { checkDashboardOn(ctx, t, root, s) })
	}
	t.Run("the resource says the source is simulated", func(t *testing.T) {
		res, err := (promClient{base: prom3, at: time.Unix(int64(last), 0)}).query(ctx, `target_info{otelenergy_source="simulated"}`)
		if err != nil || len(res) == 0 {
			errorf(t, "no target_info with otelenergy_source=simulated: %v", err)
		}
	})
}

// queryLookback runs an instant query at unix time at with Prometheus 3's
// per-query lookback_delta.
func queryLookback(ctx context.Context, base, query string, at float64, lookback string) ([]promSample, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	q := url.Values{"query": {query}, "time": {strconv.FormatFloat(at, 'f', 3, 64)}, "lookback_delta": {lookback}}
	if err := getJSON(ctx, base+"/api/v1/query?"+q.Encode(), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", query, r.Error)
	}
	return r.Data.Result, nil
}

// sampleTimes returns the timestamps of the samples of the first series
// sel selects within span before at.
func sampleTimes(ctx context.Context, base, sel string, at time.Time, span time.Duration) ([]float64, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Values [][2]any `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	q := url.Values{
		"query": {fmt.Sprintf("%s[%ds]", sel, int(span.Seconds()))},
		"time":  {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)},
	}
	if err := getJSON(ctx, base+"/api/v1/query?"+q.Encode(), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", q.Get("query"), r.Error)
	}
	if len(r.Data.Result) == 0 {
		return nil, fmt.Errorf("%s: no series", sel)
	}
	var ts []float64
	for _, v := range r.Data.Result[0].Values {
		if f, ok := v[0].(float64); ok {
			ts = append(ts, f)
		}
	}
	return ts, nil
}
