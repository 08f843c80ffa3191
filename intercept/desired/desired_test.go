package desired

import (
	"fmt"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func u(t testing.TB, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func deployment() *appsv1.Deployment {
	replicas := int32(3)
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Generation: 4, Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "app", Image: "nginx:1.25", Ports: []corev1.ContainerPort{{ContainerPort: 80}},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}},
					{Name: "sidecar", Image: "envoy:1.30"},
				}},
			},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 4, Replicas: 3},
	}
}

func configMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "default"}, Data: data}
}

func role(verbs ...string) *rbacv1.Role {
	return &rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "default"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}}}
}

func fromJSON(t testing.TB, s string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return obj
}

func TestDiff(t *testing.T) {
	dep := u(t, deployment())
	mutate := func(obj *unstructured.Unstructured, f func(o map[string]interface{})) *unstructured.Unstructured {
		c := obj.DeepCopy()
		f(c.Object)
		return c
	}
	set := func(obj *unstructured.Unstructured, v interface{}, path ...string) *unstructured.Unstructured {
		return mutate(obj, func(o map[string]interface{}) {
			if err := unstructured.SetNestedField(o, v, path...); err != nil {
				t.Fatal(err)
			}
		})
	}
	containers := func(obj *unstructured.Unstructured, f func(cs []interface{}) []interface{}) *unstructured.Unstructured {
		return mutate(obj, func(o map[string]interface{}) {
			cs, _, _ := unstructured.NestedSlice(o, "spec", "template", "spec", "containers")
			_ = unstructured.SetNestedSlice(o, f(cs), "spec", "template", "spec", "containers")
		})
	}
	secret := func(data map[string][]byte, stringData map[string]string) *unstructured.Unstructured {
		return u(t, &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: data, StringData: stringData})
	}
	crb := func(subject string) *unstructured.Unstructured {
		return u(t, &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: "b"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: subject, Namespace: "default"}}})
	}
	long := strings.Repeat("x", 100)

	tests := []struct {
		name     string
		old, new *unstructured.Unstructured
		changed  bool
		want     []string // Change.String() of each change
		total    int      // 0: len(want)
	}{
		// Deployments: spec only.
		{name: "no change", old: dep, new: dep.DeepCopy(), changed: false},
		{name: "replicas", old: dep, new: set(dep, int64(5), "spec", "replicas"), changed: true, want: []string{"spec.replicas: 3 → 5"}},
		{name: "replicas as float is the same number", old: dep, new: set(dep, float64(3), "spec", "replicas"), changed: false},
		{name: "image of a container, matched by name", old: dep, new: containers(dep, func(cs []interface{}) []interface{} {
			cs[1].(map[string]interface{})["image"] = "envoy:1.31"
			return cs
		}), changed: true, want: []string{`spec.template.spec.containers[name=sidecar].image: "envoy:1.30" → "envoy:1.31"`}},
		{name: "container removed", old: dep, new: containers(dep, func(cs []interface{}) []interface{} { return cs[:1] }), changed: true,
			want: []string{`spec.template.spec.containers[name=sidecar]: {"image":"envoy:1.30","name":"sidecar","resources":{}} → <unset>`}},
		{name: "containers reordered", old: dep, new: containers(dep, func(cs []interface{}) []interface{} { return []interface{}{cs[1], cs[0]} }), changed: true,
			want: []string{`spec.template.spec.containers (order of name): ["app","sidecar"] → ["sidecar","app"]`}},
		{name: "container port keyed by containerPort", old: dep, new: containers(dep, func(cs []interface{}) []interface{} {
			cs[0].(map[string]interface{})["ports"] = []interface{}{map[string]interface{}{"containerPort": int64(8080)}}
			return cs
		}), changed: true, want: []string{
			`spec.template.spec.containers[name=app].ports[containerPort=8080]: <unset> → {"containerPort":8080}`,
			`spec.template.spec.containers[name=app].ports[containerPort=80]: {"containerPort":80} → <unset>`,
		}},
		{name: "label key with dots is quoted", old: dep, new: set(dep, "x", "spec", "template", "metadata", "labels", "app.kubernetes.io/name"), changed: true,
			want: []string{`spec.template.metadata.labels["app.kubernetes.io/name"]: <unset> → "x"`}},
		{name: "long values are truncated", old: dep, new: set(dep, long, "spec", "template", "spec", "schedulerName"), changed: true,
			want: []string{`spec.template.spec.schedulerName: <unset> → "` + strings.Repeat("x", 62) + `…`}},
		{name: "metadata only", old: dep, new: mutate(dep, func(o map[string]interface{}) {
			o["metadata"].(map[string]interface{})["labels"] = map[string]interface{}{"x": "y"}
			o["metadata"].(map[string]interface{})["annotations"] = map[string]interface{}{"kausality.io/approvals": "[]"}
			o["metadata"].(map[string]interface{})["generation"] = int64(5)
		}), changed: false},
		{name: "status only", old: dep, new: set(dep, int64(7), "status", "observedGeneration"), changed: false},
		{name: "null, absent, {} and [] are the same", old: dep, new: mutate(dep, func(o map[string]interface{}) {
			spec := o["spec"].(map[string]interface{})
			spec["paused"] = nil
			spec["strategy"] = map[string]interface{}{}
			spec["template"].(map[string]interface{})["spec"].(map[string]interface{})["volumes"] = []interface{}{}
		}), changed: false},
		{name: "type change", old: dep, new: set(dep, "3", "spec", "replicas"), changed: true, want: []string{`spec.replicas: 3 → "3"`}},
		{name: "spec removed", old: dep, new: mutate(dep, func(o map[string]interface{}) { delete(o, "spec") }), changed: true, total: 4},
		{name: "top-level fields besides spec are not desired state", old: dep, new: set(dep, "x", "extra"), changed: false},

		// ConfigMap
		{name: "configmap data", old: u(t, configMap(map[string]string{"a": "1", "config.yaml": "x: 1"})), new: u(t, configMap(map[string]string{"a": "2", "config.yaml": "x: 1", "b": "new"})), changed: true,
			want: []string{`data.a: "1" → "2"`, `data.b: <unset> → "new"`}},
		{name: "configmap key with a dot", old: u(t, configMap(map[string]string{"config.yaml": "x: 1"})), new: u(t, configMap(map[string]string{"config.yaml": "x: 2"})), changed: true,
			want: []string{`data["config.yaml"]: "x: 1" → "x: 2"`}},
		{name: "configmap binaryData", old: u(t, configMap(nil)), new: mutate(u(t, configMap(nil)), func(o map[string]interface{}) {
			o["binaryData"] = map[string]interface{}{"bin": "AAEC"}
		}), changed: true, want: []string{`binaryData.bin: <unset> → "AAEC"`}},
		{name: "configmap immutable", old: u(t, configMap(nil)), new: set(u(t, configMap(nil)), true, "immutable"), changed: true, want: []string{`immutable: <unset> → true`}},
		{name: "configmap labels only", old: u(t, configMap(map[string]string{"a": "1"})), new: mutate(u(t, configMap(map[string]string{"a": "1"})), func(o map[string]interface{}) {
			o["metadata"].(map[string]interface{})["labels"] = map[string]interface{}{"x": "y"}
		}), changed: false},

		// Secret: values are redacted.
		{name: "secret data", old: secret(map[string][]byte{"password": []byte("hunter2")}, nil), new: secret(map[string][]byte{"password": []byte("hunter3")}, nil), changed: true,
			want: []string{`data.password: <redacted> → <redacted>`}},
		{name: "secret stringData", old: secret(nil, nil), new: secret(nil, map[string]string{"token": "abc"}), changed: true,
			want: []string{`stringData.token: <unset> → <redacted>`}},
		{name: "secret type is not redacted", old: secret(nil, nil), new: set(secret(nil, nil), "kubernetes.io/tls", "type"), changed: true,
			want: []string{`type: <unset> → "kubernetes.io/tls"`}},

		// RBAC
		{name: "role rules", old: u(t, role("get")), new: u(t, role("get", "list")), changed: true,
			want: []string{`rules[0].verbs: ["get"] → ["get","list"]`}},
		{name: "role rule added", old: u(t, role("get")), new: mutate(u(t, role("get")), func(o map[string]interface{}) {
			o["rules"] = append(o["rules"].([]interface{}), map[string]interface{}{"apiGroups": []interface{}{""}, "resources": []interface{}{"secrets"}, "verbs": []interface{}{"get"}})
		}), changed: true, want: []string{`rules: [{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}] → [{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]},…`}},
		{name: "binding subject", old: crb("a"), new: crb("b"), changed: true, want: []string{
			`subjects[name=b]: <unset> → {"kind":"ServiceAccount","name":"b","namespace":"default"}`,
			`subjects[name=a]: {"kind":"ServiceAccount","name":"a","namespace":"default"} → <unset>`,
		}},
		{name: "binding roleRef", old: crb("a"), new: set(crb("a"), "edit", "roleRef", "name"), changed: true, want: []string{`roleRef.name: "view" → "edit"`}},

		// Custom resources
		{name: "custom resource with spec", old: fromJSON(t, `{"apiVersion":"example.com/v1","kind":"App","metadata":{"name":"a"},"spec":{"size":1},"data":{"x":1}}`),
			new: fromJSON(t, `{"apiVersion":"example.com/v1","kind":"App","metadata":{"name":"a"},"spec":{"size":2},"data":{"x":2}}`), changed: true,
			want: []string{"spec.size: 1 → 2"}},
		{name: "custom resource without spec", old: fromJSON(t, `{"apiVersion":"example.com/v1","kind":"Cfg","metadata":{"name":"a"},"settings":{"level":"info"},"status":{"ok":true}}`),
			new: fromJSON(t, `{"apiVersion":"example.com/v1","kind":"Cfg","metadata":{"name":"a"},"settings":{"level":"debug"},"status":{"ok":false}}`), changed: true,
			want: []string{`settings.level: "info" → "debug"`}},
		{name: "spec added to a spec-less object", old: fromJSON(t, `{"apiVersion":"example.com/v1","kind":"Cfg","metadata":{"name":"a"},"settings":{"level":"info"}}`),
			new: fromJSON(t, `{"apiVersion":"example.com/v1","kind":"Cfg","metadata":{"name":"a"},"settings":{"level":"info"},"spec":{"a":1}}`), changed: true,
			want: []string{"spec.a: <unset> → 1"}},

		// Creates and deletes
		{name: "create with desired state", old: nil, new: u(t, configMap(map[string]string{"a": "1"})), changed: true, want: []string{`data.a: <unset> → "1"`}},
		{name: "create without desired state", old: nil, new: u(t, configMap(nil)), changed: false},
		{name: "create of a deployment", old: nil, new: dep, changed: true, total: 4},
		{name: "delete", old: u(t, configMap(map[string]string{"a": "1"})), new: nil, changed: true, want: []string{`data.a: "1" → <unset>`}},
		{name: "delete of an object without desired state still counts", old: u(t, configMap(nil)), new: nil, changed: true},
		{name: "nothing", old: nil, new: nil, changed: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Diff(tt.old, tt.new)
			if r.Changed != tt.changed {
				t.Errorf("Changed = %v, want %v (%s)", r.Changed, tt.changed, diffText(r))
			}
			if tt.want != nil {
				var got []string
				for _, c := range r.Changes {
					got = append(got, c.String())
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("changes:\n got: %q\nwant: %q", got, tt.want)
				}
			}
			total := tt.total
			if total == 0 {
				total = len(tt.want)
			}
			if tt.want != nil || tt.total != 0 {
				if r.Total != total {
					t.Errorf("Total = %d, want %d (%s)", r.Total, total, diffText(r))
				}
			}
			changed, paths := Changed(tt.old, tt.new)
			if changed != r.Changed || !reflect.DeepEqual(paths, r.Changes) {
				t.Errorf("Changed() disagrees with Diff()")
			}
		})
	}
}

func TestTruncation(t *testing.T) {
	dep := u(t, deployment())
	long := strings.Repeat("x", 100)
	n := dep.DeepCopy()
	_ = unstructured.SetNestedField(n.Object, long, "spec", "minReadySeconds")
	r := Diff(dep, n)
	if len(r.Changes) != 1 {
		t.Fatalf("changes %v", r.Changes)
	}
	want := `"` + strings.Repeat("x", 62) + "…"
	if r.Changes[0].New != want || len([]rune(r.Changes[0].New)) != MaxValueLen {
		t.Errorf("New = %q, want %q", r.Changes[0].New, want)
	}
	// Multi-byte characters are not cut in half.
	_ = unstructured.SetNestedField(n.Object, strings.Repeat("ü", 100), "spec", "minReadySeconds")
	if got := Diff(dep, n).Changes[0].New; !strings.HasSuffix(got, "ü…") {
		t.Errorf("New = %q", got)
	}
}

func TestBoundedAndDeterministic(t *testing.T) {
	data := map[string]string{}
	for i := 0; i < 50; i++ {
		data[fmt.Sprintf("k%02d", i)] = fmt.Sprint(i)
	}
	old := u(t, configMap(nil))
	n := u(t, configMap(data))
	first := Diff(old, n)
	if !first.Changed || len(first.Changes) != MaxChanges || first.Total != 50 || first.Total-len(first.Changes) != 30 {
		t.Fatalf("got %d changes of %d", len(first.Changes), first.Total)
	}
	if first.Changes[0].Path != "data.k00" || first.Changes[19].Path != "data.k19" {
		t.Errorf("order: %s ... %s", first.Changes[0].Path, first.Changes[19].Path)
	}
	for i := 0; i < 20; i++ {
		if again := Diff(old, n); !reflect.DeepEqual(again, first) {
			t.Fatal("Diff is not deterministic")
		}
	}
}

func TestState(t *testing.T) {
	cm := u(t, configMap(map[string]string{"a": "1"}))
	cm.Object["status"] = map[string]interface{}{"x": 1}
	if got := State(cm, hasSpec(cm)); !reflect.DeepEqual(got, map[string]interface{}{"data": map[string]interface{}{"a": "1"}}) {
		t.Errorf("configmap state %v", got)
	}
	dep := u(t, deployment())
	if got := State(dep, hasSpec(dep)); len(got) != 1 || got["spec"] == nil {
		t.Errorf("deployment state %v", got)
	}
	if State(nil, false) != nil {
		t.Error("nil object")
	}
}

func TestScale(t *testing.T) {
	dep := u(t, deployment())
	scale := func(replicas interface{}) *unstructured.Unstructured {
		s := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": map[string]interface{}{"name": "web"}, "spec": map[string]interface{}{}}}
		if replicas != nil {
			s.Object["spec"].(map[string]interface{})["replicas"] = replicas
		}
		return s
	}

	t.Run("scale write is a spec.replicas change", func(t *testing.T) {
		target, err := ScaleToSpec(scale(int64(5)), dep)
		if err != nil {
			t.Fatal(err)
		}
		r := Diff(dep, target)
		if !r.Changed || len(r.Changes) != 1 || r.Changes[0].String() != "spec.replicas: 3 → 5" {
			t.Errorf("got %s", diffText(r))
		}
		if nested, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); nested != 3 {
			t.Error("target modified")
		}
	})
	t.Run("same replicas is no change", func(t *testing.T) {
		target, _ := ScaleToSpec(scale(int64(3)), dep)
		if Diff(dep, target).Changed {
			t.Error("changed")
		}
	})
	t.Run("absent replicas means zero", func(t *testing.T) {
		target, _ := ScaleToSpec(scale(nil), dep)
		if got := Diff(dep, target).Changes; len(got) != 1 || got[0].String() != "spec.replicas: 3 → 0" {
			t.Errorf("got %v", got)
		}
	})
	t.Run("no target", func(t *testing.T) {
		target, _ := ScaleToSpec(scale(float64(2)), nil)
		if !reflect.DeepEqual(target.Object, map[string]interface{}{"spec": map[string]interface{}{"replicas": int64(2)}}) {
			t.Errorf("got %v", target.Object)
		}
	})
	t.Run("custom resource path", func(t *testing.T) {
		cr := fromJSON(t, `{"apiVersion":"example.com/v1","kind":"Pool","metadata":{"name":"p"},"spec":{"size":2}}`)
		s, err := ScaleFromTarget(cr, ".spec.size")
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _ := unstructured.NestedInt64(s.Object, "spec", "replicas"); v != 2 || s.GetKind() != "Scale" || s.GetName() != "p" {
			t.Errorf("scale %v", s.Object)
		}
		_ = unstructured.SetNestedField(s.Object, int64(4), "spec", "replicas")
		target, err := ScaleToPath(s, cr, ".spec.size")
		if err != nil {
			t.Fatal(err)
		}
		if got := diffText(Diff(cr, target)); got != "spec.size: 2 → 4" {
			t.Errorf("got %s", got)
		}
	})
	for name, tc := range map[string]struct {
		scale *unstructured.Unstructured
		path  string
		msg   string
	}{
		"wrong kind":      {scale: dep, path: DefaultSpecReplicasPath, msg: `the body of a scale request must be a Scale, got "Deployment"`},
		"string replicas": {scale: scale("5"), path: DefaultSpecReplicasPath, msg: `the Scale's spec.replicas must be an integer, got "5"`},
		"fractional":      {scale: scale(2.5), path: DefaultSpecReplicasPath, msg: `the Scale's spec.replicas must be an integer, got 2.5`},
		"bad path":        {scale: scale(int64(1)), path: "spec.replicas", msg: `unsupported replicas path "spec.replicas": expected a dotted path such as .spec.replicas`},
		"no body":         {scale: nil, path: DefaultSpecReplicasPath, msg: `the scale request has no body`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ScaleToPath(tc.scale, dep, tc.path)
			if !apierrors.IsBadRequest(err) || err.Error() != tc.msg {
				t.Errorf("got %v, want 400 %q", err, tc.msg)
			}
		})
	}
}

func BenchmarkDiff(b *testing.B) {
	old := u(b, deployment())
	n := old.DeepCopy()
	_ = unstructured.SetNestedField(n.Object, int64(5), "spec", "replicas")
	b.Run("Deployment", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Diff(old, n)
		}
	})
}

// deeplyNested returns {"spec": {"a": {"a": ... {"a": leaf}}}} depth levels
// deep.
func deeplyNested(depth int, leaf interface{}) *unstructured.Unstructured {
	v := leaf
	for i := 0; i < depth; i++ {
		v = map[string]interface{}{"a": v}
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "ConfigMap", "spec": v,
	}}
}

// Any writer can send an object nested thousands of levels deep. The diff's
// cost must grow with the size of the object, not with the square of its
// depth: doubling the depth at most about doubles what it allocates.
func TestDiffIsLinearInDepth(t *testing.T) {
	allocated := func(depth int) uint64 {
		old, new := deeplyNested(depth, "x"), deeplyNested(depth, "y")
		var before, after goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		r := Diff(old, new)
		goruntime.ReadMemStats(&after)
		if r.Total != 1 {
			t.Fatalf("depth %d: %d changes, want 1", depth, r.Total)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	small, large := allocated(2000), allocated(8000)
	// Linear: about 4x. Quadratic path strings: about 16x.
	if large > 6*small {
		t.Fatalf("the diff allocated %d bytes at depth 2000 and %d at depth 8000: it grows faster than the depth", small, large)
	}
}

// diffText renders a diff on one line, e.g.
// `spec.replicas: 3 → 5; spec.paused: <unset> → true (and 2 more)`.
func diffText(r Result) string {
	parts := make([]string, len(r.Changes))
	for i, c := range r.Changes {
		parts[i] = c.String()
	}
	s := strings.Join(parts, "; ")
	if n := r.Total - len(r.Changes); n > 0 {
		s += fmt.Sprintf(" (and %d more)", n)
	}
	return s
}
