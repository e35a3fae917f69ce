package deploy

import (
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// agentFlags returns the flag names the agent's main defines, read from
// its source: the deploy module does not import the binaries.
func agentFlags(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile("../cmd/otelenergy-agent/main.go")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`fs\.\w+Var\(&o\.\w+, "([a-z-]+)"`).FindAllSubmatch(src, -1) {
		flags[string(m[1])] = true
	}
	if !flags["admin-listen"] || !flags["simulate"] {
		t.Fatalf("found flags %v: the pattern no longer matches main.go", flags)
	}
	return flags
}

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

	flags := agentFlags(t)
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

	// Every argument is a flag the agent defines; the admin address's
	// port is the port the probes reach.
	adminPort := 8081 // the flag's default
	for _, a := range c.Args {
		name, val, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			t.Errorf("argument %q names no flag of the agent", a)
		}
		if name == "admin-listen" {
			_, p, err := net.SplitHostPort(val)
			if err != nil {
				t.Fatalf("-admin-listen=%q: %v", val, err)
			}
			adminPort, _ = strconv.Atoi(p)
		}
	}
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
	}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
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
