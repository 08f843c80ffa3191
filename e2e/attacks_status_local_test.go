//go:build !kind

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// The attacks of a controller on its own gate: the annotations that hold
// back its drift (approvals, rejections, freeze, snooze, mode) and the ones
// the proxy computes (controllers, trace, ...), written through the status
// subresource, which kube-apiserver's status strategies of most built-in
// kinds let change metadata.annotations, and through the object itself.

const (
	steerApprovals   = "kausality.io/approvals"
	steerFreeze      = "kausality.io/freeze"
	steerMode        = "kausality.io/mode"
	steerControllers = "kausality.io/controllers"
)

// steerAlways is the approval a controller would give itself.
func steerAlways(kind, name string) string {
	return fmt.Sprintf(`[{"apiVersion":"apps/v1","kind":%q,"name":%q,"mode":"always"}]`, kind, name)
}

// annotationPatch is a merge patch setting (or, for nil, removing) one
// annotation.
func annotationPatch(key string, value *string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	return b
}

// upstreamWrites are the requests other than reads the proxy sent
// kube-apiserver for the caller with token whose path contains marker
// (kube-controller-manager writes the same objects through the proxy).
func upstreamWrites(marker, token string) int {
	n := 0
	for _, r := range env.Recorder.Requests(marker) {
		if r.Method != "GET" && r.Header.Get("Authorization") == "Bearer "+token {
			n++
		}
	}
	return n
}

// waitAllowedSub waits until kube-apiserver allows user verb on a
// (sub)resource, so the proxy never caches a denial RBAC has not caught up
// with.
func waitAllowedSub(t *testing.T, user string, groups []string, verb, group, resource, sub, ns, name string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s may %s %s/%s", user, verb, resource, sub), func() error {
		sar, err := directClient(t).AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("not yet allowed: %s", sar.Status.Reason)
		}
		return nil
	})
}

// expectRefused checks a 403 of the proxy whose message says each of says,
// and that nothing of the write reached kube-apiserver.
func expectRefused(t *testing.T, err error, marker, token string, writesBefore int, says ...string) {
	t.Helper()
	s := wgStatus(t, err, 403, "the attack")
	if s.Reason != metav1.StatusReasonForbidden || !strings.HasPrefix(s.Message, "kausality: ") {
		t.Errorf("not the proxy's refusal: %s: %s", s.Reason, s.Message)
	}
	for _, w := range says {
		if !strings.Contains(s.Message, w) {
			t.Errorf("the refusal does not say %q: %s", w, s.Message)
		}
	}
	if n := upstreamWrites(marker, token) - writesBefore; n != 0 {
		t.Errorf("the refused write sent %d request(s) to kube-apiserver at %s, want none", n, marker)
	}
}

// statusKind is a built-in kind whose status strategy keeps
// metadata.annotations.
type statusKind struct {
	gvr    schema.GroupVersionResource
	kind   string
	object func(name string) map[string]any
}

func statusPodTemplate() map[string]any {
	return map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": "steer"}},
		"spec": map[string]any{
			"restartPolicy": "Always",
			"containers":    []any{map[string]any{"name": "c", "image": "registry.k8s.io/pause:3.10"}},
		},
	}
}

func statusJobTemplate() map[string]any {
	tpl := statusPodTemplate()
	tpl["spec"].(map[string]any)["restartPolicy"] = "Never"
	return tpl
}

var statusSelector = map[string]any{"matchLabels": map[string]any{"app": "steer"}}

var statusKinds = []statusKind{
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "Deployment", func(string) map[string]any {
		return map[string]any{"spec": map[string]any{"replicas": int64(0), "selector": statusSelector, "template": statusPodTemplate()}}
	}},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, "ReplicaSet", func(string) map[string]any {
		return map[string]any{"spec": map[string]any{"replicas": int64(0), "selector": statusSelector, "template": statusPodTemplate()}}
	}},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, "StatefulSet", func(name string) map[string]any {
		return map[string]any{"spec": map[string]any{"replicas": int64(0), "serviceName": name, "selector": statusSelector, "template": statusPodTemplate()}}
	}},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, "DaemonSet", func(string) map[string]any {
		return map[string]any{"spec": map[string]any{"selector": statusSelector, "template": statusPodTemplate()}}
	}},
	{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "Job", func(string) map[string]any {
		return map[string]any{"spec": map[string]any{"suspend": true, "template": statusJobTemplate()}}
	}},
	{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}, "CronJob", func(string) map[string]any {
		return map[string]any{"spec": map[string]any{"schedule": "0 0 1 1 *", "suspend": true,
			"jobTemplate": map[string]any{"spec": map[string]any{"template": statusJobTemplate()}}}}
	}},
	{schema.GroupVersionResource{Version: "v1", Resource: "replicationcontrollers"}, "ReplicationController", func(string) map[string]any {
		return map[string]any{"spec": map[string]any{"replicas": int64(0), "selector": map[string]any{"app": "steer"}, "template": statusPodTemplate()}}
	}},
	{schema.GroupVersionResource{Version: "v1", Resource: "services"}, "Service", func(string) map[string]any {
		return map[string]any{"spec": map[string]any{"selector": map[string]any{"app": "steer"},
			"ports": []any{map[string]any{"port": int64(80), "protocol": "TCP"}}}}
	}},
	{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "Namespace", func(string) map[string]any {
		return map[string]any{}
	}},
	{schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}, "HorizontalPodAutoscaler", func(string) map[string]any {
		return map[string]any{"spec": map[string]any{"minReplicas": int64(1), "maxReplicas": int64(2),
			"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "absent"}}}
	}},
	{schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, "PodDisruptionBudget", func(string) map[string]any {
		return map[string]any{"spec": map[string]any{"minAvailable": int64(1), "selector": statusSelector}}
	}},
}

// statusOperator is a workload controller's service account: it may read
// the objects and write their status (and a Deployment's scale), as the
// built-in controllers' roles allow, and nothing else.
func statusOperator(t *testing.T, ns, otherNamespace string) (dynamic.Interface, string) {
	t.Helper()
	ctx := context.Background()
	admin := directClient(t)
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments/scale"}, Verbs: []string{"get", "update", "patch"}}}
	for _, k := range statusKinds {
		if k.gvr.Resource == "namespaces" {
			continue
		}
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{k.gvr.Group}, Resources: []string{k.gvr.Resource, k.gvr.Resource + "/status"}, Verbs: []string{"get", "list", "watch", "update", "patch"}})
	}
	_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "operator"}, Rules: rules}, metav1.CreateOptions{})
	mustf(t, err, "operator role")
	subject := rbacv1.Subject{Kind: "ServiceAccount", Namespace: ns, Name: "operator"}
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "operator"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "operator"}, Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{})
	mustf(t, err, "operator binding")
	cr := "kausality-e2e-status-" + otherNamespace
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: cr},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces", "namespaces/status"}, ResourceNames: []string{otherNamespace}, Verbs: []string{"get", "update", "patch"}}}}, metav1.CreateOptions{})
	mustf(t, err, "namespace status role")
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr}, Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{})
	mustf(t, err, "namespace status binding")
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), cr, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(context.Background(), cr, metav1.DeleteOptions{})
	})
	user := "system:serviceaccount:" + ns + ":operator"
	groups := []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:" + ns}
	for _, k := range statusKinds {
		if k.gvr.Resource == "namespaces" {
			waitAllowedSub(t, user, groups, "patch", "", "namespaces", "status", "", otherNamespace)
			continue
		}
		waitAllowedSub(t, user, groups, "patch", k.gvr.Group, k.gvr.Resource, "status", ns, "")
	}
	waitAllowedSub(t, user, groups, "update", "apps", "deployments", "scale", ns, "")
	cfg, err := cluster.ServiceAccountThroughProxy(ctx, ns, "operator")
	mustf(t, err, "operator token")
	dyn, err := dynamic.NewForConfig(cfg)
	mustf(t, err, "operator client")
	return dyn, cfg.BearerToken
}

// A workload controller that may write the status of the objects it
// manages sets kausality.io/approvals through the status subresource. For
// each built-in kind whose status strategy keeps metadata.annotations, the
// proxy refuses it with 403 before anything reaches kube-apiserver, while a
// status write of another annotation still goes through (and shows that
// kube-apiserver would have stored the approval).
func TestAttackStatusWriteSetsApprovals(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "status-kinds")
	otherNamespace := newNamespace(t, "status-ns")
	operator, token := statusOperator(t, ns, otherNamespace)
	admin, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "admin client")

	for _, k := range statusKinds {
		t.Run(k.kind, func(t *testing.T) {
			name := "steer-" + utilrand.String(5)
			objects := admin.Resource(k.gvr)
			client := operator.Resource(k.gvr)
			var resource dynamic.ResourceInterface = objects
			var operatorResource dynamic.ResourceInterface = client
			marker := "/namespaces/" + ns + "/" + k.gvr.Resource + "/" + name + "/status"
			if k.gvr.Resource == "namespaces" {
				name = otherNamespace
				marker = "/namespaces/" + name + "/status"
			} else {
				resource, operatorResource = objects.Namespace(ns), client.Namespace(ns)
				obj := k.object(name)
				obj["apiVersion"] = k.gvr.GroupVersion().String()
				obj["kind"] = k.kind
				obj["metadata"] = map[string]any{"name": name}
				_, err := resource.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
				mustf(t, err, "create %s %s", k.kind, name)
			}
			env.Recorder.Watch(marker)

			before := upstreamWrites(marker, token)
			approval := steerAlways(k.kind, name)
			_, err := operatorResource.Patch(ctx, name, types.MergePatchType, annotationPatch(steerApprovals, &approval), metav1.PatchOptions{}, "status")
			expectRefused(t, err, marker, token, before, steerApprovals, "status subresource")
			stored, err := resource.Get(ctx, name, metav1.GetOptions{})
			mustf(t, err, "get %s", name)
			if v, ok := stored.GetAnnotations()[steerApprovals]; ok {
				t.Fatalf("the status write set %s=%s", steerApprovals, v)
			}

			// A status write that touches no kausality.io annotation is
			// forwarded as before; its annotation lands, so the approval
			// would have landed too.
			touched := "yes"
			_, err = operatorResource.Patch(ctx, name, types.MergePatchType, annotationPatch("example.com/status-touched", &touched), metav1.PatchOptions{}, "status")
			mustf(t, err, "a status write without kausality.io annotations")
			if upstreamWrites(marker, token) == before {
				t.Errorf("the allowed status write did not reach kube-apiserver")
			}
			stored, err = resource.Get(ctx, name, metav1.GetOptions{})
			mustf(t, err, "get %s", name)
			if stored.GetAnnotations()["example.com/status-touched"] != "yes" {
				t.Errorf("kube-apiserver did not keep the annotation of a %s status write: the kind is not exposed, take it off the list", k.kind)
			}
		})
	}

	// A Scale carries metadata too, but kube-apiserver takes only
	// spec.replicas from it: a /scale write cannot set an annotation.
	t.Run("Deployment scale", func(t *testing.T) {
		deployments := admin.Resource(statusKinds[0].gvr).Namespace(ns)
		name := "steer-scale-" + utilrand.String(5)
		obj := statusKinds[0].object(name)
		obj["apiVersion"], obj["kind"], obj["metadata"] = "apps/v1", "Deployment", map[string]any{"name": name}
		_, err := deployments.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		mustf(t, err, "create Deployment %s", name)
		scales := operator.Resource(statusKinds[0].gvr).Namespace(ns)
		// kube-controller-manager writes the Deployment meanwhile.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			scale, err := scales.Get(ctx, name, metav1.GetOptions{}, "scale")
			if err != nil {
				return err
			}
			scale.SetAnnotations(map[string]string{steerApprovals: steerAlways("ReplicaSet", "any"), steerControllers: "aaaaa"})
			_, err = scales.Update(ctx, scale, metav1.UpdateOptions{}, "scale")
			return err
		})
		mustf(t, err, "a /scale write that does not change replicas")
		stored, err := deployments.Get(ctx, name, metav1.GetOptions{})
		mustf(t, err, "get %s", name)
		for _, k := range []string{steerApprovals, steerControllers} {
			if v, ok := stored.GetAnnotations()[k]; ok && v != "" && (k == steerApprovals || v == "aaaaa") {
				t.Errorf("a /scale write set %s=%s", k, v)
			}
		}
	})
}

// steerFixture is a Deployment managed by the real deployment controller
// of kube-controller-manager, recorded by the proxy as its controller, and
// that controller's service account with the patch rights an operator's
// role usually has on what it manages.
type steerFixture struct {
	ns, deployment, replicaSet string
	// token is the controller's: what it sends upstream is told from
	// kube-controller-manager's own writes by it.
	token              string
	ctrl, alice, admin dynamic.Interface
}

var (
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	replicaSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
)

func newSteerFixture(t *testing.T) *steerFixture {
	t.Helper()
	ctx := context.Background()
	f := &steerFixture{ns: newNamespace(t, "steer"), deployment: "web"}
	kube := directClient(t)
	_, err := kube.RbacV1().Roles(f.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "deployment-controller-patch"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/status", "replicasets/status"}, Verbs: []string{"patch"}}}}, metav1.CreateOptions{})
	mustf(t, err, "role")
	_, err = kube.RbacV1().RoleBindings(f.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "deployment-controller-patch"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployment-controller-patch"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kube-system", Name: "deployment-controller"}}}, metav1.CreateOptions{})
	mustf(t, err, "binding")
	groups := []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:kube-system"}
	for _, sub := range []string{"", "status"} {
		waitAllowedSub(t, deploymentController, groups, "patch", "apps", "deployments", sub, f.ns, "")
	}
	waitAllowedSub(t, deploymentController, groups, "patch", "apps", "replicasets", "status", f.ns, "")

	cfg, err := cluster.ServiceAccountThroughProxy(ctx, "kube-system", "deployment-controller")
	mustf(t, err, "the deployment controller's service account")
	f.ctrl, err = dynamic.NewForConfig(cfg)
	mustf(t, err, "controller client")
	f.token = cfg.BearerToken
	aliceCfg, err := cluster.UserThroughProxy("alice-steer", "system:masters")
	mustf(t, err, "alice")
	f.alice, err = dynamic.NewForConfig(aliceCfg)
	mustf(t, err, "alice client")
	f.admin, err = dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "admin client")

	obj := statusKinds[0].object(f.deployment)
	obj["apiVersion"], obj["kind"], obj["metadata"] = "apps/v1", "Deployment", map[string]any{"name": f.deployment}
	_, err = f.alice.Resource(deploymentsGVR).Namespace(f.ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	mustf(t, err, "alice creates the Deployment")
	eventually(t, 90*time.Second, "the proxy records the deployment controller as the Deployment's controller, and its ReplicaSet exists", func() error {
		d := f.get(t, deploymentsGVR, f.deployment)
		if d.GetAnnotations()[steerControllers] == "" {
			return fmt.Errorf("no %s on the Deployment yet", steerControllers)
		}
		list, err := f.admin.Resource(replicaSetsGVR).Namespace(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("no ReplicaSet yet")
		}
		f.replicaSet = list.Items[0].GetName()
		return nil
	})
	return f
}

func (f *steerFixture) get(t *testing.T, gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := f.admin.Resource(gvr).Namespace(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	mustf(t, err, "get %s %s", gvr.Resource, name)
	return obj
}

func (f *steerFixture) marker(resource, name, sub string) string {
	m := "/namespaces/" + f.ns + "/" + resource + "/" + name
	if sub != "" {
		m += "/" + sub
	}
	env.Recorder.Watch(m)
	return m
}

// The controller of a Deployment steers its own gate: it approves its own
// drift, lifts a freeze a person set, sets its child's mode to log and
// replaces the record of who its controller is, through the Deployment
// itself (merge patch, server-side apply, PUT) and through the status
// subresource. Every attempt fails; a person keeps every control.
func TestAttackControllerSteersItsOwnGate(t *testing.T) {
	ctx := context.Background()
	f := newSteerFixture(t)
	deployments := f.ctrl.Resource(deploymentsGVR).Namespace(f.ns)
	own := "may not edit its own " + steerApprovals + "; a person must"
	approval := steerAlways("ReplicaSet", f.replicaSet)

	t.Run("approves its own drift with a merge patch of the Deployment", func(t *testing.T) {
		m := f.marker("deployments", f.deployment, "")
		before := upstreamWrites(m, f.token)
		_, err := deployments.Patch(ctx, f.deployment, types.MergePatchType, annotationPatch(steerApprovals, &approval), metav1.PatchOptions{})
		expectRefused(t, err, m, f.token, before, "the controller of apps/v1 Deployment "+f.ns+"/"+f.deployment+" "+own, deploymentController)
	})

	t.Run("approves its own drift with a merge patch of the Deployment's status", func(t *testing.T) {
		m := f.marker("deployments", f.deployment, "status")
		before := upstreamWrites(m, f.token)
		_, err := deployments.Patch(ctx, f.deployment, types.MergePatchType, annotationPatch(steerApprovals, &approval), metav1.PatchOptions{}, "status")
		expectRefused(t, err, m, f.token, before, own, "status subresource")
	})

	t.Run("approves its own drift with server-side apply", func(t *testing.T) {
		m := f.marker("deployments", f.deployment, "")
		before := upstreamWrites(m, f.token)
		apply := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"annotations":{%q:%q}}}`, f.deployment, steerApprovals, approval)
		_, err := deployments.Patch(ctx, f.deployment, types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "deployment-controller", Force: ptr.To(true)})
		expectRefused(t, err, m, f.token, before, own)
	})
	t.Run("sets its own mode with a JSON patch and a strategic merge patch, of the Deployment and of its status", func(t *testing.T) {
		jsonPatch := []byte(`[{"op":"add","path":"/metadata/annotations/kausality.io~1mode","value":"log"}]`)
		strategic := annotationPatch(steerMode, ptr.To("log"))
		for _, shape := range []struct {
			patchType types.PatchType
			body      []byte
			sub       string
		}{
			{types.JSONPatchType, jsonPatch, ""}, {types.StrategicMergePatchType, strategic, ""},
			{types.JSONPatchType, jsonPatch, "status"}, {types.StrategicMergePatchType, strategic, "status"},
		} {
			m := f.marker("deployments", f.deployment, shape.sub)
			before := upstreamWrites(m, f.token)
			var subresources []string
			if shape.sub != "" {
				subresources = []string{shape.sub}
			}
			_, err := deployments.Patch(ctx, f.deployment, shape.patchType, shape.body, metav1.PatchOptions{}, subresources...)
			expectRefused(t, err, m, f.token, before, "may not edit its own "+steerMode+"; a person must")
		}
		if v, ok := f.get(t, deploymentsGVR, f.deployment).GetAnnotations()[steerMode]; ok {
			t.Errorf("the controller set its own %s=%s", steerMode, v)
		}
	})
	if v := f.get(t, deploymentsGVR, f.deployment).GetAnnotations()[steerApprovals]; v != "" {
		t.Errorf("the controller approved itself: %s=%s", steerApprovals, v)
	}

	t.Run("lifts a freeze", func(t *testing.T) {
		freeze := `{"user":"alice-steer","reason":"incident review"}`
		_, err := f.alice.Resource(deploymentsGVR).Namespace(f.ns).Patch(ctx, f.deployment, types.MergePatchType, annotationPatch(steerFreeze, &freeze), metav1.PatchOptions{})
		mustf(t, err, "a person freezes the Deployment")

		m := f.marker("deployments", f.deployment, "")
		var before int
		// kube-controller-manager answers the freeze with a status write:
		// a PUT of the copy read before it is kube-apiserver's conflict.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := deployments.Get(ctx, f.deployment, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ann := d.GetAnnotations()
			delete(ann, steerFreeze)
			d.SetAnnotations(ann)
			before = upstreamWrites(m, f.token)
			_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
			return err
		})
		expectRefused(t, err, m, f.token, before, "may not edit its own "+steerFreeze)

		m = f.marker("deployments", f.deployment, "status")
		before = upstreamWrites(m, f.token)
		_, err = deployments.Patch(ctx, f.deployment, types.MergePatchType, annotationPatch(steerFreeze, nil), metav1.PatchOptions{}, "status")
		expectRefused(t, err, m, f.token, before, "may not edit its own "+steerFreeze)
		if f.get(t, deploymentsGVR, f.deployment).GetAnnotations()[steerFreeze] != freeze {
			t.Fatalf("the controller lifted the freeze")
		}

		_, err = f.alice.Resource(deploymentsGVR).Namespace(f.ns).Patch(ctx, f.deployment, types.MergePatchType, annotationPatch(steerFreeze, nil), metav1.PatchOptions{})
		mustf(t, err, "the person lifts the freeze")
	})

	t.Run("sets its child's mode to log through the child's status", func(t *testing.T) {
		m := f.marker("replicasets", f.replicaSet, "status")
		before := upstreamWrites(m, f.token)
		mode := "log"
		_, err := f.ctrl.Resource(replicaSetsGVR).Namespace(f.ns).Patch(ctx, f.replicaSet, types.MergePatchType, annotationPatch(steerMode, &mode), metav1.PatchOptions{}, "status")
		expectRefused(t, err, m, f.token, before, "changes "+steerMode, "status subresource")
		if v, ok := f.get(t, replicaSetsGVR, f.replicaSet).GetAnnotations()[steerMode]; ok {
			t.Fatalf("the controller set %s=%s on its ReplicaSet", steerMode, v)
		}
	})

	t.Run("replaces the record of its controller through the status", func(t *testing.T) {
		recorded := f.get(t, deploymentsGVR, f.deployment).GetAnnotations()[steerControllers]
		m := f.marker("deployments", f.deployment, "status")
		before := len(env.Recorder.Requests(m))
		forged := "aaaaa"
		_, err := deployments.Patch(ctx, f.deployment, types.MergePatchType, annotationPatch(steerControllers, &forged), metav1.PatchOptions{}, "status")
		mustf(t, err, "a status write naming another controller is forwarded with the stored record")
		if got := f.get(t, deploymentsGVR, f.deployment).GetAnnotations()[steerControllers]; got != recorded {
			t.Fatalf("the status write replaced %s: %q, was %q", steerControllers, got, recorded)
		}
		for _, r := range env.Recorder.Requests(m)[before:] {
			if strings.Contains(string(r.Body), forged) {
				t.Errorf("the forged record reached kube-apiserver: %s", r.Body)
			}
		}
	})

	t.Run("a person keeps every control", func(t *testing.T) {
		alice := f.alice.Resource(deploymentsGVR).Namespace(f.ns)
		for _, kv := range [][2]string{{steerApprovals, approval}, {steerMode, "log"}, {"kausality.io/snooze-until", "2030-01-01T00:00:00Z"}} {
			v := kv[1]
			_, err := alice.Patch(ctx, f.deployment, types.MergePatchType, annotationPatch(kv[0], &v), metav1.PatchOptions{})
			mustf(t, err, "the person sets %s", kv[0])
		}
		_, err := alice.Patch(ctx, f.deployment, types.MergePatchType, annotationPatch(steerApprovals, nil), metav1.PatchOptions{})
		mustf(t, err, "the person removes %s", steerApprovals)
	})

	// The controller keeps writing its status as before.
	_, err := deployments.Patch(ctx, f.deployment, types.MergePatchType, []byte(`{"status":{"collisionCount":0}}`), metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsConflict(err) {
		t.Errorf("the controller's own status write: %v", err)
	}
}
