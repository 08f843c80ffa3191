//go:build !kind

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// Attacks on deletecollection and eviction: a collection too large for
// the proxy to hold, a body-less deletecollection the proxy used to turn
// into a precondition failure, and an eviction's dry run hidden in a body
// format the proxy did not read.

const collectionLabel = "e2e.kausality.io/collection"

// collectionConfigMaps creates n ConfigMaps name-000.. owned by f's Widget
// and labelled with its name, each with a value of size bytes, straight
// in kube-apiserver.
func collectionConfigMaps(t *testing.T, f *wgFamily, name string, n, size int) {
	t.Helper()
	admin := directClient(t)
	value := strings.Repeat("x", size)
	for k := range n {
		cm := f.configMap(fmt.Sprintf("%s-%03d", name, k), map[string]string{"blob": value})
		cm.Labels = map[string]string{collectionLabel: f.widget}
		_, err := admin.CoreV1().ConfigMaps(f.ns).Create(context.Background(), cm, metav1.CreateOptions{})
		mustf(t, err, "ConfigMap %s", cm.Name)
	}
}

// collectionConfigMapsLeft counts f's labelled ConfigMaps that are not
// being deleted.
func collectionConfigMapsLeft(t *testing.T, f *wgFamily) int {
	t.Helper()
	list, err := directClient(t).CoreV1().ConfigMaps(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: collectionLabel + "=" + f.widget})
	mustf(t, err, "list ConfigMaps")
	left := 0
	for _, cm := range list.Items {
		if cm.DeletionTimestamp == nil {
			left++
		}
	}
	return left
}

// deleteCollectionRaw sends a body-less deletecollection of f's labelled
// ConfigMaps as a, reading the answer without holding it, and returns the
// code and, for an error, the Status.
func deleteCollectionRaw(t *testing.T, a *wgActor, f *wgFamily, dryRun bool) (int, error) {
	t.Helper()
	query := ""
	if dryRun {
		query = "&dryRun=All"
	}
	return deleteCollectionAs(t, a.cfg, f, query, nil)
}

// deleteCollectionAs deletes f's labelled ConfigMaps through cfg, with more
// query parameters (each after an &) and an optional JSON body.
func deleteCollectionAs(t *testing.T, cfg *rest.Config, f *wgFamily, query string, body []byte) (int, error) {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	mustf(t, err, "HTTP client")
	path := "/api/v1/namespaces/" + f.ns + "/configmaps?labelSelector=" + collectionLabel + "%3D" + f.widget + query
	var in io.Reader
	if body != nil {
		in = bytes.NewReader(body)
	}
	req, err := http.NewRequest(http.MethodDelete, strings.TrimSuffix(cfg.Host, "/")+path, in)
	mustf(t, err, "request")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	mustf(t, err, "DELETE %s", path)
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, statusError(t, resp.StatusCode, data)
}

func statusError(t *testing.T, code int, data []byte) error {
	t.Helper()
	var s metav1.Status
	if err := json.Unmarshal(data, &s); err != nil || s.Kind != "Status" {
		t.Fatalf("a %d answer that is not a Status: %s", code, data)
	}
	return &apierrors.StatusError{ErrStatus: s}
}

// peakHeapGrowth runs do and returns how far the process's heap in use
// rose above what it was before, sampled while do runs. The collector runs
// often meanwhile, so that garbage does not stand for what is held.
func peakHeapGrowth(do func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
			}
		}
	}()
	do()
	close(stop)
	<-done
	if p := peak.Load(); p > before.HeapInuse {
		return p - before.HeapInuse
	}
	return 0
}

// Dry-run deletecollections of a large collection, side by side, do not
// make the proxy hold the collection: it decides a page at a time from the
// objects' metadata. A refusal of the same collection still names the
// objects that held it back, and sends nothing upstream.
func TestAttackDeleteCollectionHoldsTheCollectionInMemory(t *testing.T) {
	const (
		objects = 300
		size    = 100 << 10
		// requests go side by side, as an attacker would send them.
		requests = 3
		// bound is far below one copy of the collection (objects*size,
		// about 30 MiB), and above a page of metadata many times over.
		bound = 24 << 20
	)
	f := newWGFamily(t, "col-mem", "enforce")
	collectionConfigMaps(t, f, "big", objects, size)
	f.initialize()

	var wg sync.WaitGroup
	codes := make([]int, requests)
	errs := make([]error, requests)
	growth := peakHeapGrowth(func() {
		for k := range requests {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[k], errs[k] = deleteCollectionRaw(t, f.alice, f, true)
			}()
		}
		wg.Wait()
	})
	t.Logf("%d dry-run deletecollections of %d ConfigMaps of %d KiB: the heap in use rose by %.1f MiB at most",
		requests, objects, size>>10, float64(growth)/(1<<20))
	if growth > bound {
		t.Errorf("the heap in use rose by %d bytes, more than %d: the proxy holds the collection", growth, bound)
	}
	for k := range requests {
		if codes[k] != http.StatusOK {
			t.Fatalf("dry-run deletecollection %d: %d %v", k, codes[k], errs[k])
		}
	}
	if left := collectionConfigMapsLeft(t, f); left != objects {
		t.Fatalf("%d ConfigMaps left after dry runs, want %d", left, objects)
	}

	freeze := "true"
	f.annotateWidget(map[string]*string{wgAnnFreeze: &freeze})
	waitRefused(t, "a dry-run deletecollection of the frozen Widget's ConfigMaps is refused", func() error {
		_, err := deleteCollectionRaw(t, f.alice, f, true)
		return err
	})
	env.Recorder.Watch(f.ns)
	_, err := deleteCollectionRaw(t, f.alice, f, false)
	s := wgStatus(t, err, 403, "a deletecollection of the frozen Widget's ConfigMaps")
	want := fmt.Sprintf("%d of the %d objects it would delete may not be deleted", objects, objects)
	if !strings.Contains(s.Message, "nothing was deleted") || !strings.Contains(s.Message, want) ||
		!strings.Contains(s.Message, fmt.Sprintf("and %d more", objects-10)) || !strings.Contains(s.Message, "Widget "+f.widget) {
		t.Errorf("the refusal does not say what held it back (%q, the first ten and the rest): %s", want, s.Message)
	}
	named := 0
	for k := range objects {
		if strings.Contains(s.Message, fmt.Sprintf("ConfigMap %s/big-%03d (Frozen)", f.ns, k)) {
			named++
		}
	}
	if named != 10 {
		t.Errorf("the refusal names %d ConfigMaps, want 10: %s", named, s.Message)
	}
	for _, r := range env.Recorder.Requests(f.ns) {
		if r.Method == http.MethodDelete {
			t.Errorf("the refused deletecollection reached kube-apiserver: %s %s?%s", r.Method, r.Path, r.RawQuery)
		}
	}
	if left := collectionConfigMapsLeft(t, f); left != objects {
		t.Fatalf("%d ConfigMaps left after the refusal, want %d", left, objects)
	}
}

// A deletecollection that names a resourceVersion is held to the list the
// proxy decided on as well. With a body, kube-apiserver would list again at
// that version or newer, so an object created after the proxy's list would
// be deleted undecided: the proxy pins the request to its own list, which
// it made with the caller's version, so it is at least as new as asked.
// Without a body, kube-apiserver makes the query's resourceVersion every
// delete's precondition, which no object created or changed after the
// list meets: the request goes as it came, and is answered as it would be
// without the proxy.
func TestAttackDeleteCollectionNamingAResourceVersion(t *testing.T) {
	ctx := context.Background()
	listVersion := func(f *wgFamily) string {
		list, err := directClient(t).CoreV1().ConfigMaps(f.ns).List(ctx, metav1.ListOptions{LabelSelector: collectionLabel + "=" + f.widget})
		mustf(t, err, "list ConfigMaps")
		return list.ResourceVersion
	}
	deletes := func(ns string) []framework.Recorded {
		var out []framework.Recorded
		for _, r := range env.Recorder.Requests(ns) {
			if r.Method == http.MethodDelete {
				out = append(out, r)
			}
		}
		return out
	}

	f := newWGFamily(t, "col-rv-body", "enforce")
	collectionConfigMaps(t, f, "b", 3, 16)
	f.initialize()
	version := listVersion(f)
	env.Recorder.Watch(f.ns)
	code, err := deleteCollectionAs(t, f.alice.cfg, f, "&resourceVersion="+version, []byte(`{"propagationPolicy":"Background"}`))
	if err != nil || code != http.StatusOK {
		t.Fatalf("alice's deletecollection at resourceVersion %s with a body: %d %v", version, code, err)
	}
	if left := collectionConfigMapsLeft(t, f); left != 0 {
		t.Errorf("%d ConfigMaps left after the deletecollection, want none", left)
	}
	sent := deletes(f.ns)
	if len(sent) != 1 {
		t.Fatalf("%d deletes reached kube-apiserver, want 1: %+v", len(sent), sent)
	}
	q, err := url.ParseQuery(sent[0].RawQuery)
	mustf(t, err, "forwarded query")
	if q.Get("resourceVersionMatch") != string(metav1.ResourceVersionMatchExact) || q.Get("resourceVersion") == "" {
		t.Errorf("the forwarded deletecollection %q is not pinned to the proxy's list", sent[0].RawQuery)
	}
	if got, err := strconv.ParseInt(q.Get("resourceVersion"), 10, 64); err != nil || got < mustInt(t, version) {
		t.Errorf("pinned to resourceVersion %q, older than the caller's %s", q.Get("resourceVersion"), version)
	}
	if string(sent[0].Body) != `{"propagationPolicy":"Background"}` {
		t.Errorf("the caller's options were forwarded as %s", sent[0].Body)
	}

	bodyless := newWGFamily(t, "col-rv-nobody", "enforce")
	collectionConfigMaps(t, bodyless, "n", 2, 16)
	bodyless.initialize()
	version = listVersion(bodyless)
	// Created after the caller's list: a precondition on the list's
	// version cannot hold for it.
	collectionConfigMaps(t, bodyless, "later", 1, 16)
	directCode, directErr := deleteCollectionAs(t, cluster.Direct(), bodyless, "&resourceVersion="+version+"&dryRun=All", nil)
	env.Recorder.Watch(bodyless.ns)
	code, err = deleteCollectionAs(t, bodyless.alice.cfg, bodyless, "&resourceVersion="+version, nil)
	if code != directCode || !apierrors.IsConflict(err) || !apierrors.IsConflict(directErr) {
		t.Fatalf("a body-less deletecollection at resourceVersion %s: %d %v through the proxy, %d %v directly (as a dry run); want both 409: every delete is preconditioned on that version",
			version, code, err, directCode, directErr)
	}
	if left := collectionConfigMapsLeft(t, bodyless); left == 0 {
		t.Error("every ConfigMap was deleted despite the precondition")
	}
	for _, r := range deletes(bodyless.ns) {
		if strings.Contains(r.RawQuery, "resourceVersionMatch") || len(r.Body) > 0 {
			t.Errorf("the body-less deletecollection was rewritten: %s?%s %s", r.Path, r.RawQuery, r.Body)
		}
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	mustf(t, err, "resourceVersion %q", s)
	return n
}

// A body-less deletecollection (kubectl delete --all, a plain DELETE of the
// collection) deletes what it selects: the proxy pins it to the list it
// decided on without making that list's resourceVersion a precondition of
// every delete (a 409 the caller never asked for). The children of a
// frozen parent are still held.
func TestAttackBodylessDeleteCollectionFailsOnItsOwnPin(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "col-nobody", "enforce")
	collectionConfigMaps(t, f, "c", 3, 16)
	f.initialize()
	// Changed after it was created: its resourceVersion is not the
	// list's.
	cm, err := directClient(t).CoreV1().ConfigMaps(f.ns).Get(ctx, "c-001", metav1.GetOptions{})
	mustf(t, err, "get ConfigMap c-001")
	cm.Data["more"] = "changed"
	_, err = directClient(t).CoreV1().ConfigMaps(f.ns).Update(ctx, cm, metav1.UpdateOptions{})
	mustf(t, err, "change ConfigMap c-001")

	env.Recorder.Watch(f.ns)
	code, err := deleteCollectionRaw(t, f.alice, f, false)
	if err != nil || code != http.StatusOK {
		t.Fatalf("alice's body-less deletecollection: %d %v", code, err)
	}
	if left := collectionConfigMapsLeft(t, f); left != 0 {
		t.Errorf("%d ConfigMaps left after the deletecollection, want none", left)
	}
	pinned := false
	for _, r := range env.Recorder.Requests(f.ns) {
		if r.Method == http.MethodDelete && strings.Contains(r.RawQuery, "resourceVersionMatch=Exact") {
			pinned = true
		}
	}
	if !pinned {
		t.Errorf("the forwarded deletecollection was not pinned to the decided list: %+v", env.Recorder.Requests(f.ns))
	}

	held := newWGFamily(t, "col-nobody-held", "enforce")
	collectionConfigMaps(t, held, "h", 2, 16)
	held.initialize()
	freeze := "true"
	held.annotateWidget(map[string]*string{wgAnnFreeze: &freeze})
	waitRefused(t, "a dry-run deletecollection of the frozen Widget's ConfigMaps is refused", func() error {
		_, err := deleteCollectionRaw(t, held.alice, held, true)
		return err
	})
	env.Recorder.Watch(held.ns)
	_, err = deleteCollectionRaw(t, held.alice, held, false)
	s := wgStatus(t, err, 403, "a body-less deletecollection of the frozen Widget's ConfigMaps")
	for _, name := range []string{"h-000", "h-001"} {
		if !strings.Contains(s.Message, "ConfigMap "+held.ns+"/"+name+" (Frozen)") {
			t.Errorf("the refusal does not name ConfigMap %s: %s", name, s.Message)
		}
	}
	for _, r := range env.Recorder.Requests(held.ns) {
		if r.Method == http.MethodDelete {
			t.Errorf("the refused deletecollection reached kube-apiserver: %s %s?%s", r.Method, r.Path, r.RawQuery)
		}
	}
	if left := collectionConfigMapsLeft(t, held); left != 2 {
		t.Errorf("%d of the frozen Widget's ConfigMaps left, want 2", left)
	}
}

// An eviction whose body is YAML or protobuf and says dryRun is a dry run:
// it spends no once approval. The real eviction then does.
func TestAttackEvictionDryRunInYAMLOrProtobufSpendsOnceApproval(t *testing.T) {
	ctx := context.Background()
	// Pods gated like any child: the controller's delete of one under a
	// settled parent is drift, and a once approval lets it through.
	setConfig(t, gatedConfig)
	f := newWGFamily(t, "col-evict", "enforce")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: f.ns, OwnerReferences: []metav1.OwnerReference{f.ownerRef()}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	// The controller creates it: its delete of it after the Widget
	// settled is drift.
	created, err := f.ctrl.kube.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the controller creates Pod p")
	f.initialize()
	approval := fmt.Sprintf(`[{"apiVersion":"v1","kind":"Pod","name":"p","generation":%d,"mode":"once"}]`, created.Generation)
	f.annotateWidget(map[string]*string{wgAnnApprovals: &approval})
	approved := func() bool { return f.getWidget().GetAnnotations()[wgAnnApprovals] != "" }

	dryRunOptions := &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	evictVia := func(contentType string, options *metav1.DeleteOptions) error {
		cfg := rest.CopyConfig(f.ctrl.cfg)
		cfg.ContentType = contentType
		c, err := kubernetes.NewForConfig(cfg)
		mustf(t, err, "%s client", contentType)
		return c.CoreV1().Pods(f.ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: f.ns}, DeleteOptions: options})
	}
	// A dry run the proxy has always recognized waits for its cache to
	// see the approval.
	f.settle("Allow/DriftApproved", func() error {
		return f.ctrl.kube.CoreV1().RESTClient().Post().Namespace(f.ns).Resource("pods").Name("p").SubResource("eviction").
			Param("dryRun", metav1.DryRunAll).Body(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: f.ns}}).Do(ctx).Error()
	})

	yamlBody := "apiVersion: policy/v1\nkind: Eviction\nmetadata:\n  name: p\n  namespace: " + f.ns + "\ndeleteOptions:\n  dryRun: [All]\n"
	err = f.ctrl.kube.CoreV1().RESTClient().Post().Namespace(f.ns).Resource("pods").Name("p").SubResource("eviction").
		SetHeader("Content-Type", "application/yaml").Body([]byte(yamlBody)).Do(ctx).Error()
	mustf(t, err, "the controller's dry-run eviction with a YAML body")
	if !approved() {
		t.Fatal("a dry-run eviction with a YAML body spent the once approval")
	}
	mustf(t, evictVia("application/vnd.kubernetes.protobuf", dryRunOptions), "the controller's dry-run eviction with a protobuf body")
	if !approved() {
		t.Fatal("a dry-run eviction with a protobuf body spent the once approval")
	}
	if _, err := directClient(t).CoreV1().Pods(f.ns).Get(ctx, "p", metav1.GetOptions{}); err != nil {
		t.Fatalf("the Pod is gone after dry runs: %v", err)
	}

	// The approval was there to spend: the real eviction spends it.
	mustf(t, evictVia("application/vnd.kubernetes.protobuf", &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}), "the controller's eviction")
	if approved() {
		t.Error("the real eviction did not spend the once approval")
	}
}
