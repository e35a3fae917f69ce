//go:build linux

package procfs

import (
	"syscall"
	"unsafe"
)

// reader opens and reads proc files with raw system calls into buffers
// it keeps, so that a steady pass over /proc allocates nothing: os.Open
// allocates a File (and a name) per file, and os.ReadDir an entry per
// process.
type reader struct {
	path   []byte // a NUL-terminated path
	buf    []byte
	dirent []byte
	pidBuf []uint32
}

// cpath returns root/rel as a NUL-terminated path in r.path.
func (r *reader) cpath(root string, rel []byte) *byte {
	r.path = append(r.path[:0], root...)
	if len(rel) > 0 {
		r.path = append(append(r.path, '/'), rel...)
	}
	r.path = append(r.path, 0)
	return &r.path[0]
}

func open(p *byte, flags int) (int, error) {
	fd, _, e := syscall.Syscall6(syscall.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(p)), uintptr(flags|syscall.O_CLOEXEC), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// atFDCWD is AT_FDCWD (-100): a path relative to the working directory.
const atFDCWD = ^uintptr(99)

// read returns the contents of root/rel, up to 64 KiB, in a buffer valid
// until the next call.
func (r *reader) read(root string, rel []byte) ([]byte, error) {
	fd, err := open(r.cpath(root, rel), syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	if cap(r.buf) == 0 {
		r.buf = make([]byte, 4096)
	}
	n := 0
	for {
		if n == cap(r.buf) {
			if n >= 64<<10 {
				break
			}
			r.buf = append(r.buf[:n], make([]byte, n)...)
		}
		k, err := syscall.Read(fd, r.buf[n:cap(r.buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if k == 0 {
			break
		}
		n += k
	}
	return r.buf[:n], nil
}

// pids calls f with the pid of every numeric entry of root, in directory
// order, once the whole directory is read (f may call read).
func (r *reader) pids(root string, f func(pid uint32)) error {
	fd, err := open(r.cpath(root, nil), syscall.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return err
	}
	if cap(r.dirent) == 0 {
		r.dirent = make([]byte, 32<<10)
	}
	r.pidBuf = r.pidBuf[:0]
	for {
		n, err := syscall.Getdents(fd, r.dirent[:cap(r.dirent)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			syscall.Close(fd)
			return err
		}
		if n <= 0 {
			break
		}
		// linux_dirent64: ino (8 bytes), off (8), reclen (2), type (1),
		// then the NUL-terminated name.
		for b := r.dirent[:n]; len(b) >= 19; {
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				break
			}
			name := b[19:reclen]
			if k := indexNUL(name); k >= 0 {
				name = name[:k]
			}
			if v, ok := parseUint(name); ok && v > 0 && v <= 1<<32-1 {
				r.pidBuf = append(r.pidBuf, uint32(v))
			}
			b = b[reclen:]
		}
	}
	syscall.Close(fd)
	for _, pid := range r.pidBuf {
		f(pid)
	}
	return nil
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
