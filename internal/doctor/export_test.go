package doctor

// ReportSource exposes reportSource to the external tests.
var ReportSource = reportSource
