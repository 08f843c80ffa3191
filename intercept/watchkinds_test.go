package intercept_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	kausalitytest "github.com/kausality-io/kausality-proxy/internal/testutil"
)

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// withWatchCandidates serves ConfigMaps, Pods and Widgets (a custom
// resource): the Pod "driver", whose observedGeneration the kubelet owns
// (as every Pod's on a cluster that tracks it), the Widget "recorded",
// whose controllers record names the operator, and the Widget "unrecorded",
// whose controller is told from managedFields only, and the Widget
// "forged", whose controllers record names mallory: anyone who may update
// a Widget at kube-apiserver directly can write one. Each has settled.
func withWatchCandidates(s *serveSetup) {
	verbs := metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"}
	s.resources = append(s.resources,
		servedResource{gvr: configmapsGVR, listKind: "ConfigMapList", resource: metav1.APIResource{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: verbs}},
		servedResource{gvr: podsGVR, listKind: "PodList", resource: metav1.APIResource{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: verbs}},
		servedResource{gvr: widgetsGVR, listKind: "WidgetList", resource: metav1.APIResource{Name: "widgets", Namespaced: true, Kind: "Widget", Verbs: verbs}})
	owning := func(manager string) []interface{} {
		return []interface{}{map[string]interface{}{"manager": manager, "operation": "Update", "subresource": "status", "apiVersion": "v1", "fieldsType": "FieldsV1",
			"fieldsV1": map[string]interface{}{"f:status": map[string]interface{}{"f:observedGeneration": map[string]interface{}{}}}}}
	}
	settled := func(apiVersion, kind, name string, ann map[string]interface{}, manager string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": apiVersion, "kind": kind,
			"metadata": map[string]interface{}{"name": name, "namespace": "apps", "uid": name + "-uid", "resourceVersion": "400", "generation": int64(1),
				"annotations": ann, "managedFields": owning(manager)},
			"spec": map[string]interface{}{"size": int64(1)},
			"status": map[string]interface{}{"observedGeneration": int64(1), "phase": "Running",
				"conditions": []interface{}{map[string]interface{}{"type": "Ready", "status": "True"}}},
		}}
	}
	operator := controllerid.UserOf(controllerid.UserIdentifier("operator", "")).Long
	mallory := controllerid.UserOf(controllerid.UserIdentifier("mallory", "")).Long
	moving := settled("example.com/v1", "Widget", "moving", map[string]interface{}{annotations.Controllers: operator}, "operator")
	moving.SetGeneration(2)
	s.objects = append(s.objects,
		settled("v1", "Pod", "driver", map[string]interface{}{}, "kubelet"),
		settled("example.com/v1", "Widget", "recorded", map[string]interface{}{annotations.Controllers: operator}, "operator"),
		settled("example.com/v1", "Widget", "unrecorded", map[string]interface{}{}, "operator"),
		settled("example.com/v1", "Widget", "forged", map[string]interface{}{annotations.Controllers: mallory}, "operator"),
		moving)
}

// A status write alone, even its recorded controller's that advances the
// observed generation, makes no kind watched: the pod garbage collector
// and the disruption controller write the status of Pods, and nobody
// writes under them.
func TestAStatusWriteAloneWatchesNoKind(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll, withWatchCandidates)
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch,
		path:        "/apis/example.com/v1/namespaces/apps/widgets/moving/status?fieldManager=operator",
		contentType: "application/merge-patch+json", body: []byte(`{"status":{"observedGeneration":2}}`), user: "operator"}))
	if rec.Code != http.StatusOK {
		t.Fatalf("the status write: code %d (error %v)", rec.Code, env.lastError)
	}
	widgets := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	if env.interceptor.LearnsParentKind(widgets) || env.interceptor.KindChecksPending() || env.interceptor.Objects().CachesParentsOf(widgetsGVR) {
		t.Fatal("a status write made its kind watched")
	}
}

// createOwned is a create of a ConfigMap whose controller is the object
// named, by user with fieldManager.
func createOwned(name, apiVersion, kind, owner, user, fieldManager string) benchWrite {
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"apps",`+
		`"ownerReferences":[{"apiVersion":%q,"kind":%q,"name":%q,"uid":"%s-uid","controller":true}]},"data":{"k":"v"}}`,
		name, apiVersion, kind, owner, owner)
	return benchWrite{name: "create", method: http.MethodPost, path: "/api/v1/namespaces/apps/configmaps?fieldManager=" + fieldManager,
		contentType: "application/json", body: []byte(body), user: user}
}

// Any caller can name an object of any kind as the controller of what it
// writes, send the field manager that owns that object's
// observedGeneration, and, where it may write that object at kube-apiserver
// directly, write itself into its controllers record. Watching a kind
// costs memory and CPU for every object of it in the cluster, and
// settledness records for each: only a write for a parent's controller who
// may write the status of the kind's objects makes the proxy watch it.
func TestOnlyARecordedControllerMakesTheProxyWatchAKind(t *testing.T) {
	// mallory may write ConfigMaps, as anyone; only the operator may write
	// the status of what it controls.
	authorize := func(spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
		status := spec.ResourceAttributes != nil && spec.ResourceAttributes.Subresource == "status"
		return !status || spec.User == "operator", nil
	}
	pods := schema.GroupKind{Kind: "Pod"}
	widgets := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	for _, tc := range []struct {
		name    string
		write   func(n int) benchWrite
		watched schema.GroupKind
		other   schema.GroupKind
		want    bool
	}{
		{"a caller names a Pod as its ConfigMap's controller, as the kubelet", func(n int) benchWrite {
			return createOwned(fmt.Sprintf("cm-%d", n), "v1", "Pod", "driver", "mallory", "kubelet")
		}, pods, widgets, false},
		{"a caller names a Widget whose controller is told from managedFields, as that controller", func(n int) benchWrite {
			return createOwned(fmt.Sprintf("cm-%d", n), "example.com/v1", "Widget", "unrecorded", "mallory", "operator")
		}, widgets, pods, false},
		{"the controller told from managedFields, who may write the Widget's status, writes under it", func(n int) benchWrite {
			return createOwned(fmt.Sprintf("cm-%d", n), "example.com/v1", "Widget", "unrecorded", "operator", "operator")
		}, widgets, pods, true},
		{"another caller writes under a Widget with a recorded controller", func(n int) benchWrite {
			return createOwned(fmt.Sprintf("cm-%d", n), "example.com/v1", "Widget", "recorded", "mallory", "operator")
		}, widgets, pods, false},
		{"a caller that wrote itself into a Widget's controllers record at kube-apiserver, and may not write the status, writes under it", func(n int) benchWrite {
			return createOwned(fmt.Sprintf("cm-%d", n), "example.com/v1", "Widget", "forged", "mallory", "mallory")
		}, widgets, pods, false},
		{"the recorded controller writes under its Widget", func(n int) benchWrite {
			return createOwned(fmt.Sprintf("cm-%d", n), "example.com/v1", "Widget", "recorded", "operator", "operator")
		}, widgets, pods, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			env := newServeEnv(t, nil, authorize, withWatchCandidates, func(s *serveSetup) { s.config.Metrics = reg })
			store := env.interceptor.Objects()
			for n := range 3 {
				rec := httptest.NewRecorder()
				env.handler.ServeHTTP(rec, env.request(t, tc.write(n)))
				if rec.Code != http.StatusOK && rec.Code != http.StatusCreated {
					t.Fatalf("write %d: code %d (error %v)", n, rec.Code, env.lastError)
				}
			}
			resource := map[schema.GroupKind]schema.GroupVersionResource{pods: podsGVR, widgets: widgetsGVR}
			// Whether a controller told from managedFields may write the
			// status is asked beside the write: the kind is watched a
			// moment later, or not at all.
			settled := func() error {
				if env.interceptor.LearnsParentKind(tc.watched) != tc.want {
					return fmt.Errorf("%s watched: %v", tc.watched, !tc.want)
				}
				return nil
			}
			kausalitytest.Eventually(t, 10*time.Second, "every review of a controller's status access answered", func() error {
				if env.interceptor.KindChecksPending() {
					return fmt.Errorf("still asking")
				}
				return settled()
			})
			env.handler.ServeHTTP(httptest.NewRecorder(), env.request(t, tc.write(3)))
			parents, children := store.CachedResources()
			cached := slices.Contains(parents, resource[tc.watched])
			if got := env.interceptor.LearnsParentKind(tc.watched); got != tc.want || store.CachesParentsOf(resource[tc.watched]) != tc.want || cached != tc.want {
				t.Fatalf("%s: settledness learned %v, cache admitted %v, started %v (parents cached: %v); want %v",
					tc.watched, got, store.CachesParentsOf(resource[tc.watched]), cached, parents, tc.want)
			}
			if env.interceptor.LearnsParentKind(tc.other) || slices.Contains(parents, resource[tc.other]) {
				t.Fatalf("%s is watched, and nothing was written under one", tc.other)
			}
			exported, err := testutil.GatherAndCount(reg, "kausality_proxy_caches")
			if err != nil || exported != len(parents)+len(children) {
				t.Fatalf("%d cache series exported (error %v), want one per cache: %d", exported, err, len(parents)+len(children))
			}
			series := fmt.Sprintf(`kausality_proxy_caches{holds="parents",resource=%q} 1`, resource[tc.watched].GroupResource().String())
			if text := gathered(t, reg); strings.Contains(text, series) != tc.want {
				t.Fatalf("series %s exported %v, want %v:\n%s", series, !tc.want, tc.want, text)
			}
		})
	}
}

// gathered is reg's series in the text format.
func gathered(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Fprintf(&b, "%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue())
		}
	}
	return b.String()
}

var gadgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}

// withGadgets serves Gadgets, a custom resource whose CRD has no status
// subresource: its controller writes the status by updating the object.
// The Gadget "recorded" has settled, and its controllers record names the
// operator. ConfigMaps are served too, to be written under it.
func withGadgets(s *serveSetup) {
	verbs := metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"}
	s.resources = append(s.resources,
		servedResource{gvr: configmapsGVR, listKind: "ConfigMapList", resource: metav1.APIResource{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: verbs}},
		servedResource{gvr: gadgetsGVR, listKind: "GadgetList", resource: metav1.APIResource{Name: "gadgets", Namespaced: true, Kind: "Gadget", Verbs: verbs}})
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gadgets.example.com", "resourceVersion": "1"},
		"spec":     map[string]any{"group": "example.com", "versions": []any{map[string]any{"name": "v1", "served": true, "storage": true}}},
	}}
	operator := controllerid.UserOf(controllerid.UserIdentifier("operator", "")).Long
	gadget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "recorded", "namespace": "apps", "uid": "recorded-uid", "resourceVersion": "400", "generation": int64(1),
			"annotations": map[string]any{annotations.Controllers: operator}},
		"spec":   map[string]any{"size": int64(1)},
		"status": map[string]any{"observedGeneration": int64(1), "conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
	}}
	s.objects = append(s.objects, crd, gadget)
}

// The controller of a custom resource without a status subresource writes
// its status by updating the object, and may have no rights on a status
// subresource that does not exist: updating the kind's objects is what
// shows it may write their status.
func TestAControllerOfAKindWithStatusInTheObjectMakesTheProxyWatchIt(t *testing.T) {
	gadgets := schema.GroupKind{Group: "example.com", Kind: "Gadget"}
	for _, tc := range []struct {
		name       string
		mayUpdate  bool
		wantWatch  bool
		wantAsking string
	}{
		{"the operator may update Gadgets", true, true, "update gadgets"},
		{"the operator may not update Gadgets", false, false, "update gadgets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			var mu sync.Mutex
			authorize := func(spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
				a := spec.ResourceAttributes
				if a == nil || a.Resource != "gadgets" || a.Verb != "update" {
					return true, nil
				}
				mu.Lock()
				asked = append(asked, strings.TrimSuffix(a.Verb+" "+a.Resource+"/"+a.Subresource, "/"))
				mu.Unlock()
				return tc.mayUpdate && a.Subresource == "", nil
			}
			env := newServeEnv(t, nil, authorize, withGadgets)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, createOwned("cm-0", "example.com/v1", "Gadget", "recorded", "operator", "operator")))
			if rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
				t.Fatalf("the write: code %d (error %v)", rec.Code, env.lastError)
			}
			kausalitytest.Eventually(t, 10*time.Second, "the review of the operator's status access answered", func() error {
				if env.interceptor.KindChecksPending() {
					return fmt.Errorf("still asking")
				}
				return nil
			})
			if got := env.interceptor.LearnsParentKind(gadgets); got != tc.wantWatch || env.interceptor.Objects().CachesParentsOf(gadgetsGVR) != tc.wantWatch {
				t.Fatalf("Gadgets watched %v, want %v", got, tc.wantWatch)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(asked, []string{tc.wantAsking}) {
				t.Fatalf("asked %q, want %q", asked, tc.wantAsking)
			}
		})
	}
}

// Whether a writer may write a kind's status is asked once per writer
// and kind at a time: a caller whose review is slow to answer (or who
// writes under parents of the kind without stop) does not hold back the
// review of the kind's controller.
func TestAPendingReviewOfOneWriterHoldsBackNoOther(t *testing.T) {
	authorize := func(spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
		status := spec.ResourceAttributes != nil && spec.ResourceAttributes.Subresource == "status"
		return !status || spec.User == "operator", nil
	}
	env := newServeEnv(t, nil, authorize, withWatchCandidates)
	widgets := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	// mallory wrote itself into the record of "forged", and its review
	// of Widgets has not been answered.
	release := env.interceptor.HoldKindCheck(widgets, "mallory")
	defer release()
	for n, w := range []benchWrite{
		createOwned("cm-mallory", "example.com/v1", "Widget", "forged", "mallory", "mallory"),
		createOwned("cm-operator", "example.com/v1", "Widget", "recorded", "operator", "operator"),
	} {
		rec := httptest.NewRecorder()
		env.handler.ServeHTTP(rec, env.request(t, w))
		if rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
			t.Fatalf("write %d: code %d (error %v)", n, rec.Code, env.lastError)
		}
	}
	kausalitytest.Eventually(t, 10*time.Second, "the operator's write makes Widgets watched while mallory's review is pending", func() error {
		if !env.interceptor.LearnsParentKind(widgets) {
			return fmt.Errorf("Widgets not watched")
		}
		return nil
	})
}
