package otelenergy

// ScopeName is the instrumentation scope name of the meters and tracers this
// package creates: its import path.
const ScopeName = "github.com/otelenergy/otelenergy/otelenergy"

// Version returns the version of this instrumentation.
func Version() string { return "0.1.0" }
