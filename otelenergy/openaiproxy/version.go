package openaiproxy

// ScopeName is the instrumentation scope name of the meters this package
// creates: its import path.
const ScopeName = "github.com/otelenergy/otelenergy/otelenergy/openaiproxy"

// Version returns the version of this instrumentation.
func Version() string { return "0.1.0" }
