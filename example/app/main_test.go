package main

import (
	"bufio"
	"context"
	"errors"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/carbon"
)

// TestDemoPrintsRequestEnergy runs the demo as `go run ./example/app` does,
// without NVML, a collector or OTEL_* variables, and checks what it prints.
func TestDemoPrintsRequestEnergy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for 4 s")
	}
	out := runDemo(t, options{addr: "127.0.0.1:0", meter: true, load: true, concurrency: 4, gpus: 2, simulate: true, tokenRate: 80, summary: time.Second, swapEvery: 2 * time.Second})
	energy := regexp.MustCompile(`^request .*energy\.millijoules=(\d+)`)
	var requests, summaries, swaps int
	for _, l := range out {
		if m := energy.FindStringSubmatch(l); m != nil {
			if mj, _ := strconv.Atoi(m[1]); mj > 0 {
				requests++
			}
		}
		if regexp.MustCompile(`^summary .*J/token\(live\)=\d`).MatchString(l) {
			summaries++
		}
		if regexp.MustCompile(`^hot swap: model=`).MatchString(l) {
			swaps++
		}
		if strings.Contains(l, "co2e") {
			t.Errorf("emissions printed with carbon off: %s", l)
		}
	}
	if requests < 5 || summaries < 1 || swaps < 1 {
		t.Fatalf("%d request lines with energy, %d summaries, %d swaps; want ≥5, ≥1, ≥1:\n%v", requests, summaries, swaps, out)
	}
}

// TestDemoCarbon runs the demo with -carbon-intensity 436 -pue 1.135: each
// request line's emissions are its energy × 436 g/kWh × 1.135, to the µg
// each counter interval's rounding may move them.
func TestDemoCarbon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for 4 s")
	}
	out := runDemo(t, options{addr: "127.0.0.1:0", meter: true, load: true, concurrency: 4, gpus: 2, simulate: true, tokenRate: 80, summary: time.Second,
		intensity: "436", pue: "1.135"})
	line := regexp.MustCompile(`^request .*energy\.millijoules=(\d+) energy\.co2e\.milligrams=([0-9.]+) .*duration=(\S+)`)
	var n int
	for _, l := range out {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		mj, _ := strconv.ParseFloat(m[1], 64)
		mg, _ := strconv.ParseFloat(m[2], 64)
		d, _ := time.ParseDuration(m[3])
		want := mj * 436 * 1.135 / 3.6e6
		// One µg of rounding per counter interval (at most one per 17 ms
		// read), and the printed three decimals.
		tol := 0.001*(d.Seconds()/0.017+2) + 0.0005
		if math.Abs(mg-want) > tol {
			t.Errorf("%s: %.3f mg, want %.3f ± %.3f from the energy", l, mg, want, tol)
		}
		n++
	}
	if n < 5 {
		t.Fatalf("%d request lines with emissions, want ≥5:\n%v", n, out)
	}
	if _, err := carbonModel(options{pue: "1.2"}); !errors.Is(err, carbon.ErrInvalidConfig) {
		t.Errorf("-pue without -carbon-intensity: %v, want carbon.ErrInvalidConfig", err)
	}
	if _, err := carbonModel(options{intensity: "-3"}); !errors.Is(err, carbon.ErrInvalidConfig) {
		t.Errorf("-carbon-intensity -3: %v, want carbon.ErrInvalidConfig", err)
	}
}

// runDemo runs the demo for 4 s with o and returns what it printed.
func runDemo(t *testing.T, o options) []string {
	t.Helper()
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		t.Setenv(k, "")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	lines := make(chan []string)
	go func() {
		var all []string
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			all = append(all, sc.Text())
		}
		lines <- all
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	err = run(ctx, o)
	os.Stdout = stdout
	w.Close()
	out := <-lines
	if err != nil {
		t.Fatalf("run: %v\n%v", err, out)
	}
	return out
}
