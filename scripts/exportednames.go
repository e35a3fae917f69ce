//go:build ignore

// Command exportednames counts the exported names of every importable
// (non-internal, non-main) package of the module rooted at its argument:
// top-level constants, variables, types and functions, and, apart, the
// exported methods of exported types. A name declared in several files
// (a cgo file and its stub) counts once. scripts/exported-names.sh runs
// it; the output is one line per package, then the otelenergy package's
// count alone, as "otelenergy <names>".
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	mod, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		fail(err)
	}
	type count struct{ names, methods int }
	counts := map[string]count{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		name := d.Name()
		if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "internal") {
			return filepath.SkipDir
		}
		if rel != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
		}
		names, methods, pkg, err := countDir(path)
		if err != nil {
			return err
		}
		if pkg == "" || pkg == "main" {
			return nil
		}
		ip := mod
		if rel != "." {
			ip += "/" + filepath.ToSlash(rel)
		}
		counts[ip] = count{names, methods}
		return nil
	})
	if err != nil {
		fail(err)
	}
	var pkgs []string
	for p := range counts {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	total := count{}
	fmt.Printf("%-50s %6s %8s\n", "package", "names", "+methods")
	for _, p := range pkgs {
		c := counts[p]
		total.names += c.names
		total.methods += c.methods
		fmt.Printf("%-50s %6d %8d\n", p, c.names, c.names+c.methods)
	}
	fmt.Printf("%-50s %6d %8d\n", "total", total.names, total.names+total.methods)
	fmt.Printf("otelenergy %d\n", counts[mod+"/otelenergy"].names)
}

// countDir counts the exported names and methods of the package in dir,
// and returns its name ("" when dir holds no Go package).
func countDir(dir string) (names, methods int, pkg string, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, "", err
	}
	fset := token.NewFileSet()
	top := map[string]bool{}
	meth := map[string]bool{}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return 0, 0, "", err
		}
		if ignored(f) {
			continue
		}
		pkg = f.Name.Name
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					top[d.Name.Name] = true
					continue
				}
				if recv := recvType(d.Recv.List[0].Type); ast.IsExported(recv) {
					meth[recv+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							top[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								top[id.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return len(top), len(meth), pkg, nil
}

// ignored reports a file that no build includes (//go:build ignore).
func ignored(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if c.Text == "//go:build ignore" {
				return true
			}
		}
	}
	return false
}

func recvType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.IndexListExpr:
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

func modulePath(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(p), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "exportednames:", err)
	os.Exit(1)
}
