// Command accplot draws the accuracy of otelenergy's energy attribution as
// cumulative distributions of the per-request error, one line per
// scenario: the final figure on the left, End()'s estimate on the right.
//
// It reads the tab-separated errors that BenchmarkAttribution writes when
// OTELENERGY_ACC_OUT names a file (scenario, period in ms, final %,
// estimate %). Without -in it runs that benchmark itself, from the
// repository root given by -repo, and then draws:
//
//	cd tools/accplot && GOWORK=off go run . -out ../../docs/attribution-cdf.png
//
// With -agent it draws the node agent's per-process errors instead, as
// BenchmarkAgentSplit writes them to OTELENERGY_AGENT_ACC_OUT (scenario,
// error %), running that benchmark when -in is empty; -before adds a panel
// of errors from an earlier split for comparison:
//
//	cd tools/accplot && GOWORK=off go run . -agent -max 40 -out ../../docs/agent-split-cdf.png
//
// It is a module of its own so that the library never depends on the
// plotting packages.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
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

// defaultScenarios are the scenarios drawn unless -scenarios says
// otherwise: the three with targets, then the production traces and the
// variants that show where the ledger is weak.
const defaultScenarios = "streaming,chunks16,endonly30,endonly-all,prod-conversation/endonly30,prod-conversation/endonly-all," +
	"prod-code/streaming,prod-code/chunks16,prod-code/endonly-all,prod-long-prompts/streaming,prod-concurrent256/streaming,prod-reasoning/endonly30," +
	"prod-burstgpt/streaming,prod-burstgpt/endonly30,heldout-busy-from-start,prod-shared-prefix/streaming," +
	"prod-h100/streaming,prod-h100-4hz/streaming,prod-h100-4hz/endonly30"

func main() {
	in := flag.String("in", "", "errors written by BenchmarkAttribution (OTELENERGY_ACC_OUT); empty runs the benchmark")
	out := flag.String("out", "attribution-cdf.png", "the PNG to write")
	repo := flag.String("repo", "../..", "the otelenergy repository root, where the benchmark runs when -in is empty")
	scen := flag.String("scenarios", defaultScenarios, "comma-separated scenarios to draw, in legend order")
	maxErr := flag.Float64("max", 20, "the largest absolute error drawn, in %")
	agentMode := flag.Bool("agent", false, "draw the node agent's per-process errors (BenchmarkAgentSplit) instead")
	before := flag.String("before", "", "with -agent: errors of an earlier split, drawn in a second panel")
	beforeTitle := flag.String("before-title", "before: SM shares, samples by arrival", "with -before: the second panel's title")
	flag.Parse()
	var err error
	if *agentMode {
		err = runAgent(*in, *before, *beforeTitle, *out, *repo, *maxErr)
	} else {
		err = run(*in, *out, *repo, strings.Split(*scen, ","), *maxErr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "accplot:", err)
		os.Exit(1)
	}
}

func run(in, out, repo string, scenarios []string, maxErr float64) error {
	if in == "" {
		tmp, err := os.CreateTemp("", "accplot-*.tsv")
		if err != nil {
			return err
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		if err := runBenchmark(repo, tmp.Name()); err != nil {
			return err
		}
		in = tmp.Name()
	}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	recs, err := parse(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	img, err := drawCDFs(recs, scenarios, maxErr)
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

// runBenchmark runs BenchmarkAttribution once in repo, writing the errors
// to path.
func runBenchmark(repo, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkAttribution$", "-benchtime", "1x", "./otelenergy/")
	cmd.Dir = repo
	// The repository runs in its own workspace, not this module's.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOWORK=") })
	cmd.Env = append(env, "OTELENERGY_ACC_OUT="+abs)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running BenchmarkAttribution in %s: %w", repo, err)
	}
	return nil
}

// record is one request's errors, in %, signed.
type record struct {
	scenario        string
	periodMS        int
	final, estimate float64
}

// errBadLine reports a line parse cannot read.
var errBadLine = errors.New("bad line")

// parse reads BenchmarkAttribution's tab-separated errors, header first.
func parse(r io.Reader) ([]record, error) {
	var recs []record
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 && strings.HasPrefix(line, "scenario\t") || line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("%w %d: %d fields, want 4", errBadLine, n, len(f))
		}
		p, err1 := strconv.Atoi(f[1])
		fin, err2 := strconv.ParseFloat(f[2], 64)
		est, err3 := strconv.ParseFloat(f[3], 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%w %d: %w", errBadLine, n, err)
		}
		recs = append(recs, record{f[0], p, fin, est})
	}
	return recs, sc.Err()
}

// cdf returns the empirical distribution of |xs|: points (x, fraction of
// values at or below x), clipped at maxX.
func cdf(xs []float64, maxX float64) plotter.XYs {
	a := make([]float64, len(xs))
	for i, x := range xs {
		a[i] = math.Abs(x)
	}
	slices.Sort(a)
	pts := plotter.XYs{{X: 0, Y: 0}}
	for i, x := range a {
		if x > maxX {
			pts = append(pts, plotter.XY{X: maxX, Y: float64(i) / float64(len(a))})
			return pts
		}
		pts = append(pts, plotter.XY{X: x, Y: float64(i) / float64(len(a))}, plotter.XY{X: x, Y: float64(i+1) / float64(len(a))})
	}
	return append(pts, plotter.XY{X: maxX, Y: 1})
}

// ticks returns labelled ticks from lo to hi every step.
func ticks(lo, hi, step float64, format string) plot.ConstantTicks {
	var t plot.ConstantTicks
	for i := 0; ; i++ {
		v := lo + float64(i)*step
		if v > hi+step/1e6 {
			return t
		}
		t = append(t, plot.Tick{Value: v, Label: fmt.Sprintf(format, v)})
	}
}

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	color.RGBA{0xbc, 0xbd, 0x22, 0xff}, color.RGBA{0x00, 0x00, 0x00, 0xff}, color.RGBA{0x00, 0x5f, 0x5f, 0xff},
}

// drawCDFs draws the two panels, final and estimate, side by side.
func drawCDFs(recs []record, scenarios []string, maxErr float64) (*vgimg.Canvas, error) {
	by := map[string][]record{}
	for _, r := range recs {
		by[r.scenario] = append(by[r.scenario], r)
	}
	var plots []*plot.Plot
	for _, panel := range []struct {
		title string
		get   func(record) float64
	}{
		{"final figure (span, histogram)", func(r record) float64 { return r.final }},
		{"End() estimate (returned to the client)", func(r record) float64 { return r.estimate }},
	} {
		p := plot.New()
		p.Title.Text = panel.title
		p.X.Label.Text = "|error| against ground truth, %"
		p.Y.Label.Text = "fraction of requests"
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, maxErr, 0, 1
		p.Add(plotter.NewGrid())
		p.X.Tick.Marker = ticks(0, maxErr, 2, "%g")
		p.Y.Tick.Marker = ticks(0, 1, 0.1, "%.1f")
		// The 99th percentile: where each line crosses it is its p99.
		p99, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0.99}, {X: maxErr, Y: 0.99}})
		if err != nil {
			return nil, err
		}
		p99.LineStyle.Color = color.Gray{Y: 0x60}
		p99.LineStyle.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		p.Add(p99)
		p.Legend.Add("99% of requests", p99)
		p.Legend.Top, p.Legend.Left = false, false
		p.Legend.YOffs = vg.Points(60)
		drawn := 0
		for i, s := range scenarios {
			rs := by[s]
			if len(rs) == 0 {
				continue
			}
			xs := make([]float64, len(rs))
			for k, r := range rs {
				xs[k] = panel.get(r)
			}
			l, err := plotter.NewLine(cdf(xs, maxErr))
			if err != nil {
				return nil, err
			}
			l.LineStyle.Color = palette[i%len(palette)]
			l.LineStyle.Width = vg.Points(1.6)
			if i >= 3 {
				l.LineStyle.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			p.Add(l)
			p.Legend.Add(fmt.Sprintf("%s (n=%d)", s, len(rs)), l)
			drawn++
		}
		if drawn == 0 {
			return nil, fmt.Errorf("none of the scenarios %v is in the data", scenarios)
		}
		plots = append(plots, p)
	}
	img := vgimg.New(vg.Points(1100), vg.Points(480))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Points(20), PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	return img, nil
}
