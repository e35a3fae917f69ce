package main

import (
	"bufio"
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestDemoPrintsRequestEnergy runs the demo as `go run ./example/app` does,
// without NVML, a collector or OTEL_* variables, and checks what it prints.
func TestDemoPrintsRequestEnergy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for 4 s")
	}
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
	err = run(ctx, options{addr: "127.0.0.1:0", meter: true, load: true, concurrency: 4, gpus: 2, simulate: true, tokenRate: 80, summary: time.Second, swapEvery: 2 * time.Second})
	os.Stdout = stdout
	w.Close()
	out := <-lines
	if err != nil {
		t.Fatalf("run: %v\n%v", err, out)
	}
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
	}
	if requests < 5 || summaries < 1 || swaps < 1 {
		t.Fatalf("%d request lines with energy, %d summaries, %d swaps; want ≥5, ≥1, ≥1:\n%v", requests, summaries, swaps, out)
	}
}
