package doctor

// ReportSource exposes reportSource to the external tests.
var ReportSource = reportSource

// CheckExporter and ExportFix expose the exporter check and its fixes.
var (
	CheckExporter = checkExporter
	ExportFix     = exportFix
)
