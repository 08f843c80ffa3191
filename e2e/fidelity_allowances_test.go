package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
)

// allowanceCarriers are the kinds that carry allowances for their
// children in the workloads' chains (Pods carry none: nothing below them
// has a policy).
var allowanceCarriers = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "replicasets"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "apps", Version: "v1", Resource: "daemonsets"},
	{Group: "batch", Version: "v1", Resource: "jobs"},
	{Group: "batch", Version: "v1", Resource: "cronjobs"},
}

// allowanceTraces collects, per namespace, every allowance the proxy
// wrote on a workload object while it went through its life cycle.
// Allowances are pruned once consumed, so reading them at the end would
// miss most; a metadata watch sees each version.
type allowanceTraces struct {
	mu sync.Mutex
	// seen is keyed by namespace, then by the allowance's own JSON.
	seen map[string]map[string]allowance.Allowance
	// unreadable counts values of the annotation that did not parse.
	unreadable map[string]int
}

// watchAllowances watches the carriers' metadata in namespaces until the
// test ends.
func watchAllowances(t *testing.T, namespaces map[string]bool) *allowanceTraces {
	t.Helper()
	client, err := metadata.NewForConfig(cluster.Direct())
	mustf(t, err, "a metadata client")
	tr := &allowanceTraces{seen: map[string]map[string]allowance.Allowance{}, unreadable: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, gvr := range allowanceCarriers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				w, err := client.Resource(gvr).Watch(ctx, metav1.ListOptions{})
				if err != nil {
					time.Sleep(time.Second)
					continue
				}
				for ev := range w.ResultChan() {
					if ev.Type != watch.Added && ev.Type != watch.Modified {
						continue
					}
					if m, ok := ev.Object.(*metav1.PartialObjectMetadata); ok && namespaces[m.Namespace] {
						tr.record(m.Namespace, m.Annotations[allowance.Annotation])
					}
				}
				w.Stop()
			}
		}()
	}
	return tr
}

func (tr *allowanceTraces) record(ns, value string) {
	if value == "" {
		return
	}
	set, err := allowance.Parse(value)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if err != nil || len(set.Unknown) > 0 {
		tr.unreadable[ns]++
	}
	if tr.seen[ns] == nil {
		tr.seen[ns] = map[string]allowance.Allowance{}
	}
	for _, a := range set.Allowances {
		tr.seen[ns][fmt.Sprintf("%+v", a)] = a
	}
}

// allowanceTraceFigures sums up the allowances seen in one namespace.
type allowanceTraceFigures struct {
	seen int
	// incomplete lists allowances without an initiator, or with a hop
	// that does not name its object and field.
	incomplete []string
	// longest is the longest trace seen, rendered hop by hop.
	longest string
	hops    int
}

func (tr *allowanceTraces) figures(ns string) allowanceTraceFigures {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var f allowanceTraceFigures
	for _, k := range sortedKeys(tr.seen[ns]) {
		a := tr.seen[ns][k]
		f.seen++
		var hops []string
		complete := a.Initiator != "" && len(a.Trace) > 0
		for _, h := range a.Trace {
			complete = complete && h.Kind != "" && h.Name != "" && h.Field != ""
			hops = append(hops, fmt.Sprintf("%s/%s `%s`", h.Kind, h.Name, h.Field))
		}
		rendered := fmt.Sprintf("%s → %s %s (initiator %s)", strings.Join(hops, " → "), a.Kind, a.Mutation, a.Initiator)
		if !complete {
			f.incomplete = append(f.incomplete, rendered)
		}
		if len(a.Trace) > f.hops {
			f.hops, f.longest = len(a.Trace), rendered
		}
	}
	for i := 0; i < tr.unreadable[ns]; i++ {
		f.incomplete = append(f.incomplete, "an unreadable "+allowance.Annotation)
	}
	return f
}
