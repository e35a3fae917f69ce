package docscheck

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository's root, two levels up.
const repoRoot = "../.."

// packages returns every directory of the repository that holds a Go
// package (test-only packages included), relative to the root: the
// library's packages and every nested module's (cmd/*, example,
// integration, deploy, e2e, tools/*). testdata, hidden directories and
// files no build includes (//go:build ignore) are left out.
func packages(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != repoRoot && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		ents, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(path, e.Name()))
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte("//go:build ignore\n")) {
				continue
			}
			rel, _ := filepath.Rel(repoRoot, path)
			out = append(out, filepath.ToSlash(rel))
			break
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

var row = regexp.MustCompile("^\\| `([^`]+)` \\|")

// listed returns the packages docs/architecture.md's "Packages" table
// names, in its order.
func listed(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Packages"
			continue
		}
		if m := row.FindStringSubmatch(line); in && m != nil {
			out = append(out, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestArchitecturePackageTable: docs/architecture.md's package table
// lists every package once, and no package that does not exist.
func TestArchitecturePackageTable(t *testing.T) {
	have := packages(t)
	table := listed(t)
	if len(have) < 40 {
		t.Fatalf("found only %d packages under %s: %v", len(have), repoRoot, have)
	}
	seen := map[string]bool{}
	for _, p := range table {
		if seen[p] {
			t.Errorf("docs/architecture.md lists %s twice", p)
		}
		seen[p] = true
		if !slices.Contains(have, p) {
			t.Errorf("docs/architecture.md lists %s, which is no package", p)
		}
	}
	for _, p := range have {
		if !seen[p] {
			t.Errorf("package %s is missing from docs/architecture.md's package table", p)
		}
	}
}
