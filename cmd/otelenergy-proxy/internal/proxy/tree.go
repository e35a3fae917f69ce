package proxy

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// treeWatchEvery is how often the child's process tree is listed again
// to see whether processes appeared that the source does not attribute.
const treeWatchEvery = 10 * time.Second

// watchTree lists pid's process tree every treeWatchEvery until ctx ends,
// and warns once for each process that was not in attributed: the source
// takes its pids when it is built, so a process the backend starts later
// is not attributed (on a GPU it shares with other processes, its work
// counts as theirs).
func watchTree(ctx context.Context, lg *slog.Logger, procRoot string, pid int, attributed []int, every time.Duration) {
	warned := map[int]bool{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range processTree(procRoot, pid) {
			if !slices.Contains(attributed, p) && !warned[p] {
				warned[p] = true
				lg.Warn("a backend process started after metering began is not attributed", slog.Int("pid", p),
					slog.Any("attributed_pids", attributed))
			}
		}
	}
}
