package proxy

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// listenerPID returns the pid of the process on this host (in this PID
// namespace) that listens on TCP port, from net/tcp and net/tcp6 and the
// processes' descriptors under the proc file system mounted at root, or 0
// when none is found (no such listener, or its descriptors cannot be
// read).
func listenerPID(root string, port int) int {
	inodes := map[string]bool{}
	for _, f := range []string{filepath.Join(root, "net", "tcp"), filepath.Join(root, "net", "tcp6")} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			i := strings.LastIndexByte(fields[1], ':')
			p, err := strconv.ParseUint(fields[1][i+1:], 16, 16)
			if err == nil && int(p) == port && fields[9] != "0" {
				inodes["socket:["+fields[9]+"]"] = true
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return 0
	}
	fds, _ := filepath.Glob(filepath.Join(root, "[0-9]*", "fd", "*"))
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && inodes[link] {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(fd))))
			return pid
		}
	}
	return 0
}
