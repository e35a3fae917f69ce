//go:build !linux

package procfs

import (
	"os"
	"path/filepath"
	"strconv"
)

// reader reads proc files through package os: only Linux has a /proc of
// this layout, and this reader serves builds and fake trees elsewhere.
type reader struct{}

func (reader) read(root string, rel []byte) ([]byte, error) {
	return os.ReadFile(filepath.Join(root, string(rel)))
}

func (reader) pids(root string, f func(pid uint32)) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if v, err := strconv.ParseUint(e.Name(), 10, 32); err == nil && v > 0 {
			f(uint32(v))
		}
	}
	return nil
}
