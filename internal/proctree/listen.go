package proctree

import (
	"bufio"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// tcpListen is the state of a listening socket in net/tcp and net/tcp6
// (TCP_LISTEN, include/net/tcp_states.h), in hexadecimal as the files
// write it.
const tcpListen = "0A"

// ListeningInodes returns the inodes of the TCP sockets, IPv4 and IPv6,
// that listen on port in the network namespace whose net/tcp and net/tcp6
// are under the root (the reader's own, at /proc/net). A file that is
// absent (a kernel without IPv6) is skipped; nil and no error mean
// nothing listens. Several sockets may listen on one port: one per
// address family, or one per worker with SO_REUSEPORT.
func (fs FS) ListeningInodes(port int) ([]uint64, error) {
	var inodes []uint64
	var errs []error
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fs.path("net", name))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		inodes, err = appendListening(inodes, f, port)
		f.Close()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return inodes, errors.Join(errs...)
}

// appendListening appends the inodes of the lines of one net/tcp file
// that listen on port. Each line after the header is
// "sl local_address rem_address st tx_queue:rx_queue tr:tm->when
// retrnsmt uid timeout inode ...", the local address ADDR:PORT in
// hexadecimal; an inode of 0 is a socket no process holds any more.
func appendListening(dst []uint64, r io.Reader, port int) ([]uint64, error) {
	sc := bufio.NewScanner(r)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != tcpListen {
			continue
		}
		i := strings.LastIndexByte(fields[1], ':')
		p, err := strconv.ParseUint(fields[1][i+1:], 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		ino, err := strconv.ParseUint(fields[9], 10, 64)
		if err == nil && ino != 0 && !slices.Contains(dst, ino) {
			dst = append(dst, ino)
		}
	}
	return dst, sc.Err()
}

// HoldsSocket reports whether process pid holds a descriptor of one of
// the sockets inodes (its fd directory's links read "socket:[inode]"). A
// process whose descriptors cannot be read (exited, or another user's
// without the privilege) holds none.
func (fs FS) HoldsSocket(pid int, inodes []uint64) bool {
	if len(inodes) == 0 {
		return false
	}
	dir := fs.path(strconv.Itoa(pid), "fd")
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false
	}
	for _, n := range names {
		link, err := os.Readlink(dir + "/" + n)
		if err == nil && socketIn(link, inodes) {
			return true
		}
	}
	return false
}

// SocketHolders appends to dst, and returns, the pids of the processes
// under the root that hold a descriptor of one of the sockets inodes:
// the processes that accept on a listening socket, which after a fork
// may be several. It reads every process's descriptors, so its cost
// grows with the descriptors open on the host; [FS.HoldsSocket] checks
// one process.
func (fs FS) SocketHolders(dst []int, inodes []uint64) ([]int, error) {
	if len(inodes) == 0 {
		return dst, nil
	}
	pids, err := fs.Pids(nil)
	if err != nil {
		return dst, err
	}
	for _, p := range pids {
		if fs.HoldsSocket(p, inodes) {
			dst = append(dst, p)
		}
	}
	return dst, nil
}

// socketIn reports whether a descriptor's link names one of inodes.
func socketIn(link string, inodes []uint64) bool {
	rest, ok := strings.CutPrefix(link, "socket:[")
	if rest, ok = strings.CutSuffix(rest, "]"); !ok {
		return false
	}
	ino, err := strconv.ParseUint(rest, 10, 64)
	return err == nil && slices.Contains(inodes, ino)
}
