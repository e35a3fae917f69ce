package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// agentRecord is one process's signed error, in %, in one scenario.
type agentRecord struct {
	scenario string
	err      float64
}

// parseAgent reads BenchmarkAgentSplit's tab-separated errors (scenario,
// error %), header first.
func parseAgent(r io.Reader) ([]agentRecord, error) {
	var recs []agentRecord
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 && strings.HasPrefix(line, "scenario\t") || line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 2 {
			return nil, fmt.Errorf("%w %d: %d fields, want 2", errBadLine, n, len(f))
		}
		e, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("%w %d: %w", errBadLine, n, err)
		}
		recs = append(recs, agentRecord{f[0], e})
	}
	return recs, sc.Err()
}

func readAgent(path string) ([]agentRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := parseAgent(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

// runAgentBenchmark runs BenchmarkAgentSplit once in the agent's module
// under repo, writing the errors to path.
func runAgentBenchmark(repo, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkAgentSplit$", "-benchtime", "1x", "./internal/sim/")
	cmd.Dir = filepath.Join(repo, "cmd", "otelenergy-agent")
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOWORK=") })
	cmd.Env = append(env, "OTELENERGY_AGENT_ACC_OUT="+abs)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running BenchmarkAgentSplit in %s: %w", cmd.Dir, err)
	}
	return nil
}

// runAgent draws the agent's per-process error distributions: one panel
// per file of errors, after then (when given) before.
func runAgent(in, before, beforeTitle, out, repo string, maxErr float64) error {
	if in == "" {
		tmp, err := os.CreateTemp("", "accplot-agent-*.tsv")
		if err != nil {
			return err
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		if err := runAgentBenchmark(repo, tmp.Name()); err != nil {
			return err
		}
		in = tmp.Name()
	}
	panels := []agentPanel{{title: "per-process error, this split"}}
	var err error
	if panels[0].recs, err = readAgent(in); err != nil {
		return err
	}
	if before != "" {
		p := agentPanel{title: beforeTitle}
		if p.recs, err = readAgent(before); err != nil {
			return err
		}
		panels = append(panels, p)
	}
	img, err := drawAgent(panels, maxErr)
	if err != nil {
		return err
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

type agentPanel struct {
	title string
	recs  []agentRecord
}

// drawAgent draws each panel's cumulative distributions of |error|, one
// line per scenario, in order of first appearance.
func drawAgent(panels []agentPanel, maxErr float64) (*vgimg.Canvas, error) {
	var plots []*plot.Plot
	for _, pn := range panels {
		var order []string
		by := map[string][]float64{}
		for _, r := range pn.recs {
			if _, ok := by[r.scenario]; !ok {
				order = append(order, r.scenario)
			}
			by[r.scenario] = append(by[r.scenario], r.err)
		}
		if len(order) == 0 {
			return nil, fmt.Errorf("panel %q: no data", pn.title)
		}
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "|error| of a process's energy against the truth, %"
		p.Y.Label.Text = "fraction of processes"
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, maxErr, 0, 1
		p.Add(plotter.NewGrid())
		p.X.Tick.Marker = ticks(0, maxErr, maxErr/10, "%g")
		p.Y.Tick.Marker = ticks(0, 1, 0.1, "%.1f")
		p90, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0.9}, {X: maxErr, Y: 0.9}})
		if err != nil {
			return nil, err
		}
		p90.LineStyle.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		p.Add(p90)
		p.Legend.Add("90% of processes", p90)
		p.Legend.Top, p.Legend.Left = false, false
		p.Legend.YOffs = vg.Points(40)
		for i, s := range order {
			l, err := plotter.NewLine(cdf(by[s], maxErr))
			if err != nil {
				return nil, err
			}
			l.LineStyle.Color = palette[i%len(palette)]
			l.LineStyle.Width = vg.Points(1.6)
			p.Add(l)
			p.Legend.Add(fmt.Sprintf("%s (n=%d)", s, len(by[s])), l)
		}
		plots = append(plots, p)
	}
	img := vgimg.New(vg.Points(float64(550*len(plots))), vg.Points(420))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Points(20), PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	return img, nil
}
