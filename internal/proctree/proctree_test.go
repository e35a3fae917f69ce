package proctree

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestDescends(t *testing.T) {
	root := t.TempDir()
	// pid: parent. 300 is a vLLM worker of 200, the attributed server;
	// 400's command name holds ") 1 (" to fool a naive parser; 500 is
	// unrelated; 600 chains nine generations down from 200.
	stat := map[uint32]string{
		200: "200 (vllm) S 1 200 200",
		300: "300 (python3) S 200 200 200",
		400: "400 (a) 1 (b) S 300 200 200",
		500: "500 (other) S 1 500 500",
	}
	for i := uint32(0); i < 9; i++ {
		parent := uint32(200)
		if i > 0 {
			parent = 600 + i - 1
		}
		stat[600+i] = strconv.Itoa(int(600+i)) + " (w) S " + strconv.Itoa(int(parent)) + " 1 1"
	}
	for pid, s := range stat {
		dir := filepath.Join(root, strconv.Itoa(int(pid)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tr := Tree{Root: root}
	ours := []uint32{200}
	for _, tt := range []struct {
		pid  uint32
		want bool
	}{
		{200, true}, {300, true}, {400, true}, {500, false}, {999, false},
		{607, true},  // eight generations below 200
		{608, false}, // nine
	} {
		if got := tr.Descends(tt.pid, ours); got != tt.want {
			t.Errorf("Descends(%d) = %v, want %v", tt.pid, got, tt.want)
		}
	}
}

// TestDescendsFromInit: pid 1 may be the attributed server (its
// container's init); its descendants descend from it.
func TestDescendsFromInit(t *testing.T) {
	root := t.TempDir()
	for pid, s := range map[uint32]string{1: "1 (server) S 0 1 1", 7: "7 (worker) S 1 1 1", 8: "8 (w) S 7 1 1"} {
		dir := filepath.Join(root, strconv.Itoa(int(pid)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tr := Tree{Root: root}
	if !tr.Descends(8, []uint32{1}) || !tr.Descends(7, []uint32{1}) {
		t.Error("pid 1's descendants do not descend from it")
	}
	if tr.Descends(8, []uint32{5}) {
		t.Error("pid 8 descends from pid 5, which is not its ancestor")
	}
}
