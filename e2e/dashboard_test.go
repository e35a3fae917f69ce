package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

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
	t.Logf("%d panels, %d PromQL targets decode strictly and parse", len(d.Panels), len(queries))
}

// TestDashboardStrict checks that the strict decoding in [loadDashboard]
// really rejects what Grafana's types do not have, at each level.
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
			queries = append(queries, dashboardQuery{Panel: title, RefID: ref, Expr: q.Expr})
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

// optionalMetric matches the metrics that dashboard panels may query before
// the demo emits them: the GenAI server histograms, the agent's
// per-process emissions, and the age of a polled intensity (the demo's is
// static). A query naming one that Prometheus does not have is skipped,
// with a log line, instead of failing.
var optionalMetric = regexp.MustCompile(`\bgen_ai_server_[a-z0-9_]+|\botelenergy_process_co2e_[a-z0-9_]+|\botelenergy_carbon_intensity_age_[a-z0-9_]+`)

// missingOptional returns the optional metrics expr reads that are not in
// names (the metric names a Prometheus has).
func missingOptional(expr string, names []string) []string {
	var missing []string
	for _, m := range optionalMetric.FindAllString(expr, -1) {
		if !slices.Contains(names, m) && !slices.Contains(missing, m) {
			missing = append(missing, m)
		}
	}
	return missing
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
