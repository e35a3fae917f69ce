package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
)

// TestDashboard checks the example dashboard against Grafana's own types
// (grafana-foundation-sdk), with no backend: it decodes strictly, every
// target is a Prometheus query whose PromQL parses, and the panels do not
// overlap. The end-to-end test runs the same queries against real data.
func TestDashboard(t *testing.T) {
	summarize(t)
	root, err := filepath.Abs("..")
	if err != nil {
		fatal(t, err)
	}
	d, queries, err := loadDashboard(dashboardPath(root))
	if err != nil {
		fatal(t, err)
	}
	for _, q := range queries {
		if _, err := parser.ParseExpr(grafanaVars.Replace(q.Expr)); err != nil {
			errorf(t, "panel %q target %s: PromQL does not parse: %v", q.Panel, q.RefID, err)
		}
	}
	checkLayout(t, d)

	// Panels the dashboard must keep; the e2e test checks that they show data.
	for _, want := range []string{
		"otelenergy_request_energy_joules_count",    // energy per request by model
		"gen_ai_server_request_duration_seconds",    // GenAI server metrics
		"gen_ai_server_time_to_first_token_seconds", //
		"gen_ai_server_time_per_output_token_seconds",
		"otelenergy_request_co2e_grams_sum",          // emissions per request, tenant, token
		"otelenergy_carbon_intensity_grams_per_kW_h", // the intensity in force
		"otelenergy_carbon_intensity_age_seconds",    // and its age
		"otelenergy_process_co2e_grams_total",        // the agent's per-process emissions
		"otelenergy_process_energy_joules_total",     // the agent's per-process energy
		"otelenergy_energy_idle_joules_total",        // its idle part
		"otelenergy_agent_idle_power_watts",          // and the idle power it learned
	} {
		if !slices.ContainsFunc(queries, func(q dashboardQuery) bool { return strings.Contains(q.Expr, want) }) {
			errorf(t, "no dashboard query reads %s", want)
		}
	}
	if !slices.ContainsFunc(queries, func(q dashboardQuery) bool {
		return strings.Contains(q.Expr, "by (gen_ai_request_model)") && strings.Contains(q.Expr, "otelenergy_request_energy_joules")
	}) {
		errorf(t, "no dashboard query shows request energy by gen_ai_request_model")
	}
	if !slices.ContainsFunc(queries, func(q dashboardQuery) bool {
		return q.Req.From == "agent" && strings.Contains(q.Expr, "otelenergy_energy_unattributed_joules_total")
	}) {
		errorf(t, "no agent panel shows the unattributed energy")
	}
	t.Logf("%d panels, %d PromQL targets decode strictly and parse", len(d.Panels), len(queries))
}

// TestDashboardStrict checks that the strict decoding in [loadDashboard]
// really rejects what Grafana's types do not have, at each level, and a
// panel whose description does not say where it works.
func TestDashboardStrict(t *testing.T) {
	summarize(t)
	root, err := filepath.Abs("..")
	if err != nil {
		fatal(t, err)
	}
	good, err := os.ReadFile(dashboardPath(root))
	if err != nil {
		fatal(t, err)
	}
	tests := []struct {
		name, old, new string
	}{
		{"dashboard field", `"uid": "otelenergy",`, `"uid": "otelenergy", "refreshh": "5s",`},
		{"panel field", `"title": "GPU power",`, `"title": "GPU power", "descripton": "x",`},
		{"prometheus target field", `"legendFormat": "p50",`, `"legendFormat": "p50", "exprr": "up",`},
		{"heatmap option", `"showValue": "auto",`, `"showValue": "auto", "showValues": "auto",`},
		{"missing heatmap option", `"showValue": "auto",`, ``},
		{"unknown panel type", `"title": "GPU power",`, `"title": "GPU power", "type": "no-such-panel",`},
		{"non-prometheus target", `"refId": "A",`, `"refId": "A", "datasource": {"type": "loki", "uid": "loki"},`},
		{"panel that says not where it works", ` Works on: direct scrape, Collector, Prometheus 3. From: any binary."`, `"`},
		{"unknown setup", `Works on: direct scrape, Collector, Prometheus 3. From: any binary.`, `Works on: Grafana Cloud. From: any binary.`},
		{"unknown need", `Needs: a live carbon provider.`, `Needs: a GPU.`},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(string(good), tt.old) {
				fatalf(t, "dashboard no longer contains %q; update the test", tt.old)
			}
			bad := strings.Replace(string(good), tt.old, tt.new, 1)
			path := filepath.Join(dir, "bad.json")
			if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
				fatal(t, err)
			}
			if _, _, err := loadDashboard(path); err == nil {
				errorf(t, "loadDashboard accepted the dashboard with %q", tt.new)
			} else {
				t.Logf("rejected: %v", firstLine(err.Error()))
			}
		})
	}
}

// dashboardPath is the dashboard Grafana provisions in the example.
func dashboardPath(root string) string {
	return filepath.Join(root, "example", "grafana", "dashboards", "otelenergy.json")
}

// dashboardQuery is one PromQL target of a dashboard panel.
type dashboardQuery struct {
	Panel string // the panel's title
	RefID string
	Expr  string
	Req   panelReq // the panel's
}

// panelReq is what a panel's description says it needs, in its last
// sentences: "Works on: direct scrape, Collector, Prometheus 3." (the
// setups whose Prometheus has its series), "Needs: carbon on." (beyond
// that), and "From: otelenergy-agent." (which binary exports them).
type panelReq struct {
	Works []string
	Needs []string
	From  string // "any", "library" or "agent"
}

// Setups a panel may work on, and needs it may have.
var (
	dashboardSetups = []string{"direct scrape", "Collector", "Prometheus 3"}
	dashboardNeeds  = []string{"carbon on", "a live carbon provider", "baggage key tenant"}
	dashboardFrom   = map[string]string{
		"any binary": "any",
		"the library (the demo, the gateway, the proxy)": "library",
		"otelenergy-agent": "agent",
	}
	reqSentence = regexp.MustCompile(`(Works on|Needs|From): ([^.]+)\.`)
)

// parseReq reads a panel's requirements from its description; it returns
// what is wrong with them.
func parseReq(desc string) (panelReq, []string) {
	var r panelReq
	var probs []string
	for _, m := range reqSentence.FindAllStringSubmatch(desc, -1) {
		switch m[1] {
		case "Works on":
			r.Works = strings.Split(m[2], ", ")
			for _, w := range r.Works {
				if !slices.Contains(dashboardSetups, w) {
					probs = append(probs, fmt.Sprintf("works on %q: want some of %q", w, dashboardSetups))
				}
			}
		case "Needs":
			r.Needs = strings.Split(m[2], ", ")
			for _, n := range r.Needs {
				if !slices.Contains(dashboardNeeds, n) {
					probs = append(probs, fmt.Sprintf("needs %q: want some of %q", n, dashboardNeeds))
				}
			}
		case "From":
			if r.From = dashboardFrom[m[2]]; r.From == "" {
				probs = append(probs, fmt.Sprintf("from %q: want one of %q", m[2], slices.Sorted(maps.Keys(dashboardFrom))))
			}
		}
	}
	if len(r.Works) == 0 || r.From == "" {
		probs = append(probs, `no "Works on: ..." or "From: ..." sentence`)
	}
	return r, probs
}

// loadDashboard decodes the dashboard at path with the Grafana Foundation
// SDK's strict decoder and returns it with its PromQL targets in panel order.
// Strict means an unknown field anywhere is an error; on top of that a panel
// type the SDK does not know (its options would stay untyped), a target that
// is not a Prometheus query, or an empty expr is an error.
func loadDashboard(path string) (*dashboard.Dashboard, []dashboardQuery, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	plugins.RegisterDefaultPlugins()
	// The strict decoder of SDK v0.0.22 reports every unknown field and
	// every missing required one, but a panel, target or options object
	// without errors comes back as an empty cog.BuildErrors, a non-nil
	// error, so its caller drops it. Hence two passes: strict for the
	// errors, then the plain decoder (which types targets and options the
	// same way) for the values.
	var strict dashboard.Dashboard
	if err := sdkError(strict.UnmarshalJSONStrict(raw)); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	var d dashboard.Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := sdkError(d.Validate()); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	var panels []dashboard.Panel
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			panels = append(panels, *p.Panel)
		case p.RowPanel != nil:
			panels = append(panels, p.RowPanel.Panels...)
		}
	}
	var (
		queries []dashboardQuery
		errs    []error
	)
	for _, p := range panels {
		title := deref(p.Title)
		if _, ok := cog.ConfigForPanelcfgVariant(p.Type); !ok {
			errs = append(errs, fmt.Errorf("panel %q: type %q is unknown to the Grafana SDK", title, p.Type))
		}
		req, probs := parseReq(deref(p.Description))
		for _, pr := range probs {
			errs = append(errs, fmt.Errorf("panel %q: %s", title, pr))
		}
		var refs []string
		for i, target := range p.Targets {
			q, ok := target.(*prometheus.Dataquery)
			if !ok {
				errs = append(errs, fmt.Errorf("panel %q target %d: %T, want a Prometheus query", title, i, target))
				continue
			}
			if q.Datasource != nil && deref(q.Datasource.Type) != "prometheus" {
				errs = append(errs, fmt.Errorf("panel %q target %d: data source type %q, want prometheus", title, i, deref(q.Datasource.Type)))
			}
			ref := deref(q.RefId)
			if q.Expr == "" || ref == "" || slices.Contains(refs, ref) {
				errs = append(errs, fmt.Errorf("panel %q target %d: want a non-empty expr and a refId unique in the panel (refId %q)", title, i, ref))
				continue
			}
			refs = append(refs, ref)
			queries = append(queries, dashboardQuery{Panel: title, RefID: ref, Expr: q.Expr, Req: req})
		}
	}
	if len(queries) == 0 {
		errs = append(errs, errors.New("no PromQL targets"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, queries, nil
}

// checkLayout fails t if two panels share an id or overlap on the 24-column
// grid.
func checkLayout(t *testing.T, d *dashboard.Dashboard) {
	t.Helper()
	type box struct {
		title      string
		x, y, w, h uint32
	}
	var boxes []box
	ids := map[uint32]string{}
	add := func(id *uint32, title string, g *dashboard.GridPos) {
		if id == nil || g == nil {
			errorf(t, "panel %q has no id or gridPos", title)
			return
		}
		if other, dup := ids[*id]; dup {
			errorf(t, "panels %q and %q share id %d", other, title, *id)
		}
		ids[*id] = title
		if g.X+g.W > 24 {
			errorf(t, "panel %q ends at column %d, past 24", title, g.X+g.W)
		}
		b := box{title, g.X, g.Y, g.W, g.H}
		for _, o := range boxes {
			if b.x < o.x+o.w && o.x < b.x+b.w && b.y < o.y+o.h && o.y < b.y+b.h {
				errorf(t, "panels %q and %q overlap", o.title, b.title)
			}
		}
		boxes = append(boxes, b)
	}
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			add(p.Panel.Id, deref(p.Panel.Title), p.Panel.GridPos)
		case p.RowPanel != nil:
			id := p.RowPanel.Id
			add(&id, deref(p.RowPanel.Title), p.RowPanel.GridPos)
			for _, c := range p.RowPanel.Panels {
				add(c.Id, deref(c.Title), c.GridPos)
			}
		}
	}
}

// dashboardSetup is one Prometheus an end-to-end test fed, and how: the
// setup its series came through (one of dashboardSetups), the binary
// that exported them, what that binary ran with, and the service to pick.
type dashboardSetup struct {
	name    string
	from    string          // "library" or "agent"
	prom    promClient      // at an instant its series are fresh
	service string          // $service: what the picker would offer
	has     map[string]bool // needs this run meets ("carbon on")
}

// checkDashboardOn checks every panel that says it works on s.name with
// s.from's metrics against that Prometheus: the service picker's query
// offers s.service; each query's metric names are there, with every label
// it selects on (other than one it may leave empty) or groups by; and the
// query returns data. A panel that needs what s lacks is logged, with the
// setup it needs; one that claims s and shows nothing fails.
func checkDashboardOn(ctx context.Context, t *testing.T, root string, s dashboardSetup) {
	t.Helper()
	_, queries, err := loadDashboard(dashboardPath(root))
	if err != nil {
		fatal(t, err)
	}
	names, err := s.prom.metricNames(ctx)
	if err != nil {
		fatal(t, err)
	}
	vars := strings.NewReplacer("$__rate_interval", rateWindow, "$__interval", "5s", "$__range", "5m", "$service", regexp.QuoteMeta(s.service))
	// The picker: label_values(hw_energy_joules_total, service_name).
	picker, err := s.prom.query(ctx, "count by (service_name) (hw_energy_joules_total)")
	if err != nil || !slices.Contains(labelValues(picker, "service_name"), s.service) {
		errorf(t, "%s: the service picker would not offer %q: %v %v", s.name, s.service, labelValues(picker, "service_name"), err)
	}
	labels := map[string][]string{}
	var checked, skipped int
	for _, q := range queries {
		if q.Req.From != s.from && q.Req.From != "any" || !slices.Contains(q.Req.Works, s.name) {
			continue
		}
		if missing := slices.DeleteFunc(slices.Clone(q.Req.Needs), func(n string) bool { return s.has[n] }); len(missing) > 0 {
			t.Logf("SKIP panel %q target %s on %s: needs %s, which this run does not have", q.Panel, q.RefID, s.name, strings.Join(missing, ", "))
			skipped++
			continue
		}
		expr := vars.Replace(q.Expr)
		sels, groups, err := promqlParts(expr)
		if err != nil {
			errorf(t, "panel %q target %s: %v", q.Panel, q.RefID, err)
			continue
		}
		var have []string // the labels of every metric the query reads
		for _, sel := range sels {
			if !slices.Contains(names, sel.name) {
				errorf(t, "panel %q target %s says it works on %s, but %s has no %s (it has %d metrics)", q.Panel, q.RefID, s.name, s.name, sel.name, len(names))
				continue
			}
			if labels[sel.name] == nil {
				if labels[sel.name], err = s.prom.labelNames(ctx, sel.name); err != nil {
					fatal(t, err)
				}
			}
			have = append(have, labels[sel.name]...)
			for _, l := range sel.labels {
				if !slices.Contains(labels[sel.name], l) {
					errorf(t, "panel %q target %s on %s: %s has no label %s (it has %v)", q.Panel, q.RefID, s.name, sel.name, l, labels[sel.name])
				}
			}
		}
		for _, g := range groups {
			if !slices.Contains(have, g) {
				errorf(t, "panel %q target %s on %s: groups by %s, which none of its metrics has", q.Panel, q.RefID, s.name, g)
			}
		}
		err = poll(ctx, assertTimeout, func() error {
			res, err := s.prom.query(ctx, expr)
			if err == nil && len(res) == 0 {
				err = errors.New("no data")
			}
			return err
		})
		if err != nil {
			errorf(t, "panel %q target %s says it works on %s, and shows nothing there: %v\n\t%s", q.Panel, q.RefID, s.name, err, expr)
		}
		checked++
	}
	t.Logf("%s (%s's metrics): %d dashboard queries checked against what the binary exported, %d need a setup this run lacks", s.name, s.from, checked, skipped)
	if checked == 0 {
		errorf(t, "%s: no dashboard query checked", s.name)
	}
}

// promSel is a vector selector of a query: its metric, and the labels it
// needs (those its matchers select on, other than one that matches an
// empty value: a series without the label matches that).
type promSel struct {
	name   string
	labels []string
}

// promqlParts parses expr and returns its selectors and the labels its
// aggregations group by.
func promqlParts(expr string) ([]promSel, []string, error) {
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, nil, err
	}
	var sels []promSel
	var groups []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			s := promSel{name: n.Name}
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" && !m.Matches("") {
					s.labels = append(s.labels, m.Name)
				}
			}
			sels = append(sels, s)
		case *parser.AggregateExpr:
			if !n.Without {
				groups = append(groups, n.Grouping...)
			}
		}
		return nil
	})
	return sels, groups, nil
}

// sdkError is err, or nil for the empty [cog.BuildErrors] that the SDK's
// decoders return, as a non-nil error, when all went well.
func sdkError(err error) error {
	if b, ok := err.(cog.BuildErrors); ok && len(b) == 0 {
		return nil
	}
	return err
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// directScrapeConfig is a Prometheus 2 scraping one binary's own
// Prometheus exporter, with service_name added as a target label: what
// docs/quickstart-grafana.md says a direct scrape needs for the service
// picker.
var directScrapeConfig = template.Must(template.New("direct").Parse(`
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: direct
    static_configs:
      - targets: ['127.0.0.1:{{.Exporter}}']
        labels:
          service_name: {{.Service}}
`))

// directScrape is a binary exporting through its own Prometheus exporter
// and the Prometheus 2 that scrapes it.
type directScrape struct {
	proc *process
	prom promClient
}

// startDirectScrape starts a Prometheus 2 and bin, exporting metrics with
// OTEL_METRICS_EXPORTER=prometheus to it (and no traces), with env and
// args; the caller waits for bin and sets prom.at to an instant it ran.
func startDirectScrape(ctx context.Context, t *testing.T, promBin, dir, service string, env []string, bin string, args ...string) directScrape {
	t.Helper()
	p := freePorts(t, 2)
	cfg := writeTemplate(t, "prometheus-direct-"+service+".yaml", directScrapeConfig, struct {
		Exporter int
		Service  string
	}{p[0], service})
	data := t.TempDir()
	startProcess(t, "prometheus-direct-"+service, data, os.Environ(), promBin,
		"--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(data, "tsdb"), fmt.Sprintf("--web.listen-address=127.0.0.1:%d", p[1]))
	base := fmt.Sprintf("http://127.0.0.1:%d", p[1])
	if err := poll(ctx, startTimeout, func() error { return httpOK(ctx, base+"/-/ready") }); err != nil {
		fatalf(t, "prometheus for the direct scrape of %s not ready: %v", service, err)
	}
	env = append(slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") }),
		"OTEL_METRICS_EXPORTER=prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1", fmt.Sprintf("OTEL_EXPORTER_PROMETHEUS_PORT=%d", p[0]),
		"OTEL_TRACES_EXPORTER=none", "OTEL_SERVICE_NAME="+service)
	return directScrape{proc: startProcess(t, service, dir, env, bin, args...), prom: promClient{base: base}}
}
