//go:build !(cgo && linux)

package doctor

import "context"

// Check reports that this build cannot read NVML (go-nvml needs cgo on
// Linux), then checks the metrics exporter.
func Check(ctx context.Context, cfg Config) Report {
	cfg.defaults()
	var r Report
	r.fail("nvml", "use a build with CGO_ENABLED=1 for linux, such as the agent's image",
		"not usable: this build has no cgo or is not for linux")
	checkHost(cfg, &r)
	checkPIDNamespace(cfg, &r)
	checkExporter(ctx, cfg, &r)
	return r
}
