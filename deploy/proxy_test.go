package deploy

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
)

// TestProxyVLLMManifest decodes the vLLM Deployment and Service strictly
// and parses the proxy's arguments with the proxy's own flag table (its
// OTELENERGY_* variables included): wrapper mode, the API and admin
// ports against the container's and the Service's, the probes against
// the admin paths, the backend against the child's --port, and the
// grace period against the drain and the horizon.
func TestProxyVLLMManifest(t *testing.T) {
	objs := decodeManifests(t, "kubernetes/proxy-vllm.yaml")
	deps := objectsOf[appsv1.Deployment](objs)
	svcs := objectsOf[corev1.Service](objs)
	if len(deps) != 1 || len(svcs) != 1 {
		t.Fatalf("%d Deployments, %d Services; want one of each", len(deps), len(svcs))
	}
	pod := deps[0].Spec.Template.Spec
	var c *corev1.Container
	for i := range pod.Containers {
		if len(pod.Containers[i].Command) > 0 && strings.HasSuffix(pod.Containers[i].Command[0], "/otelenergy-proxy") {
			c = &pod.Containers[i]
		}
	}
	if c == nil {
		t.Fatal("no container runs otelenergy-proxy")
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	cfg, err := flags.Parse(c.Args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("the proxy rejects its arguments %q: %v", c.Args, err)
	}
	if len(cfg.Command) < 2 || cfg.Command[0] != "vllm" || cfg.Command[1] != "serve" {
		t.Fatalf("child command %q: want wrapper mode around vllm serve", cfg.Command)
	}
	if cfg.Simulate {
		t.Fatal("the manifest meters a simulated GPU")
	}
	if !strings.Contains(env["NVIDIA_DRIVER_CAPABILITIES"], "utility") {
		t.Fatalf("NVIDIA_DRIVER_CAPABILITIES %q lacks utility, which NVML needs", env["NVIDIA_DRIVER_CAPABILITIES"])
	}
	if q, ok := c.Resources.Limits["nvidia.com/gpu"]; !ok || q.Value() < 1 {
		t.Fatal("the container requests no GPU")
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	port := func(addr string) int32 {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(p)
		return int32(n)
	}
	if got := port(cfg.Listen); ports["http"] != got {
		t.Fatalf("-listen %s, container port http %d", cfg.Listen, ports["http"])
	}
	if got := port(cfg.AdminListen); ports["admin"] != got {
		t.Fatalf("-admin-listen %s, container port admin %d", cfg.AdminListen, ports["admin"])
	}
	if want := "--port=" + cfg.Backend.Port(); !slices.Contains(cfg.Command, want) {
		t.Fatalf("-backend %s, but the child's arguments %q lack %s", cfg.Backend, cfg.Command, want)
	}
	if cfg.Backend.Hostname() != "127.0.0.1" || !slices.Contains(cfg.Command, "--host=127.0.0.1") {
		t.Fatalf("the backend must listen on loopback only, behind the proxy: -backend %s, child %q", cfg.Backend, cfg.Command)
	}

	probePort := func(name string, p *corev1.Probe, path string) {
		t.Helper()
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("%s probe missing or not HTTP", name)
		}
		var n int32
		switch p.HTTPGet.Port.Type {
		case intstr.String:
			n = ports[p.HTTPGet.Port.StrVal]
		default:
			n = p.HTTPGet.Port.IntVal
		}
		if n != port(cfg.AdminListen) || p.HTTPGet.Path != path {
			t.Fatalf("%s probe %s on port %d; want %s on the admin port %s", name, p.HTTPGet.Path, n, path, cfg.AdminListen)
		}
	}
	probePort("startup", c.StartupProbe, flags.ReadyPath)
	probePort("readiness", c.ReadinessProbe, flags.ReadyPath)
	probePort("liveness", c.LivenessProbe, flags.HealthPath)

	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	// The delay, the drain, the backend's stop (its grace is the drain
	// timeout) and the horizon's flush run one after another.
	if need := cfg.ShutdownDelay + 2*cfg.DrainTimeout + cfg.Horizon; grace < need {
		t.Fatalf("terminationGracePeriodSeconds %v: the shutdown delay (%v), the drain and the backend's stop (2 × %v) and the horizon (%v) need %v",
			grace, cfg.ShutdownDelay, cfg.DrainTimeout, cfg.Horizon, need)
	}

	// The binary comes from the proxy's image through an init container
	// that writes it where the container runs it.
	var copied bool
	for _, ic := range pod.InitContainers {
		icfg, err := flags.Parse(ic.Command[1:], func(string) string { return "" }, io.Discard)
		if err == nil && icfg.CopyTo == c.Command[0] {
			copied = true
		}
	}
	if !copied {
		t.Fatalf("no init container copies the proxy to %s", c.Command[0])
	}

	svc := svcs[0]
	for _, p := range svc.Spec.Ports {
		if _, ok := ports[p.TargetPort.StrVal]; !ok {
			t.Fatalf("Service port %s targets %v, not a container port", p.Name, p.TargetPort)
		}
		if ports[p.TargetPort.StrVal] == port(cfg.AdminListen) || p.Port == port(cfg.AdminListen) {
			t.Fatalf("the Service exposes the admin port %d: the probes are the kubelet's, not the clients'", p.Port)
		}
	}
	checkGPUNodes(t, pod)
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Fatalf("the server container requests no CPU or memory (%v): the scheduler would place it anywhere", c.Resources.Requests)
	}
	for k, v := range svc.Spec.Selector {
		if deps[0].Spec.Template.Labels[k] != v {
			t.Fatalf("the Service's selector %s=%s does not select the pods", k, v)
		}
	}
}

// TestComposeProxy parses the demo stack's proxy service's command with
// the proxy's flag table and checks its published ports and backend
// against the services there.
func TestComposeProxy(t *testing.T) {
	data, err := os.ReadFile("../example/docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Command []string `json:"command"`
			Ports   []string `json:"ports"`
			Build   struct {
				Context    string `json:"context"`
				Dockerfile string `json:"dockerfile"`
			} `json:"build"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatal(err)
	}
	svc, ok := compose.Services["proxy"]
	if !ok {
		t.Fatal("no proxy service")
	}
	if _, err := os.Stat(filepath.Join("../example", svc.Build.Context, svc.Build.Dockerfile)); err != nil {
		t.Fatalf("the proxy's build: %v", err)
	}
	cfg, err := flags.Parse(svc.Command, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("the proxy rejects %q: %v", svc.Command, err)
	}
	if _, ok := compose.Services[cfg.Backend.Hostname()]; !ok {
		t.Fatalf("-backend %s names no service", cfg.Backend)
	}
	for _, addr := range []string{cfg.Listen, cfg.AdminListen} {
		_, p, _ := net.SplitHostPort(addr)
		if !slices.ContainsFunc(svc.Ports, func(s string) bool { return strings.HasSuffix(strings.Fields(s)[0], ":"+p) }) {
			t.Fatalf("%s is not published (ports %q)", addr, svc.Ports)
		}
	}
}
