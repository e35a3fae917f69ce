// Package integration drives the openaiproxy gateway with real clients
// against the demo app. It is a module of its own so that the library's
// users never inherit the client's dependencies.
package integration
