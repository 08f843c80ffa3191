package intercept_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
)

func affinityTerm(withEmptyNamespaceSelector bool) map[string]interface{} {
	term := map[string]interface{}{
		"topologyKey":   "kubernetes.io/hostname",
		"labelSelector": map[string]interface{}{"matchLabels": map[string]interface{}{"app": "stable"}},
	}
	if withEmptyNamespaceSelector {
		term["namespaceSelector"] = map[string]interface{}{} // {}: every namespace
	}
	return map[string]interface{}{"podAntiAffinity": map[string]interface{}{
		"requiredDuringSchedulingIgnoredDuringExecution": []interface{}{term},
	}}
}

// withAffinity stores stable-1 with an anti-affinity term of its own
// namespace (no namespaceSelector).
func withAffinity(s *serveSetup) {
	for _, o := range s.objects {
		u, ok := o.(*unstructured.Unstructured)
		if ok && u.GetName() == "stable-1" {
			_ = unstructured.SetNestedField(u.Object, affinityTerm(false), "spec", "template", "spec", "affinity")
		}
	}
}

// The deployment controller (the settled parent's controller) rewrites the
// child's pod template so its anti-affinity term covers every namespace
// (namespaceSelector: {}), a PUT bound to the stored resourceVersion. That
// is a change of the child's desired state under a settled parent: drift,
// denied in enforce mode, though {} and an absent selector are both empty.
func TestAnEmptySelectorIsDrift(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	env := newServeEnv(t, nil, allowAll, enforce, withAffinity)
	c := benchChild("stable-1", "stable", "stable-uid", 1)
	_ = unstructured.SetNestedField(c.Object, affinityTerm(true), "spec", "template", "spec", "affinity")
	data, _ := c.MarshalJSON()
	w := benchWrite{name: "drift", method: http.MethodPut, path: "/apis/apps/v1/namespaces/apps/replicasets/stable-1",
		contentType: "application/json", body: data, user: "system:serviceaccount:kube-system:deployment-controller"}
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, w))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("code %d, want 403: the controller widened its settled parent's child's anti-affinity to every namespace (forwarded %d)", rec.Code, env.forwarded.Load())
	}
}

var configmapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// withOwnedConfigMap serves ConfigMaps and stores "settings", a child of
// the settled Deployment "stable".
func withOwnedConfigMap(s *serveSetup) {
	s.resources = append(s.resources, servedResource{gvr: configmapsGVR, listKind: "ConfigMapList",
		resource: metav1.APIResource{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"}}})
	s.objects = append(s.objects, ownedConfigMap("v1", false))
}

func ownedConfigMap(value string, specMember bool) *unstructured.Unstructured {
	cm := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]interface{}{"name": "settings", "namespace": "apps", "uid": "settings-uid", "resourceVersion": "300",
			"ownerReferences": []interface{}{map[string]interface{}{"apiVersion": "apps/v1", "kind": "Deployment", "name": "stable", "uid": "stable-uid", "controller": true}}},
		"data": map[string]interface{}{"k": value},
	}}
	if specMember {
		cm.Object["spec"] = nil // kube-apiserver drops the unknown member
	}
	return cm
}

// The settled parent's controller changes its ConfigMap child's data: drift.
// It is refused with or without a "spec": null member, which kube-apiserver
// drops as unknown: the member must not make the proxy compare only spec.
func TestASpecMemberDoesNotHideConfigMapDrift(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name       string
		specMember bool
	}{{"control: plain data change", false}, {"with a spec: null member", true}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, enforce, withOwnedConfigMap)
			data, _ := ownedConfigMap("v2", tc.specMember).MarshalJSON()
			w := benchWrite{name: "drift", method: http.MethodPut, path: "/api/v1/namespaces/apps/configmaps/settings",
				contentType: "application/json", body: data, user: "system:serviceaccount:kube-system:deployment-controller"}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, w))
			if rec.Code != http.StatusForbidden {
				t.Fatalf("code %d, want 403 for the controller's data change under a settled parent (forwarded %d, error %v)", rec.Code, env.forwarded.Load(), env.lastError)
			}
		})
	}
}

// fixedAllowances serves a fixed set of allowance policies.
type fixedAllowances []*allowance.Compiled

func (f fixedAllowances) All() []*allowance.Compiled     { return f }
func (f fixedAllowances) Report([]allowance.EvalProblem) {}
func (f fixedAllowances) HasSynced() bool                { return true }

// defaultingDryRun answers a dry run with the body as kube-apiserver would
// store it: the container port's protocol defaulted to TCP.
func defaultingDryRun(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if r.URL.Query().Get("dryRun") == "" {
		_, _ = w.Write([]byte(`{}`))
		return
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err == nil {
		cs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			ports, _ := c.(map[string]interface{})["ports"].([]interface{})
			for _, p := range ports {
				if pm := p.(map[string]interface{}); pm["protocol"] == nil {
					pm["protocol"] = "TCP"
				}
			}
		}
		_ = unstructured.SetNestedSlice(obj.Object, cs, "spec", "template", "spec", "containers")
		data, _ = obj.MarshalJSON()
	}
	_, _ = w.Write(data)
}

// The deployment controller carries out its reconciling parent's scale
// (replicas 1 -> 3, allowed by the parent's allowance) with a PUT bound to
// the stored resourceVersion that leaves out a field kube-apiserver
// defaults (ports[0].protocol, stored as TCP). kube-apiserver would store
// only the replicas change: the write is no allowance violation of
// ...ports[0].protocol, as kube-apiserver's dry run shows.
func TestAnOmittedDefaultIsNoAllowanceViolation(t *testing.T) {
	withGrant := webReplicasGrant(t)
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name         string
		omitProtocol bool
	}{{"control: the whole object", false}, {"the defaulted protocol left out", true}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, withGrant, withNamespaceAllowanceMode("enforce"))
			env.upstream = defaultingDryRun
			c := benchChild("web-1", "web", "web-uid", 3)
			if tc.omitProtocol {
				cs, _, _ := unstructured.NestedSlice(c.Object, "spec", "template", "spec", "containers")
				delete(cs[0].(map[string]interface{})["ports"].([]interface{})[0].(map[string]interface{}), "protocol")
				_ = unstructured.SetNestedSlice(c.Object, cs, "spec", "template", "spec", "containers")
			}
			data, _ := c.MarshalJSON()
			w := benchWrite{name: "expected", method: http.MethodPut, path: "/apis/apps/v1/namespaces/apps/replicasets/web-1",
				contentType: "application/json", body: data, user: "system:serviceaccount:kube-system:deployment-controller"}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, w))
			if rec.Code != http.StatusOK {
				t.Fatalf("code %d, want 200: only spec.replicas changes, and it is allowed (forwarded %d, error %v)", rec.Code, env.forwarded.Load(), env.lastError)
			}
		})
	}
}

var otherDeploymentsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "deployments"}

// withOtherDeploymentKind serves a custom resource kind named Deployment in
// another group (kind names are not unique across groups: Cluster,
// Application, Database, ...), with no objects.
func withOtherDeploymentKind(s *serveSetup) {
	s.resources = append(s.resources, servedResource{gvr: otherDeploymentsGVR, listKind: "DeploymentList",
		resource: metav1.APIResource{Name: "deployments", Namespaced: true, Kind: "Deployment", Verbs: metav1.Verbs{"get", "list", "watch", "update", "patch", "create"}}})
}

// The settled parent's controller changes its ReplicaSet's replicas (drift)
// and, in the same PUT, the controller ownerReference's apiVersion to
// another group that also has a kind Deployment, keeping kind, name and
// uid. Under the new reference no parent is found; the write is decided
// under the owner it leaves too, and held there.
func TestAnOwnerGroupChangeDoesNotEscapeTheParent(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name, apiVersion string
	}{{"control: same owner", "apps/v1"}, {"owner re-pointed to example.com/v1", "example.com/v1"}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, enforce, withOtherDeploymentKind)
			c := benchChild("stable-1", "stable", "stable-uid", 3)
			refs := c.GetOwnerReferences()
			refs[0].APIVersion = tc.apiVersion
			c.SetOwnerReferences(refs)
			data, _ := c.MarshalJSON()
			w := benchWrite{name: "drift", method: http.MethodPut, path: "/apis/apps/v1/namespaces/apps/replicasets/stable-1",
				contentType: "application/json", body: data, user: "system:serviceaccount:kube-system:deployment-controller"}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, w))
			if rec.Code != http.StatusForbidden {
				t.Fatalf("code %d, want 403: the controller scales its settled parent's ReplicaSet 1 -> 3 (forwarded %d, error %v)", rec.Code, env.forwarded.Load(), env.lastError)
			}
		})
	}
}

// webReplicasGrant serves an AllowancePolicy that lets the deployment
// controller carry a person's scale of a Deployment to its ReplicaSets,
// and gives "web" the allowance alice's scale to generation 6 granted.
func webReplicasGrant(t *testing.T) serveOption {
	t.Helper()
	policy := allowance.CompileSpec("deployment-replicas", "uid-1", 1, v1alpha1.AllowancePolicySpec{
		Match: v1alpha1.AllowanceMatch{Kind: "Deployment", Fields: []string{"spec.replicas"}},
		Subjects: []v1alpha1.AllowanceSubject{
			{Kind: v1alpha1.SubjectUser, Name: "alice", MayInitiate: true},
			{Kind: v1alpha1.SubjectServiceAccount, Namespace: "kube-system", Name: "deployment-controller"},
		},
		Allow: []v1alpha1.AllowedMutation{{Kind: "ReplicaSet", Relation: v1alpha1.RelationChild, Mutations: []string{"spec.replicas"}}},
	})
	if !policy.Valid() {
		t.Fatal("policy invalid")
	}
	granted := `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":6,"initiator":"alice","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":6,"field":"spec.replicas"}]}]`
	withGrant := func(s *serveSetup) {
		s.config.AllowancePolicies = fixedAllowances{policy}
		for _, o := range s.objects {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetKind() == "Deployment" && u.GetName() == "web" {
				a := u.GetAnnotations()
				a[allowance.Annotation] = granted
				u.SetAnnotations(a)
			}
		}
	}
	return withGrant
}
