// Package docscheck holds the tests that keep docs/ true to the code:
// docs/architecture.md's package table lists every package of the
// repository and no package that no longer exists.
package docscheck
