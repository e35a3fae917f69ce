package intelgpu

// WithOpen exposes withOpen to the external tests.
var WithOpen = withOpen
