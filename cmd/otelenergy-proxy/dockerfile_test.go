package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDockerfileBuild runs the Dockerfile's go build line from the
// repository's root, as the image's build stage does, and runs the
// binary: no docker daemon is needed to know the image's build works.
// The image's other promises (cgo on, a non-root user, utility
// capability) are checked in the file itself.
func TestDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var build string
	var sawUser, sawCaps, sawStages int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build"):
			build = strings.TrimPrefix(line, "RUN ")
		case strings.HasPrefix(line, "USER ") && !strings.HasPrefix(line, "USER 0") && !strings.HasPrefix(line, "USER root"):
			sawUser++
		case line == "ENV NVIDIA_DRIVER_CAPABILITIES=utility":
			sawCaps++
		case strings.HasPrefix(line, "FROM "):
			sawStages++
		}
	}
	if build == "" || !strings.Contains(build, "CGO_ENABLED=1") || !strings.Contains(build, "-trimpath") {
		t.Fatalf("build line %q: want a cgo, -trimpath go build", build)
	}
	if sawUser != 1 || sawCaps != 1 || sawStages < 2 {
		t.Fatalf("Dockerfile: %d non-root USER lines, %d utility capability lines, %d stages", sawUser, sawCaps, sawStages)
	}
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux")
	}
	out := filepath.Join(t.TempDir(), "otelenergy-proxy")
	build = strings.ReplaceAll(build, "/out/otelenergy-proxy", out)
	cmd := exec.Command("sh", "-c", build)
	cmd.Dir = "../.." // the build stage's WORKDIR holds the repository's root
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", build, err, b)
	}
	if strings.Contains(string(b), "deprecated") {
		t.Fatalf("the build prints cgo deprecation warnings:\n%s", b)
	}
	help, err := exec.Command(out, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "-backend") {
		t.Fatalf("the built binary's -h: %v\n%s", err, help)
	}
	// cgo on: the binary is dynamically linked (go-nvml needs dlopen).
	if b, err := exec.Command("go", "version", "-m", out).Output(); err != nil || !strings.Contains(string(b), "CGO_ENABLED=1") {
		t.Fatalf("go version -m: %v\n%s", err, b)
	}
}
