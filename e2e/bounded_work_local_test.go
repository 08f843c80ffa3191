//go:build !kind

package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// These run against the in-process proxy of the local provider, whose
// goroutines and allocations are this test process's own.

// Resource names in another spelling are not resources: each gets
// kube-apiserver's 404, and none starts a cache of its own (a cluster-wide
// list and watch that would retry a 404 forever).
func TestResourceSpellingsStartNoCaches(t *testing.T) {
	ns := newNamespace(t, "spelling")
	admin, err := cluster.UserThroughProxy("spelling-admin", "system:masters")
	mustf(t, err, "admin")
	c := rawClient(t, certOf(t, admin))
	// Warm up: the canonical spelling's cache, the proxy's client pools.
	code, body := rawDo(t, c, http.MethodPost, "/api/v1/namespaces/"+ns+"/configmaps", "application/json", `{"metadata":{"name":"x"}}`, nil)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	time.Sleep(time.Second)
	before := runtime.NumGoroutine()
	start := time.Now()
	for i := 0; i < 200; i++ {
		spelling := spellingOf("configmaps", i)
		code, body := rawDo(t, c, http.MethodPatch, "/api/v1/namespaces/"+ns+"/"+spelling+"/x", "application/merge-patch+json", `{"data":{"a":"b"}}`, nil)
		if code != http.StatusNotFound {
			t.Fatalf("%s: code %d, want 404: %s", spelling, code, body)
		}
		if s := decodeStatus(t, body); s.Reason != metav1.StatusReasonNotFound {
			t.Fatalf("%s: %+v", spelling, s)
		}
	}
	time.Sleep(2 * time.Second)
	// Old code: four goroutines per informer, 800 for 200 spellings.
	if after := runtime.NumGoroutine(); after > before+40 {
		t.Fatalf("goroutines grew from %d to %d over 200 misspelled writes", before, after)
	}
	lists := auditedSince(t, start, func(e auditv1.Event) bool {
		return e.ObjectRef != nil && e.ObjectRef.Resource != "configmaps" && strings.EqualFold(e.ObjectRef.Resource, "configmaps")
	})
	if len(lists) > 0 {
		t.Fatalf("the proxy asked kube-apiserver about misspelled resources:%s", describeEvents(lists))
	}
}

// spellingOf returns the i-th distinct mixed-case spelling of s (never s).
func spellingOf(s string, i int) string {
	b := []byte(s)
	mask := i + 1
	for j := range b {
		if mask&(1<<j) != 0 {
			b[j] = strings.ToUpper(string(b[j]))[0]
		}
	}
	return string(b)
}

// An object nested thousands of levels deep costs memory in proportion to
// its size, not to the square of its depth.
func TestDeeplyNestedWritesStayWithinAMemoryBudget(t *testing.T) {
	ns := newNamespace(t, "deep")
	admin, err := cluster.UserThroughProxy("deep-admin", "system:masters")
	mustf(t, err, "admin")
	_, err = clientFor(t, admin).CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	mustf(t, err, "create")
	c := rawClient(t, certOf(t, admin))
	const depth = 9000
	patch := `{"spec":` + strings.Repeat(`{"a":`, depth) + `1` + strings.Repeat(`}`, depth) + `}`
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	allocated := ms.TotalAlloc
	for i := 0; i < 2; i++ {
		rawDo(t, c, http.MethodPatch, "/api/v1/namespaces/"+ns+"/configmaps/x", "application/merge-patch+json", patch, nil)
	}
	runtime.ReadMemStats(&ms)
	// Quadratic paths cost about 80 MB per request at this depth; the
	// whole test process, watches included, stays well below.
	const budget = 100 << 20
	if grew := ms.TotalAlloc - allocated; grew > budget {
		t.Fatalf("2 deeply nested patches allocated %d MiB, over the %d MiB budget", grew>>20, budget>>20)
	}
}

// A body that trickles in is cut at the request's deadline: the write is
// refused with 504 and nothing reaches kube-apiserver.
func TestSlowBodyIsCutAtTheDeadline(t *testing.T) {
	ns := newNamespace(t, "slowbody")
	admin, err := cluster.UserThroughProxy("slow-admin", "system:masters")
	mustf(t, err, "admin")
	c := rawClient(t, certOf(t, admin))
	name := "slow-" + utilrand.String(5)
	pr, pw := io.Pipe()
	stop := make(chan struct{})
	go func() {
		defer pw.Close()
		_, _ = pw.Write([]byte(`{"metadata":{"name":"` + name + `"},`))
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
				if _, err := pw.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	defer close(stop)
	// ?timeout=1s: the proxy's deadline for this request is 2s.
	req, err := http.NewRequest(http.MethodPost, cluster.ProxyEndpoint().URL+"/api/v1/namespaces/"+ns+"/configmaps?timeout=1s", pr)
	mustf(t, err, "request")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	mustf(t, err, "the slow write")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("code %d, want 504: %s", resp.StatusCode, body)
	}
	if s := decodeStatus(t, body); s.Reason != metav1.StatusReasonTimeout || !strings.Contains(s.Message, "request body") {
		t.Fatalf("status %+v", s)
	}
	marker := "slow-control-" + utilrand.String(5)
	_, err = clientFor(t, admin).CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: marker}}, metav1.CreateOptions{})
	mustf(t, err, "control write")
	waitAudited(t, marker)
	if got := auditedSince(t, time.Time{}, func(e auditv1.Event) bool {
		return strings.Contains(e.RequestURI, "/namespaces/"+ns+"/configmaps?timeout")
	}); len(got) > 0 {
		t.Fatalf("the slow write reached kube-apiserver:%s", describeEvents(got))
	}
}

// The proxy's request metrics carry the verb and resource of each request.
func TestRequestMetricsCarryVerbAndResource(t *testing.T) {
	ns := newNamespace(t, "metrics")
	admin, err := cluster.UserThroughProxy("metrics-admin", "system:masters")
	mustf(t, err, "admin")
	_, err = clientFor(t, admin).CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	mustf(t, err, "list")
	var text string
	eventually(t, 10*time.Second, "the list is counted", func() error {
		resp, err := http.Get(env.MetricsURL + "/metrics")
		if err != nil {
			return err
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text = string(data)
		if !strings.Contains(text, `kausality_proxy_requests_total{code="200",resource="configmaps",verb="list"}`) {
			return errors.New("no list of configmaps in the request metrics")
		}
		return nil
	})
	if strings.Contains(text, `verb="unknown"`) {
		t.Fatalf("requests labelled verb=\"unknown\":\n%s", grepMetric(text, "kausality_proxy_requests_total"))
	}
}

func grepMetric(text, name string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A JSON patch of doubling copies, a few kilobytes long, from a caller who
// may patch ConfigMaps: kube-apiserver's copy limit holds at the proxy, the
// answer is kube-apiserver's 422, memory stays within a budget, and the
// patch never reaches kube-apiserver.
func TestJSONPatchAmplificationIsRefusedWithinABudget(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "amplify")
	user := "patcher-" + utilrand.String(5)
	_, err := directClient(t).RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "patcher"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	mustf(t, err, "binding")
	_, err = directClient(t).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Data: map[string]string{"a": strings.Repeat("a", 1024)}}, metav1.CreateOptions{})
	mustf(t, err, "configmap")
	// RBAC takes a moment to see a new binding; ask kube-apiserver itself
	// before the proxy is asked (which would cache a denial).
	eventually(t, 30*time.Second, "the binding takes effect", func() error {
		sar, err := directClient(t).AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "patch", Resource: "configmaps", Namespace: ns},
		}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return errors.New("not yet allowed: " + sar.Status.Reason)
		}
		return nil
	})
	cfg, err := cluster.UserThroughProxy(user)
	mustf(t, err, "user")
	c := rawClient(t, certOf(t, cfg))

	// Doubling through a list: x becomes [x, x] with every step.
	ops := []string{`{"op":"add","path":"/data/x","value":["` + strings.Repeat("a", 1024) + `"]}`}
	for i := 0; i < 22; i++ {
		ops = append(ops, `{"op":"copy","from":"/data/x","path":"/data/x/-"}`)
	}
	patch := "[" + strings.Join(ops, ",") + "]"
	start := time.Now()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	allocated := ms.TotalAlloc
	code, body := rawDo(t, c, http.MethodPatch, "/api/v1/namespaces/"+ns+"/configmaps/x", "application/json-patch+json", patch, nil)
	runtime.ReadMemStats(&ms)
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "exceeding the limit") {
		t.Fatalf("code %d, want kube-apiserver's 422 for the copy limit: %s", code, body)
	}
	const budget = 64 << 20
	if grew := ms.TotalAlloc - allocated; grew > budget {
		t.Fatalf("the patch allocated %d MiB, over the %d MiB budget", grew>>20, budget>>20)
	}
	marker := "amplify-control-" + utilrand.String(5)
	_, err = clientFor(t, cfg).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: marker}}, metav1.CreateOptions{})
	mustf(t, err, "control write")
	waitAudited(t, marker)
	if got := auditedSince(t, start, func(e auditv1.Event) bool {
		return e.Verb == "patch" && e.ObjectRef != nil && e.ObjectRef.Namespace == ns
	}); len(got) > 0 {
		t.Fatalf("the patch reached kube-apiserver:%s", describeEvents(got))
	}
}
