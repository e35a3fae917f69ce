// Package procfs forwards to the library's internal/procfs, the one
// reader of /proc, under the names the agent's packages used before it
// moved there, so that code written against them still builds. New code
// imports github.com/otelenergy/otelenergy/internal/procfs.
package procfs

import "github.com/otelenergy/otelenergy/internal/procfs"

// ErrGone is [procfs.ErrGone].
var ErrGone = procfs.ErrGone

// ErrFormat is [procfs.ErrFormat].
var ErrFormat = procfs.ErrFormat

// Info is [procfs.Info].
type Info = procfs.Info

// FS is [procfs.FS].
type FS = procfs.FS

// ParseStartTime is [procfs.ParseStartTime].
func ParseStartTime(stat []byte) (uint64, bool) { return procfs.ParseStartTime(stat) }

// ParseCgroup is [procfs.ParseCgroup].
func ParseCgroup(file string) (containerID, podUID string) { return procfs.ParseCgroup(file) }
