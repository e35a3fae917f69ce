// Package fakesysfs writes fake sysfs trees for tests, from a text
// description kept under a package's testdata/. sysfs paths hold ':'
// (intel-rapl:0), which Go module zips do not allow in file names, so the
// trees are written at test time instead of being stored as files.
//
// A description has one entry per line: "path = content" writes a file
// holding content and a newline, as sysfs shows an attribute; "path ->
// target" makes a symbolic link. Blank lines and lines starting with '#'
// are skipped. Paths are relative to the tree's root, the sysfs mount
// point.
package fakesysfs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Write builds the tree described in the file desc under root.
func Write(root, desc string) error {
	f, err := os.Open(desc)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if p, target, ok := strings.Cut(line, " -> "); ok {
			p = filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(target, p); err != nil {
				return err
			}
			continue
		}
		p, content, ok := strings.Cut(line, " = ")
		if !ok {
			return fmt.Errorf("%s:%d: want \"path = content\" or \"path -> target\": %q", desc, n, line)
		}
		if err := Set(root, p, content); err != nil {
			return err
		}
	}
	return sc.Err()
}

// Set writes content and a newline to root/path, making its directories.
func Set(root, path, content string) error {
	p := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content+"\n"), 0o644)
}
