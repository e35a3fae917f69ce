// Package deploy holds no code: it is the module whose tests decode the
// deployment manifests under kubernetes/ strictly with the Kubernetes API
// types, and check them against the binaries' flags. It is a module of its
// own, outside the workspace, so that k8s.io/api never enters the
// library's or the binaries' module graphs. Run its tests with
//
//	cd deploy && GOWORK=off go test ./...
package deploy
