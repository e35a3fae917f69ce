package deploy

import (
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"

	agentflags "github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
)

func TestAgentDaemonSet(t *testing.T) {
	objs := decodeManifests(t, "kubernetes/agent-daemonset.yaml")
	dss := objectsOf[appsv1.DaemonSet](objs)
	if len(dss) != 1 {
		t.Fatalf("%d DaemonSets, want 1", len(dss))
	}
	ds := dss[0]
	spec := ds.Spec.Template.Spec
	if !spec.HostPID {
		t.Error("hostPID is not set: NVML's pids would not be the pod's /proc")
	}
	if spec.HostNetwork || spec.HostIPC {
		t.Error("the agent needs neither the host's network nor its IPC namespace")
	}
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" {
		t.Error("runtimeClassName is not nvidia")
	}
	if sel := ds.Spec.Selector.MatchLabels; len(sel) == 0 {
		t.Error("no selector")
	} else {
		for k, v := range sel {
			if ds.Spec.Template.Labels[k] != v {
				t.Errorf("selector %s=%s does not match the pod's labels", k, v)
			}
		}
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod does not run as non-root")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the pod mounts an API token it never uses")
	}
	sas := objectsOf[corev1.ServiceAccount](objs)
	if len(sas) != 1 || sas[0].Name != spec.ServiceAccountName {
		t.Errorf("ServiceAccount %q is not defined in the file", spec.ServiceAccountName)
	}

	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("container is privileged")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privilege escalation is allowed")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("root filesystem is writable")
	case sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || !containsCap(sc.Capabilities.Drop, "ALL"):
		t.Error("capabilities are not all dropped")
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("volume %s is mounted writable", m.Name)
		}
	}
	for q := range c.Resources.Requests {
		if strings.Contains(string(q), "nvidia.com") {
			t.Errorf("the agent requests %s: it would take a GPU from the workloads", q)
		}
	}
	for q := range c.Resources.Limits {
		if strings.Contains(string(q), "nvidia.com") {
			t.Errorf("the agent limits %s: it would take a GPU from the workloads", q)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["NVIDIA_DRIVER_CAPABILITIES"] != "utility" || env["NVIDIA_VISIBLE_DEVICES"] != "all" {
		t.Errorf("NVIDIA_* = %q, %q; want utility, all", env["NVIDIA_DRIVER_CAPABILITIES"], env["NVIDIA_VISIBLE_DEVICES"])
	}

	// The arguments and the variables parse with the agent's own flag
	// table; the admin address's port is the port the probes reach.
	cfg, err := agentflags.Parse(c.Args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	if err != nil {
		t.Fatalf("the agent rejects its arguments %q: %v", c.Args, err)
	}
	if cfg.Simulate {
		t.Error("the DaemonSet simulates GPUs")
	}
	// RAPL and Intel hwmon read the host's /sys, mounted read-only where
	// -sys-root points; no other hostPath.
	sysMounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.HostPath == nil {
				continue
			}
			if v.HostPath.Path != "/sys" {
				t.Errorf("hostPath %s mounted: the agent needs only /sys", v.HostPath.Path)
			}
			if m.MountPath == cfg.SysRoot && m.ReadOnly {
				sysMounted = true
			}
		}
	}
	if !sysMounted {
		t.Errorf("no read-only mount of the host's /sys at -sys-root %q", cfg.SysRoot)
	}
	_, p, err := net.SplitHostPort(cfg.AdminListen)
	if err != nil {
		t.Fatalf("-admin-listen=%q: %v", cfg.AdminListen, err)
	}
	adminPort, _ := strconv.Atoi(p)
	if strings.Contains(strings.Join(c.Args, " "), "simulate") {
		t.Error("the DaemonSet simulates GPUs")
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, pr := range []struct {
		name, path string
		probe      *corev1.Probe
	}{{"liveness", agentflags.HealthPath, c.LivenessProbe}, {"readiness", agentflags.ReadyPath, c.ReadinessProbe}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", pr.name)
			continue
		}
		g := pr.probe.HTTPGet
		port := g.Port.IntVal
		if g.Port.StrVal != "" {
			port = ports[g.Port.StrVal]
		}
		if g.Path != pr.path || int(port) != adminPort {
			t.Errorf("%s probe %s on port %d; want %s on the admin port %d", pr.name, g.Path, port, pr.path, adminPort)
		}
	}

	// With OTEL_METRICS_EXPORTER=prometheus the exporter must listen
	// beyond loopback, on the port the container declares.
	if h := env["OTEL_EXPORTER_PROMETHEUS_HOST"]; h == "" || h == "localhost" || strings.HasPrefix(h, "127.") {
		t.Errorf("OTEL_EXPORTER_PROMETHEUS_HOST=%q: a Prometheus exporter would answer only inside the pod", h)
	}
	if strconv.Itoa(int(ports["metrics"])) != env["OTEL_EXPORTER_PROMETHEUS_PORT"] {
		t.Errorf("container port metrics %d, OTEL_EXPORTER_PROMETHEUS_PORT %q", ports["metrics"], env["OTEL_EXPORTER_PROMETHEUS_PORT"])
	}

	// The namespace the objects live in is created by the file, and the
	// priority class is the file's own: system-node-critical is refused
	// outside kube-system on many managed clusters.
	nss := objectsOf[corev1.Namespace](objs)
	if len(nss) != 1 || nss[0].Name != ds.Namespace || sas[0].Namespace != ds.Namespace {
		t.Errorf("the DaemonSet's namespace %q is not the file's Namespace object", ds.Namespace)
	}
	// hostPID is beyond the baseline Pod Security Standard: the namespace
	// must admit privileged pods, or a cluster enforcing baseline by
	// default refuses the agent.
	if spec.HostPID && len(nss) == 1 && nss[0].Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("the Namespace's labels %v lack pod-security.kubernetes.io/enforce: privileged, which hostPID needs", nss[0].Labels)
	}
	pcs := objectsOf[schedulingv1.PriorityClass](objs)
	switch {
	case strings.HasPrefix(spec.PriorityClassName, "system-") && ds.Namespace != "kube-system":
		t.Errorf("priorityClassName %s outside kube-system", spec.PriorityClassName)
	case spec.PriorityClassName != "" && !strings.HasPrefix(spec.PriorityClassName, "system-") &&
		(len(pcs) != 1 || pcs[0].Name != spec.PriorityClassName || pcs[0].Value >= 1_000_000_000 || pcs[0].GlobalDefault):
		t.Errorf("priorityClassName %s: want it defined in the file, below the system classes, not the default", spec.PriorityClassName)
	}
	checkGPUNodes(t, spec)

	// The image's Dockerfile exposes the same port, runs as non-root and
	// asks the toolkit for the management library only.
	df, err := os.ReadFile("../cmd/otelenergy-agent/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := string(df)
	for _, want := range []string{"EXPOSE " + strconv.Itoa(adminPort), "USER 65532", "NVIDIA_DRIVER_CAPABILITIES=utility", "CGO_ENABLED=1", "-trimpath"} {
		if !strings.Contains(d, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

func containsCap(cs []corev1.Capability, c corev1.Capability) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// checkGPUNodes checks that a pod runs only on GPU nodes, as GPU Feature
// Discovery labels them, with the NVIDIA runtime class.
func checkGPUNodes(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	if spec.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("nodeSelector %v lacks nvidia.com/gpu.present=true (GPU Feature Discovery's label)", spec.NodeSelector)
	}
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" {
		t.Error("runtimeClassName is not nvidia")
	}
}

// TestImagesPinned checks every container image of every manifest: a
// version tag or a digest, never latest, another name, or no tag.
func TestImagesPinned(t *testing.T) {
	for _, file := range []string{"kubernetes/agent-daemonset.yaml", "kubernetes/proxy-vllm.yaml"} {
		var pods []corev1.PodSpec
		objs := decodeManifests(t, file)
		for _, d := range objectsOf[appsv1.DaemonSet](objs) {
			pods = append(pods, d.Spec.Template.Spec)
		}
		for _, d := range objectsOf[appsv1.Deployment](objs) {
			pods = append(pods, d.Spec.Template.Spec)
		}
		for _, p := range pods {
			for _, c := range append(p.InitContainers, p.Containers...) {
				if !pinned(c.Image) {
					t.Errorf("%s: container %s image %q is not pinned to a version or digest", file, c.Name, c.Image)
				}
			}
		}
	}
}

// versionTag is a release's tag: v1, 1.2, v0.11.0, 2.5.1-cuda12.
var versionTag = regexp.MustCompile(`^v?[0-9]+(\.[0-9]+)*([-+][0-9A-Za-z.-]+)?$`)

// pinned reports whether image names a digest or a version tag. A version
// tag can still be pushed again; a digest is the production pin
// (docs/agent.md).
func pinned(image string) bool {
	if _, digest, ok := strings.Cut(image, "@sha256:"); ok {
		return len(digest) == 64 && strings.Trim(digest, "0123456789abcdef") == ""
	}
	name := image[strings.LastIndex(image, "/")+1:] // a registry's port is no tag
	_, tag, ok := strings.Cut(name, ":")
	return ok && versionTag.MatchString(tag)
}

func TestPinned(t *testing.T) {
	for image, want := range map[string]bool{
		"ghcr.io/otelenergy/otelenergy-agent:v0.1.0": true,
		"vllm/vllm-openai:v0.11.0":                   true,
		"nvcr.io/nvidia/cuda:12.4.1-base":            true,
		"img@sha256:" + strings.Repeat("ab", 32):     true,
		"img:v1@sha256:" + strings.Repeat("0", 64):   true,
		"ghcr.io/otelenergy/otelenergy-agent":        false,
		"ghcr.io/otelenergy/otelenergy-agent:latest": false,
		"registry.local:5000/agent":                  false,
		"agent:main":                                 false,
		"agent:":                                     false,
		"img@sha256:abc":                             false,
	} {
		if got := pinned(image); got != want {
			t.Errorf("pinned(%q) = %v, want %v", image, got, want)
		}
	}
}
