package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestConcurrentStreams sends 1,000 streams at once through the proxy:
// every one must complete with the backend's bytes and its trailers.
func TestConcurrentStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 concurrent streams")
	}
	const streams, tokens = 1000, 20
	b := httptest.NewServer(&backend{tokens: tokens, pace: 10 * time.Millisecond})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-horizon", "1s"}, nil)
	waitReady(t, r.admin)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	var failed atomic.Int64
	errs := make(chan string, 10)
	began := time.Now()
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, r.api+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(chatBody, true)))
			resp, err := c.Do(req)
			if err == nil {
				var body []byte
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
				case resp.StatusCode != 200:
					err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
				case bytes.Count(body, []byte("\n\n")) != tokens+2 || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")):
					err = fmt.Errorf("a stream of %d bytes is incomplete", len(body))
				case resp.Trailer.Get("Energy-Approximate") == "":
					err = fmt.Errorf("no trailers: %v", resp.Trailer)
				}
			}
			if err != nil {
				failed.Add(1)
				select {
				case errs <- err.Error():
				default:
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d concurrent streams of %d chunks in %v, %d failed", streams, tokens, time.Since(began).Round(time.Millisecond), failed.Load())
	if n := failed.Load(); n > 0 {
		close(errs)
		var first []string
		for e := range errs {
			first = append(first, e)
		}
		t.Fatalf("%d of %d streams failed; first errors: %q", n, streams, first)
	}
}

// TestSoak sends OTELENERGY_SOAK requests (10^6 for the documented run;
// unset, the test is skipped) through the proxy binary, whole
// completions over keep-alive connections from 8 clients, and reads the
// proxy process's RSS at every tenth of the run. After the first tenth
// (warm-up) the RSS may not grow by more than 10%.
func TestSoak(t *testing.T) {
	total, _ := strconv.Atoi(os.Getenv("OTELENERGY_SOAK"))
	if total <= 0 {
		t.Skip("set OTELENERGY_SOAK=1000000 to run the soak")
	}
	bin := filepath.Join(t.TempDir(), "otelenergy-proxy")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b := httptest.NewServer(&backend{tokens: 16})
	t.Cleanup(b.Close)
	cmd := exec.Command(bin, "-simulate", "-backend", b.URL, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-horizon", "2s")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`msg="otelenergy-proxy serving" listen=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- "http://" + m[1]
			}
		}
	}()
	var api string
	select {
	case api = <-addr:
	case <-time.After(60 * time.Second):
		t.Fatal("the proxy did not start")
	}
	const clients = 8
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	body := fmt.Sprintf(chatBody, false)
	var sent, failed atomic.Int64
	every := total / 10
	rss := make([]int64, 0, 11)
	rss = append(rss, rssKB(t, cmd.Process.Pid))
	began := time.Now()
	for step := range 10 {
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for sent.Add(1) <= int64((step+1)*every) {
					resp, err := c.Post(api+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						failed.Add(1)
					}
				}
				sent.Add(-1)
			}()
		}
		wg.Wait()
		rss = append(rss, rssKB(t, cmd.Process.Pid))
		t.Logf("%8d requests  %6.1f s  RSS %6.1f MiB", (step+1)*every, time.Since(began).Seconds(), float64(rss[len(rss)-1])/1024)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	warm, peak := rss[1], int64(0)
	for _, v := range rss[1:] {
		peak = max(peak, v)
	}
	t.Logf("RSS after warm-up %.1f MiB, peak %.1f MiB (+%.1f%%), %d requests in %v", float64(warm)/1024, float64(peak)/1024,
		100*float64(peak-warm)/float64(warm), total, time.Since(began).Round(time.Second))
	if float64(peak) > 1.10*float64(warm) {
		t.Fatalf("RSS grew from %d kB after warm-up to %d kB", warm, peak)
	}
}

// rssKB reads a process's resident set size from /proc.
func rssKB(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
