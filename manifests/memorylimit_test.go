package manifests

import (
	"os"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// goMemoryLimit parses GOMEMLIMIT as the Go runtime does: a number of
// bytes with an optional unit (B, KiB, MiB, GiB, TiB).
func goMemoryLimit(t *testing.T, v string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		bytes  int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			count, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("GOMEMLIMIT %q: %v", v, err)
			}
			return count * u.bytes
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("GOMEMLIMIT %q: %v", v, err)
	}
	return n
}

// The proxy's Go heap is held to 90% of its container's memory limit: the
// rest is for what the Go runtime does not count in its limit's reach
// early enough (stacks, buffers, pages not yet returned), so a cache that
// grows meets the garbage collector before the OOM killer.
func TestGoMemoryLimitIsNinetyPercentOfTheContainers(t *testing.T) {
	data, err := os.ReadFile("base/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var proxy *corev1.Container
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "kausality-proxy" {
			proxy = &d.Spec.Template.Spec.Containers[i]
		}
	}
	if proxy == nil {
		t.Fatal("no container kausality-proxy")
	}
	limit, ok := proxy.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Fatal("no memory limit")
	}
	var goLimit string
	for _, e := range proxy.Env {
		if e.Name == "GOMEMLIMIT" {
			goLimit = e.Value
		}
	}
	if goLimit == "" {
		t.Fatal("GOMEMLIMIT is not set to a value")
	}
	got, want := goMemoryLimit(t, goLimit), limit.Value()*9/10
	if diff := got - want; diff < -(1<<20) || diff > 1<<20 {
		t.Errorf("GOMEMLIMIT %s is %d bytes, want 90%% of the memory limit %s (%d bytes), within 1 MiB", goLimit, got, limit.String(), want)
	}
}
