package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// scenario is a kind of write: where, under which parent, by whom.
type scenario struct {
	key, title   string
	ns, parent   string
	fieldManager string
	kind         goalKind
}

var (
	scExpected = scenario{"exp", "Intercepted writes: controller, parent reconciling (Expected)", nsWrites, "reconciling", fmController, goalInterceptedWrite}
	scOrigin   = scenario{"org", "Intercepted writes: another actor, stable parent (NewOrigin)", nsWrites, "stable", fmUser, goalInterceptedWrite}
	scDrift    = scenario{"drf", "Intercepted writes: controller, stable parent (drift, log mode; confirmed with kube-apiserver)", nsWrites, "stable", fmController, goalNone}
	scPass     = scenario{"pas", "Pass-through writes (namespace excluded from interception)", nsPass, "reconciling", fmController, goalNone}
)

var writeSeq atomic.Int64

// poolSize is how many ReplicaSets each (scenario, target) updates in turn.
// An object is written again only after 3*poolSize other writes, so the
// proxy's informer has seen the last write and the stored object comes
// from its cache, as it does for a controller that reads its own cache.
const poolSize = 12

type pools struct {
	mu sync.Mutex
	m  map[string]*appsv1.ReplicaSet // scenario/target/k
}

func (p *pools) get(sc scenario, t *target, k int) *appsv1.ReplicaSet {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[fmt.Sprintf("%s/%s/%d", sc.key, t.name, k)]
}

func (p *pools) set(sc scenario, t *target, k int, rs *appsv1.ReplicaSet) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[fmt.Sprintf("%s/%s/%d", sc.key, t.name, k)] = rs
}

func (h *Harness) replicaSet(sc scenario, name string) *appsv1.ReplicaSet {
	parent := h.parents[sc.ns+"/"+sc.parent]
	labels := map[string]string{"app": parent.Name, "set": name}
	zero := int32(0)
	yes := true
	return &appsv1.ReplicaSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: sc.ns, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: parent.Name, UID: parent.UID,
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(labels),
		},
	}
}

// setupPools creates the ReplicaSets the UPDATE and PATCH rows write,
// directly (not through a proxy).
func (h *Harness) setupPools(ctx context.Context, p *pools, scs ...scenario) error {
	type job struct {
		sc scenario
		t  *target
		k  int
	}
	var jobs []job
	for _, sc := range scs {
		for _, t := range h.targets {
			for k := 0; k < poolSize; k++ {
				jobs = append(jobs, job{sc, t, k})
			}
		}
	}
	return parallel(ctx, 8, len(jobs), func(i int) error {
		j := jobs[i]
		rs := h.replicaSet(j.sc, fmt.Sprintf("%s-%s-%02d", j.sc.key, j.t.name, j.k))
		out, err := h.admin.AppsV1().ReplicaSets(j.sc.ns).Create(ctx, rs, metav1.CreateOptions{FieldManager: j.sc.fieldManager})
		if err != nil {
			return err
		}
		out.TypeMeta = rs.TypeMeta
		p.set(j.sc, j.t, j.k, out)
		return nil
	})
}

var protobufInfo, _ = runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)

// writeOps are the operations of one scenario.
func (h *Harness) writeOps(sc scenario, p *pools) []struct {
	name string
	op   opFunc
} {
	rsPath := "/apis/apps/v1/namespaces/" + sc.ns + "/replicasets"
	parent := h.parents[sc.ns+"/"+sc.parent]
	owner := fmt.Sprintf(`[{"apiVersion":"apps/v1","kind":"Deployment","name":%q,"uid":%q,"controller":true,"blockOwnerDeletion":true}]`, parent.Name, parent.UID)
	q := "?fieldManager=" + url.QueryEscape(sc.fieldManager)
	// Every write sets a value never set before: each one changes the
	// desired state.
	value := func(int) int32 { return int32(10000 + writeSeq.Add(1)) }
	store := func(t *target, k int, r resp, proto bool) error {
		var rs appsv1.ReplicaSet
		if proto {
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(r.body, nil, nil)
			if err != nil {
				return err
			}
			rs = *obj.(*appsv1.ReplicaSet)
		} else if err := json.Unmarshal(r.body, &rs); err != nil {
			return err
		}
		rs.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"}
		p.set(sc, t, k, &rs)
		return nil
	}
	patch := func(contentType string, body func(name string, v int32) string, extraQuery string) opFunc {
		return func(ctx context.Context, t *target, i int) (time.Duration, error) {
			k := (i + poolSize*10) % poolSize
			name := p.get(sc, t, k).Name
			r, err := t.do(ctx, req{method: http.MethodPatch, path: rsPath + "/" + name + q + extraQuery,
				contentType: contentType, body: []byte(body(name, value(i)))})
			if err != nil {
				return 0, err
			}
			return r.elapsed, store(t, k, r, false)
		}
	}
	update := func(proto, dryRunFirst bool) opFunc {
		return func(ctx context.Context, t *target, i int) (time.Duration, error) {
			k := (i + poolSize*10) % poolSize
			rs := p.get(sc, t, k).DeepCopy()
			rs.Spec.MinReadySeconds = value(i)
			var (
				data        []byte
				err         error
				contentType = "application/json"
				accept      = "application/json"
			)
			if proto {
				contentType, accept = runtime.ContentTypeProtobuf, runtime.ContentTypeProtobuf
				data, err = runtime.Encode(scheme.Codecs.EncoderForVersion(protobufInfo.Serializer, appsv1.SchemeGroupVersion), rs)
			} else {
				data, err = json.Marshal(rs)
			}
			if err != nil {
				return 0, err
			}
			var first time.Duration
			if dryRunFirst && t != h.targets[kausality] {
				dry, err := t.do(ctx, req{method: http.MethodPut, path: rsPath + "/" + rs.Name + q + "&dryRun=All", contentType: contentType, accept: accept, body: data})
				if err != nil {
					return 0, err
				}
				first = dry.elapsed
			}
			r, err := t.do(ctx, req{method: http.MethodPut, path: rsPath + "/" + rs.Name + q, contentType: contentType, accept: accept, body: data})
			if err != nil {
				return 0, err
			}
			return first + r.elapsed, store(t, k, r, proto)
		}
	}
	create := func(ctx context.Context, t *target, _ int) (time.Duration, error) {
		rs := h.replicaSet(sc, fmt.Sprintf("c-%s-%s-%d", sc.key, t.name, h.created.Add(1)))
		data, err := json.Marshal(rs)
		if err != nil {
			return 0, err
		}
		r, err := t.do(ctx, req{method: http.MethodPost, path: rsPath + q, contentType: "application/json", body: data, want: http.StatusCreated})
		return r.elapsed, err
	}
	return []struct {
		name string
		op   opFunc
	}{
		{"CREATE ReplicaSet", create},
		{"UPDATE ReplicaSet (JSON)", update(false, false)},
		{"UPDATE ReplicaSet (protobuf)", update(true, false)},
		{driftFloorRowTitle, update(false, true)},
		{"PATCH json-patch", patch("application/json-patch+json", func(_ string, v int32) string {
			return fmt.Sprintf(`[{"op":"replace","path":"/spec/minReadySeconds","value":%d}]`, v)
		}, "")},
		{"PATCH merge-patch", patch("application/merge-patch+json", func(_ string, v int32) string {
			return fmt.Sprintf(`{"spec":{"minReadySeconds":%d}}`, v)
		}, "")},
		{"PATCH strategic-merge-patch", patch("application/strategic-merge-patch+json", func(_ string, v int32) string {
			return fmt.Sprintf(`{"spec":{"minReadySeconds":%d}}`, v)
		}, "")},
		{"PATCH apply (server-side apply, force)", patch("application/apply-patch+yaml", func(name string, v int32) string {
			// A controller applies its child with its controller
			// reference, as it created it.
			return fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":%q,"namespace":%q,"ownerReferences":%s},"spec":{"minReadySeconds":%d}}`,
				name, sc.ns, owner, v)
		}, "&force=true")},
		{"PATCH merge-patch, labels only", patch("application/merge-patch+json", func(_ string, v int32) string {
			return fmt.Sprintf(`{"metadata":{"labels":{"bench-seq":"%d"}}}`, v)
		}, "")},
	}
}

// driftRows are the drift scenario's rows, each with its note. Verdicts
// that rest on the proxy's computation are confirmed with kube-apiserver:
// these rows show what that costs.
var driftRows = map[string]string{
	"UPDATE ReplicaSet (JSON)": "drift: confirmed with a dry run of the write and a live GET of the parent, together, by design; " +
		"the PUT names the version of the proxy's copy of its last answer, so the copy stands for a live GET of the child",
	driftFloorRowTitle: "the floor of a confirmation by kube-apiserver: direct and the bare proxy are sent the same PUT as a dry run and then for real, " +
		"one after the other; kausality-proxy is sent it once and confirms it itself, so its ratio to bare is what it adds beyond those two requests",
	"PATCH merge-patch, labels only": "no desired change by the controller under a settled parent, and a patch of metadata only: " +
		"no stale cache can hide a change, so nothing is confirmed (an unconditional write would be: a live GET and a dry run)",
}

// writes measures every write of every scenario.
func (h *Harness) writes(ctx context.Context) ([]Row, *pools, error) {
	p := &pools{m: map[string]*appsv1.ReplicaSet{}}
	if err := h.setupAllowances(ctx); err != nil {
		return nil, nil, fmt.Errorf("allowances: %w", err)
	}
	if err := h.setupPools(ctx, p, scExpected, scOrigin, scDrift, scPass, scAllowance); err != nil {
		return nil, nil, err
	}
	// Warm the proxy up: the first intercepted writes start its informers
	// (replicasets, deployments, namespaces); wait until they answer.
	if err := h.warmInformers(ctx, p); err != nil {
		return nil, nil, err
	}
	if err := h.checkAllowancesEnforced(ctx, p); err != nil {
		return nil, nil, err
	}
	// Each rotated object is written through every target once before a
	// row is measured: another actor's first write of an object reads it
	// live once (the proxy keeps no copy of an object it never saw
	// written), which is not the steady state the rows measure.
	warm := max(h.cfg.Warmup, poolSize)
	var rows []Row
	for _, sc := range []scenario{scExpected, scOrigin, scPass} {
		for _, w := range h.writeOps(sc, p) {
			if w.name == driftFloorRowTitle {
				continue
			}
			r, err := h.row(ctx, sc.title, w.name, sc.kind, h.cfg.WriteN, warm, w.op)
			if err != nil {
				return nil, nil, err
			}
			rows = append(rows, r)
		}
	}
	// Only the writes these scenarios are measured for, each with its note.
	for _, noted := range []struct {
		sc    scenario
		notes map[string]string
	}{{scDrift, driftRows}, {scAllowance, allowanceRows}} {
		for _, w := range h.writeOps(noted.sc, p) {
			note, ok := noted.notes[w.name]
			if !ok {
				continue
			}
			r, err := h.row(ctx, noted.sc.title, w.name, noted.sc.kind, h.cfg.WriteN, warm, w.op)
			if err != nil {
				return nil, nil, err
			}
			r.Note = note
			rows = append(rows, r)
		}
	}
	return rows, p, nil
}

// warmInformers writes through kausality-proxy until a write needs no
// request of the proxy's own (its caches answer everything).
func (h *Harness) warmInformers(ctx context.Context, p *pools) error {
	k := h.targets[kausality]
	var op opFunc
	for _, w := range h.writeOps(scExpected, p) {
		if w.name == "PATCH merge-patch" {
			op = w.op
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		before, err := k.ctl.Stats(ctx)
		if err != nil {
			return err
		}
		if _, err := op(ctx, k, i); err != nil {
			return err
		}
		after, err := k.ctl.Stats(ctx)
		if err != nil {
			return err
		}
		if i >= 3 && diffUse(before, after, 1).OwnTotal() == 0 {
			logf("kausality-proxy caches warm after %d writes", i+1)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kausality-proxy still makes its own upstream requests for a write after 60s: %s", diffUse(before, after, 1))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
