package deploytest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kausality-io/kausality-proxy/intercept/rules"
)

// ruleAtoms expands RBAC rules into sorted "verb group/resource[#name]"
// strings (core group: "core"), so that two rule sets compare exactly.
func ruleAtoms(rs []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rs {
		for _, v := range r.Verbs {
			for _, g := range r.APIGroups {
				if g == "" {
					g = "core"
				}
				for _, res := range r.Resources {
					if len(r.ResourceNames) == 0 {
						out = append(out, v+" "+g+"/"+res)
					}
					for _, n := range r.ResourceNames {
						out = append(out, v+" "+g+"/"+res+"#"+n)
					}
				}
			}
			for _, u := range r.NonResourceURLs {
				out = append(out, v+" "+u)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func atoms(verbs []string, group string, resources ...string) []string {
	var out []string
	for _, v := range verbs {
		for _, r := range resources {
			out = append(out, v+" "+group+"/"+r)
		}
	}
	return out
}

var read = []string{"get", "list", "watch"}

// proxyReads are the built-in resources the proxy may read: those the
// default resource rules intercept (GA API of Kubernetes 1.35), plus
// namespaces and the proxy's own ApprovalPolicy.
var proxyReads = map[string][]string{
	"core": {"configmaps", "limitranges", "namespaces", "nodes", "persistentvolumeclaims", "persistentvolumes", "pods",
		"podtemplates", "replicationcontrollers", "resourcequotas", "secrets", "serviceaccounts", "services"},
	"admissionregistration.k8s.io": {"mutatingwebhookconfigurations", "validatingadmissionpolicies", "validatingadmissionpolicybindings", "validatingwebhookconfigurations"},
	"apiextensions.k8s.io":         {"customresourcedefinitions"},
	"apiregistration.k8s.io":       {"apiservices"},
	"apps":                         {"controllerrevisions", "daemonsets", "deployments", "replicasets", "statefulsets"},
	"autoscaling":                  {"horizontalpodautoscalers"},
	"batch":                        {"cronjobs", "jobs"},
	"certificates.k8s.io":          {"certificatesigningrequests"},
	"flowcontrol.apiserver.k8s.io": {"flowschemas", "prioritylevelconfigurations"},
	"networking.k8s.io":            {"ingressclasses", "ingresses", "ipaddresses", "networkpolicies", "servicecidrs"},
	"node.k8s.io":                  {"runtimeclasses"},
	"policy":                       {"poddisruptionbudgets"},
	"rbac.authorization.k8s.io":    {"clusterrolebindings", "clusterroles", "rolebindings", "roles"},
	"resource.k8s.io":              {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"},
	"scheduling.k8s.io":            {"priorityclasses"},
	"storage.k8s.io":               {"csidrivers", "csinodes", "csistoragecapacities", "storageclasses", "volumeattachments", "volumeattributesclasses"},
	"kausality.io":                 {"approvalpolicies", "clusterapprovalpolicies"},
	"kausal.io":                    {"allowancepolicies"},
}

// policyStatusWrites are the status subresources the proxy writes: the
// conditions of the approval policies.
var policyStatusWrites = []string{"approvalpolicies/status", "clusterapprovalpolicies/status"}

// parentPatches are the built-in parent kinds whose annotations the proxy
// patches.
var parentPatches = map[string][]string{
	"apps":  {"daemonsets", "deployments", "replicasets", "statefulsets"},
	"batch": {"cronjobs", "jobs"},
	"core":  {"replicationcontrollers"},
}

// expectedRoles is every Role and ClusterRole the manifests may contain,
// with exactly these permissions. Adding a permission to the manifests
// without adding it here fails the test.
func expectedRoles() map[string][]string {
	core := []string{
		"create authentication.k8s.io/tokenreviews",
		"create authorization.k8s.io/subjectaccessreviews",
		"impersonate core/users", "impersonate core/groups", "impersonate core/serviceaccounts",
		"impersonate authentication.k8s.io/uids",
		"impersonate authentication.k8s.io/userextras/authentication.kubernetes.io/credential-id",
	}
	for g, rs := range proxyReads {
		core = append(core, atoms(read, g, rs...)...)
	}
	core = append(core, atoms([]string{"update"}, "kausality.io", policyStatusWrites...)...)
	core = append(core, atoms([]string{"update"}, "kausal.io", "allowancepolicies/status")...)
	var parents []string
	for g, rs := range parentPatches {
		parents = append(parents, atoms([]string{"patch"}, g, rs...)...)
	}
	sort.Strings(core)
	sort.Strings(parents)
	return map[string][]string{
		"ClusterRole/kausality-proxy":                 core,
		"ClusterRole/kausality-proxy-extensions":      nil, // aggregated
		"ClusterRole/kausality-proxy-builtin-parents": parents,
		"Role/kausality-system/kausality-proxy-drifts": {
			"create coordination.k8s.io/leases",
			"create core/configmaps",
			"delete core/configmaps",
			"get coordination.k8s.io/leases#kausality-proxy-driftreports",
			"update coordination.k8s.io/leases#kausality-proxy-driftreports",
			"update core/configmaps",
		},
		"Role/kausality-system/kausality-proxy-certgen": {
			"create core/secrets",
			"get core/configmaps#kausality-proxy-kubeconfig",
			"get core/secrets#kausality-proxy-tls",
			"patch core/configmaps#kausality-proxy-kubeconfig",
			"update core/secrets#kausality-proxy-tls",
		},
	}
}

// The manifests' roles grant exactly the permissions listed in
// expectedRoles, no `*` anywhere, and are bound to nothing but the two
// service accounts. The cert-manager overlay only narrows the certgen Role;
// the log-backend and Slack overlays add no RBAC.
func TestRBACRulesExactly(t *testing.T) {
	for _, dir := range []string{"manifests", "manifests/overlays/cert-manager", "manifests/overlays/log-backend", "manifests/overlays/slack"} {
		t.Run(dir, func(t *testing.T) {
			_, objs := render(t, dir)
			want := expectedRoles()
			if dir == "manifests/overlays/cert-manager" {
				want["Role/kausality-system/kausality-proxy-certgen"] = []string{
					"get core/configmaps#kausality-proxy-kubeconfig",
					"get core/secrets#kausality-proxy-tls",
					"patch core/configmaps#kausality-proxy-kubeconfig",
				}
			}
			got := map[string][]string{}
			for _, o := range objs {
				switch o.GetKind() {
				case "ClusterRole":
					var cr rbacv1.ClusterRole
					convert(t, o, &cr)
					got["ClusterRole/"+cr.Name] = ruleAtoms(cr.Rules)
					checkNoWildcards(t, cr.Name, cr.Rules)
					if cr.Name == "kausality-proxy-extensions" {
						if cr.AggregationRule == nil || len(cr.AggregationRule.ClusterRoleSelectors) != 1 ||
							cr.AggregationRule.ClusterRoleSelectors[0].MatchLabels["kausality.io/aggregate-to-kausality-proxy"] != "true" {
							t.Errorf("kausality-proxy-extensions must aggregate kausality.io/aggregate-to-kausality-proxy=true: %+v", cr.AggregationRule)
						}
					} else if cr.AggregationRule != nil {
						t.Errorf("%s is aggregated", cr.Name)
					}
					aggregated := cr.Labels["kausality.io/aggregate-to-kausality-proxy"] == "true"
					if aggregated != (cr.Name == "kausality-proxy-builtin-parents") {
						t.Errorf("%s: aggregate label %v", cr.Name, aggregated)
					}
				case "Role":
					var r rbacv1.Role
					convert(t, o, &r)
					got["Role/"+r.Namespace+"/"+r.Name] = ruleAtoms(r.Rules)
					checkNoWildcards(t, r.Name, r.Rules)
				case "ClusterRoleBinding", "RoleBinding":
					var b rbacv1.RoleBinding // same shape
					convert(t, o, &b)
					wantSA := map[string]string{
						"kausality-proxy": proxySA, "kausality-proxy-extensions": proxySA, "kausality-proxy-drifts": proxySA, "kausality-proxy-certgen": certgenSA,
					}[b.RoleRef.Name]
					if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Namespace != installNamespace ||
						b.Subjects[0].Name != wantSA || wantSA == "" {
						t.Errorf("%s %s binds %s to %+v", o.GetKind(), b.Name, b.RoleRef.Name, b.Subjects)
					}
					if o.GetKind() == "RoleBinding" && b.RoleRef.Kind != "Role" {
						t.Errorf("RoleBinding %s refers to a %s", b.Name, b.RoleRef.Kind)
					}
				}
			}
			for name, w := range want {
				g, ok := got[name]
				if !ok {
					t.Errorf("%s is missing", name)
					continue
				}
				if extra, missing := diff(g, w); len(extra)+len(missing) > 0 {
					t.Errorf("%s:\n  granted but not expected: %v\n  expected but not granted: %v", name, extra, missing)
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("unexpected %s", name)
				}
			}
		})
	}
}

func checkNoWildcards(t *testing.T, name string, rs []rbacv1.PolicyRule) {
	t.Helper()
	for _, r := range rs {
		for _, s := range slices.Concat(r.Verbs, r.APIGroups, r.Resources, r.NonResourceURLs) {
			if strings.Contains(s, "*") {
				t.Errorf("%s grants %q: no wildcards", name, s)
			}
		}
	}
}

func diff(got, want []string) (extra, missing []string) {
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	return extra, missing
}

// The manifests' RBAC is sufficient: the proxy, running as the manifests'
// service account (bound to nothing but the manifests' roles) with the
// Deployment's args, fronts kube-controller-manager, and the drift
// scenarios behave as they do with an all-powerful proxy identity:
//   - a Deployment with replicas 0 becomes stable and its lifecycle phase
//     is persisted (the proxy's annotation patch of the parent);
//   - a person scaling its ReplicaSet is a new origin and allowed;
//   - the deployment controller's revert is drift and denied in an enforce
//     namespace, again and again while it retries;
//   - a spec change of the Deployment makes the controller's writes
//     expected, and the new ReplicaSet carries the two-hop trace.
//
// The person creating the Deployment uses a client certificate (the proxy
// impersonates her, with the manifests' impersonation rules), the person
// scaling uses a service-account token (passed through).
func TestRBACSufficientForDriftScenario(t *testing.T) {
	in := installed(t)
	ctx := context.Background()
	admin := clientFor(t, cp.AdminConfig)

	ns := "drift-" + rand.String(5)
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Annotations: map[string]string{"kausality.io/mode": "enforce"}}}, metav1.CreateOptions{})
	mustf(t, err, "namespace")
	for _, subject := range []rbacv1.Subject{
		{Kind: "User", Name: "alice", APIGroup: "rbac.authorization.k8s.io"},
		{Kind: "ServiceAccount", Name: "bob", Namespace: ns},
	} {
		_, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(subject.Kind) + "-" + subject.Name + "-edit"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{subject},
		}, metav1.CreateOptions{})
		mustf(t, err, "role binding")
	}
	aliceDirect, err := cp.AddUser("alice", nil)
	mustf(t, err, "alice")
	alice := clientFor(t, in.throughProxy(aliceDirect))
	bobToken, err := cp.ServiceAccountToken(ctx, ns, "bob")
	mustf(t, err, "bob")
	bob := clientFor(t, in.throughProxy(&rest.Config{BearerToken: bobToken}))
	const controller = "system:serviceaccount:kube-system:deployment-controller"

	replicas := int32(0)
	_, err = alice.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}, metav1.CreateOptions{})
	mustf(t, err, "alice creates the Deployment through the proxy")
	eventually(t, 90*time.Second, "the Deployment is stable and its phase persisted by the proxy", func() error {
		d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		available := false
		for _, c := range d.Status.Conditions {
			available = available || (c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue)
		}
		if !available || d.Status.ObservedGeneration != d.Generation || d.Annotations["kausality.io/phase"] != "initialized" {
			return fmt.Errorf("available=%v generation=%d observed=%d phase=%q", available, d.Generation, d.Status.ObservedGeneration, d.Annotations["kausality.io/phase"])
		}
		return nil
	})
	rs := onlyReplicaSet(t, alice, ns)

	_, err = bob.AppsV1().ReplicaSets(ns).UpdateScale(ctx, rs.Name, &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: rs.Name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 2}}, metav1.UpdateOptions{})
	mustf(t, err, "bob scales the ReplicaSet (a new origin must be allowed)")
	if n := count(in.decisions(t, ns, "replicasets", rs.Name), "system:serviceaccount:"+ns+":bob", "Allow", "NewOrigin"); n != 1 {
		t.Fatalf("bob's scale: %d NewOrigin decisions, want 1\n%s", n, in.logTail())
	}
	eventually(t, 60*time.Second, "the deployment controller's revert is denied as drift", func() error {
		if count(in.decisions(t, ns, "replicasets", rs.Name), controller, "Deny", "DriftUnapproved") == 0 {
			return fmt.Errorf("no denied drift yet")
		}
		return nil
	})
	for i := 0; i < 5; i++ {
		got, err := alice.AppsV1().ReplicaSets(ns).Get(ctx, rs.Name, metav1.GetOptions{})
		mustf(t, err, "get ReplicaSet")
		if *got.Spec.Replicas != 2 {
			t.Fatalf("after %ds the drift went through: replicas %d", i, *got.Spec.Replicas)
		}
		time.Sleep(time.Second)
	}
	if n := count(in.decisions(t, ns, "replicasets", rs.Name), controller, "Allow", "DriftUnapproved"); n != 0 {
		t.Fatalf("%d drift writes were allowed in enforce mode", n)
	}

	// An expected change: alice changes the Deployment's spec.
	_, err = alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"kausality.io/trace-ticket":"OPS-7"}},"spec":{"template":{"metadata":{"annotations":{"rollout":"2"}}}}}`),
		metav1.PatchOptions{})
	mustf(t, err, "alice changes the Deployment's spec")
	eventually(t, 90*time.Second, "a new ReplicaSet with the two-hop trace", func() error {
		list, err := alice.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, r := range list.Items {
			if r.Spec.Template.Annotations["rollout"] != "2" {
				continue
			}
			var hops []struct {
				Kind, Name, User string
				Labels           map[string]string
			}
			if err := json.Unmarshal([]byte(r.Annotations["kausality.io/trace"]), &hops); err != nil {
				return fmt.Errorf("trace of %s: %v", r.Name, err)
			}
			if len(hops) != 2 || hops[0].Kind != "Deployment" || hops[0].User != "alice" || hops[0].Labels["ticket"] != "OPS-7" ||
				hops[1].Kind != "ReplicaSet" || hops[1].Name != r.Name || hops[1].User != controller {
				return fmt.Errorf("trace of %s: %+v", r.Name, hops)
			}
			return nil
		}
		return fmt.Errorf("no ReplicaSet for the new template yet")
	})
	// The decision line is written once kube-apiserver has answered the
	// write, so the ReplicaSet may be read a moment before it.
	eventually(t, 30*time.Second, "an Expected decision for the deployment controller's writes after the spec change", func() error {
		if count(in.decisions(t, ns, "replicasets", ""), controller, "Allow", "Expected") == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})

	// Nothing the proxy had to read, and no parent it had to annotate, was
	// forbidden to it: across everything kube-controller-manager did
	// through it so far, in every namespace.
	self := "system:serviceaccount:" + installNamespace + ":" + proxySA
	// (TestCustomResourcesViaAggregation's custom resource is unreadable on
	// purpose until its role is aggregated.)
	var problems []string
	for _, l := range in.logLines(t) {
		line := fmt.Sprint(l)
		if strings.Contains(line, "deploytest.example.com") || l.str("resource") == "gizmos" {
			continue
		}
		if !strings.Contains(line, `"`+self+`" cannot`) {
			continue
		}
		target := l.str("target")
		if l.str("msg") == "side write failed" && !isBuiltinParent(target) {
			t.Logf("expected: no patch permission for %s (not a built-in parent kind): %s", target, l.str("error"))
			continue
		}
		problems = append(problems, line)
	}
	for _, l := range in.logLines(t) {
		if l.str("msg") == "kausality decision" && l.str("outcome") == "error" && l.str("resource") != "gizmos" {
			problems = append(problems, fmt.Sprint(l))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("the manifests' RBAC was not sufficient:\n%s", strings.Join(problems, "\n"))
	}
}

func isBuiltinParent(target string) bool {
	for _, kind := range []string{"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicationController"} {
		if strings.Contains(target, " "+kind+" ") {
			return true
		}
	}
	return false
}

func onlyReplicaSet(t *testing.T, c kubernetes.Interface, ns string) *appsv1.ReplicaSet {
	t.Helper()
	var rs *appsv1.ReplicaSet
	eventually(t, 60*time.Second, "one ReplicaSet", func() error {
		list, err := c.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d ReplicaSets", len(list.Items))
		}
		rs = &list.Items[0]
		return nil
	})
	return rs
}

// access is one SubjectAccessReview question.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	s := a.verb + " " + a.group + "/" + a.resource
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.namespace != "" {
		s += " in " + a.namespace
	}
	if a.name != "" {
		s += " named " + a.name
	}
	return s
}

func allowed(t *testing.T, c kubernetes.Interface, user string, groups []string, a access) bool {
	t.Helper()
	sar, err := c.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name,
			},
		},
	}, metav1.CreateOptions{})
	mustf(t, err, "SubjectAccessReview %s", a)
	return sar.Status.Allowed
}

// The live cluster, after `kubectl apply -k manifests/` and aggregation,
// gives the proxy's and the init Job's service accounts what they need and
// nothing more: the kube-apiserver's own authorizer answers
// SubjectAccessReviews for a list of allowed and of forbidden actions, every
// built-in resource the proxy's default rules intercept is readable, and a
// forbidden request made with the proxy's own token fails.
func TestRBACNotBroaderThanListed(t *testing.T) {
	in := installed(t)
	ctx := context.Background()
	admin := clientFor(t, cp.AdminConfig)

	// Aggregation gave the extensions role exactly the built-in parents.
	ext, err := admin.RbacV1().ClusterRoles().Get(ctx, "kausality-proxy-extensions", metav1.GetOptions{})
	mustf(t, err, "aggregated role")
	if extra, missing := diff(ruleAtoms(ext.Rules), expectedRoles()["ClusterRole/kausality-proxy-builtin-parents"]); len(extra)+len(missing) > 0 {
		t.Errorf("aggregated kausality-proxy-extensions: extra %v, missing %v", extra, missing)
	}

	proxyUser := "system:serviceaccount:" + installNamespace + ":" + proxySA
	saGroups := []string{"system:serviceaccounts", "system:serviceaccounts:" + installNamespace, "system:authenticated"}
	for _, a := range []access{
		{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"},
		{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews"},
		{verb: "impersonate", resource: "users", name: "alice"},
		{verb: "impersonate", resource: "groups", name: "system:masters"},
		{verb: "impersonate", resource: "serviceaccounts", namespace: "team-a", name: "builder"},
		{verb: "impersonate", group: "authentication.k8s.io", resource: "uids", name: "1234"},
		{verb: "impersonate", group: "authentication.k8s.io", resource: "userextras", subresource: "authentication.kubernetes.io/credential-id", name: "X509SHA256=ab"},
		{verb: "watch", resource: "secrets"},
		{verb: "list", group: "apps", resource: "replicasets"},
		{verb: "get", resource: "namespaces", name: "default"},
		{verb: "patch", group: "apps", resource: "deployments", namespace: "team-a", name: "web"},
		{verb: "patch", group: "batch", resource: "cronjobs", namespace: "team-a", name: "nightly"},
		{verb: "watch", group: "kausality.io", resource: "clusterapprovalpolicies"},
		{verb: "update", group: "kausality.io", resource: "approvalpolicies", subresource: "status", namespace: "team-a", name: "p"},
		{verb: "update", group: "kausality.io", resource: "clusterapprovalpolicies", subresource: "status", name: "p"},
		{verb: "create", resource: "configmaps", namespace: installNamespace},
		{verb: "update", resource: "configmaps", namespace: installNamespace, name: "kausality-drift-0123456789abcdef"},
		{verb: "delete", resource: "configmaps", namespace: installNamespace, name: "kausality-drift-0123456789abcdef"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: installNamespace, name: "kausality-proxy-driftreports"},
	} {
		if !allowed(t, admin, proxyUser, saGroups, a) {
			t.Errorf("the proxy may not %s; the manifests must allow it", a)
		}
	}
	for _, a := range []access{
		// No writes beyond annotation patches of parents.
		{verb: "create", group: "apps", resource: "deployments", namespace: "team-a"},
		{verb: "update", group: "apps", resource: "deployments", namespace: "team-a", name: "web"},
		{verb: "delete", group: "apps", resource: "replicasets", namespace: "team-a", name: "web-1"},
		{verb: "deletecollection", resource: "pods", namespace: "team-a"},
		{verb: "patch", resource: "pods", namespace: "team-a", name: "web-1"},
		{verb: "patch", resource: "secrets", namespace: "team-a", name: "db"},
		{verb: "patch", resource: "configmaps", namespace: "team-a", name: "cfg"},
		{verb: "patch", resource: "namespaces", name: "team-a"},
		{verb: "patch", resource: "nodes", name: "node-1"},
		{verb: "patch", group: "apps", resource: "deployments", subresource: "status", namespace: "team-a", name: "web"},
		{verb: "patch", group: "apps", resource: "deployments", subresource: "scale", namespace: "team-a", name: "web"},
		{verb: "patch", group: "kausality.io", resource: "approvalpolicies", namespace: "team-a", name: "p"},
		{verb: "update", group: "kausality.io", resource: "approvalpolicies", namespace: "team-a", name: "p"},
		{verb: "patch", group: "kausality.io", resource: "approvalpolicies", subresource: "status", namespace: "team-a", name: "p"},
		{verb: "update", group: "kausality.io", resource: "clusterapprovalpolicies", name: "p"},
		{verb: "create", group: "kausality.io", resource: "clusterapprovalpolicies"},
		{verb: "create", resource: "secrets", namespace: installNamespace},
		// Drift records and the sender Lease only in the proxy's namespace.
		{verb: "create", resource: "configmaps", namespace: "team-a"},
		{verb: "update", resource: "configmaps", namespace: "team-a", name: "cfg"},
		{verb: "delete", resource: "configmaps", namespace: "team-a", name: "cfg"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: installNamespace, name: "other-controller"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kausality-proxy-driftreports"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "cluster-admin"},
		{verb: "bind", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "cluster-admin"},
		// No subresources that reach into pods, nodes or services.
		{verb: "get", resource: "pods", subresource: "log", namespace: "team-a", name: "web-1"},
		{verb: "create", resource: "pods", subresource: "exec", namespace: "team-a", name: "web-1"},
		{verb: "get", resource: "pods", subresource: "exec", namespace: "team-a", name: "web-1"},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: "team-a", name: "web-1"},
		{verb: "get", resource: "nodes", subresource: "proxy", name: "node-1"},
		{verb: "get", resource: "services", subresource: "proxy", namespace: "team-a", name: "web"},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: "team-a", name: "builder"},
		// Impersonation only of what x509 callers carry.
		{verb: "impersonate", group: "authentication.k8s.io", resource: "userextras", subresource: "scopes", name: "view"},
		// Nothing outside the listed resources (custom resources need a
		// ClusterRole labelled for aggregation).
		{verb: "get", group: "example.com", resource: "widgets", name: "w"},
		{verb: "list", group: "coordination.k8s.io", resource: "leases"},
		{verb: "list", resource: "events"},
	} {
		if allowed(t, admin, proxyUser, saGroups, a) {
			t.Errorf("the proxy may %s; the manifests must not allow it", a)
		}
	}

	// Every built-in resource the default resource rules intercept, as the
	// apiserver serves them, is readable: the list in the role is complete.
	disc, err := discovery.NewDiscoveryClientForConfig(cp.AdminConfig)
	mustf(t, err, "discovery")
	_, lists, err := disc.ServerGroupsAndResources()
	mustf(t, err, "discovery")
	targets := rules.Default()
	checked := 0
	for _, l := range lists {
		gv, err := schemaGroupVersion(l.GroupVersion)
		mustf(t, err, "group version")
		if gv == "cert-manager.io" {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "update") || !targets.Targets(gv, r.Name, "") {
				continue
			}
			if gv != "kausality.io" && strings.Contains(gv, ".") && !strings.HasSuffix(gv, ".k8s.io") && !strings.HasSuffix(gv, ".kubernetes.io") {
				continue // custom resources of other tests
			}
			for _, v := range read {
				checked++
				if !allowed(t, admin, proxyUser, saGroups, access{verb: v, group: gv, resource: r.Name}) {
					t.Errorf("the proxy intercepts %s/%s by default but may not %s it", gv, r.Name, v)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d built-in read permissions checked; discovery looks wrong", checked)
	}

	// The init Job's service account: its Secret and ConfigMap, nothing else.
	certgenUser := "system:serviceaccount:" + installNamespace + ":" + certgenSA
	for a, want := range map[access]bool{
		{verb: "create", resource: "secrets", namespace: installNamespace}:                            true,
		{verb: "get", resource: "secrets", namespace: installNamespace, name: tlsSecret}:              true,
		{verb: "update", resource: "secrets", namespace: installNamespace, name: tlsSecret}:           true,
		{verb: "patch", resource: "configmaps", namespace: installNamespace, name: kubeconfigCMName}:  true,
		{verb: "get", resource: "secrets", namespace: installNamespace, name: "other"}:                false,
		{verb: "list", resource: "secrets", namespace: installNamespace}:                              false,
		{verb: "delete", resource: "secrets", namespace: installNamespace, name: tlsSecret}:           false,
		{verb: "create", resource: "secrets", namespace: "default"}:                                   false,
		{verb: "patch", resource: "configmaps", namespace: installNamespace, name: configCMName}:      false,
		{verb: "update", resource: "configmaps", namespace: installNamespace, name: kubeconfigCMName}: false,
	} {
		if got := allowed(t, admin, certgenUser, saGroups, a); got != want {
			t.Errorf("certgen may %s: %v, want %v", a, got, want)
		}
	}

	// And for real, with the proxy's own token, straight to kube-apiserver.
	token, err := cp.ServiceAccountToken(ctx, installNamespace, proxySA)
	mustf(t, err, "token")
	asProxy := clientFor(t, &rest.Config{Host: cp.Host, TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAData}, BearerToken: token})
	_, err = asProxy.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nope"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("creating a ConfigMap with the proxy's token: %v, want Forbidden", err)
	}
	_, err = asProxy.CoreV1().Secrets(installNamespace).Patch(ctx, tlsSecret, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("patching a Secret with the proxy's token: %v, want Forbidden", err)
	}
	if _, err := asProxy.CoreV1().Secrets(installNamespace).Get(ctx, tlsSecret, metav1.GetOptions{}); err != nil {
		t.Errorf("reading a Secret with the proxy's token (intercepted by default, so readable): %v", err)
	}
	_ = in
}

func schemaGroupVersion(gv string) (string, error) {
	if !strings.Contains(gv, "/") {
		return "", nil // core: "v1"
	}
	g, _, _ := strings.Cut(gv, "/")
	return g, nil
}

// Custom resources are not in the proxy's role: a write that needs to read
// one fails (--failure-policy=Fail) and says why, until a ClusterRole
// labelled kausality.io/aggregate-to-kausality-proxy=true grants the reads
// (README, "Custom resources"); kube-controller-manager aggregates it into
// the bound kausality-proxy-extensions role and the same write goes through.
func TestCustomResourcesViaAggregation(t *testing.T) {
	in := installed(t)
	ctx := context.Background()
	admin := clientFor(t, cp.AdminConfig)
	k := newKubectl(t, cp.AdminConfig)
	k.run(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.deploytest.example.com
spec:
  group: deploytest.example.com
  scope: Namespaced
  names: {kind: Gizmo, listKind: GizmoList, plural: gizmos, singular: gizmo}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, "apply", "-f", "-")
	k.run("", "wait", "--for=condition=Established", "--timeout=60s", "crd/gizmos.deploytest.example.com")
	ns := "crd-" + rand.String(5)
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	mustf(t, err, "namespace")
	k.run(`apiVersion: deploytest.example.com/v1
kind: Gizmo
metadata:
  name: g1
spec:
  size: 1
`, "-n", ns, "apply", "-f", "-")

	dana, err := cp.AddUser("dana", []string{"system:masters"})
	mustf(t, err, "dana")
	through := newKubectl(t, in.throughProxy(dana))
	patch := func() (string, error) {
		_, stderr, err := through.try("", "-n", ns, "patch", "gizmo", "g1", "--type=merge", "-p", `{"spec":{"size":2}}`)
		return stderr, err
	}
	stderr, err := patch()
	if err == nil || !strings.Contains(stderr, "kausality-proxy cannot decide") || !strings.Contains(stderr, "forbidden") {
		t.Fatalf("a write needing an unreadable custom resource must fail and say why: %v\n%s", err, stderr)
	}

	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "kausality-proxy-deploytest-gizmos",
			Labels: map[string]string{"kausality.io/aggregate-to-kausality-proxy": "true"}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"deploytest.example.com"}, Resources: []string{"gizmos"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"deploytest.example.com"}, Resources: []string{"gizmos"}, Verbs: []string{"patch"}},
		},
	}, metav1.CreateOptions{})
	mustf(t, err, "the aggregated ClusterRole for the custom resource")
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoles().Delete(context.Background(), "kausality-proxy-deploytest-gizmos", metav1.DeleteOptions{})
	})
	eventually(t, 90*time.Second, "the write goes through once the role is aggregated", func() error {
		stderr, err := patch()
		if err != nil {
			return fmt.Errorf("%v: %s", err, stderr)
		}
		return nil
	})
	if count(in.decisions(t, ns, "gizmos", "g1"), "dana", "Allow", "") == 0 {
		t.Fatal("no decision about dana's write to the custom resource")
	}
}
