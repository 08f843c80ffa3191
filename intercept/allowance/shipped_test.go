package allowance

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// shippedPolicies compiles the policies shipped for kube-controller-manager.
func shippedPolicies(t *testing.T) []*Compiled {
	t.Helper()
	raw, err := os.ReadFile("../../manifests/allowances/kube-controller-manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []*Compiled
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
		c := Compile(&u)
		if !c.Valid() {
			t.Fatalf("shipped policy %s is invalid: %v", c.Name, c.Problems)
		}
		out = append(out, c)
	}
	if len(out) != 8 {
		t.Fatalf("%d shipped policies, want 8", len(out))
	}
	return out
}

// cluster plays the writes of kube-controller-manager's workload
// controllers, in the shapes they send, through allowances as the write
// path is to apply them, and records every violation.
type cluster struct {
	t          *testing.T
	policies   []*Compiled
	allowances map[string]Set
	generation map[string]int64
	settledAt  map[string]int64
	violations []string
}

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, policies: shippedPolicies(t), allowances: map[string]Set{}, generation: map[string]int64{}, settledAt: map[string]int64{}}
}

func (c *cluster) add(key string, g Grant) {
	c.allowances[key] = c.allowances[key].Add(g.Allowances...)
	if _, err := c.allowances[key].String(); err != nil {
		c.t.Fatalf("%s: %v", key, err)
	}
}

// change is a person's (or an autoscaler's) write of a parent.
func (c *cluster) change(s Subject, kind, name string, old, new map[string]any) {
	key := kind + "/" + name
	c.generation[key]++
	g := Initiate(context.Background(), c.policies, Change{Subject: s, Group: builtinGroup(kind), Kind: kind, Name: name, Old: old, New: new,
		Generation: c.generation[key]})
	c.add(key, g)
}

// controller is a controller's write of a child under its parent that
// carries out the parent's change.
func (c *cluster) controller(user, parentKind, parentName, kind, name string, old, new map[string]any) {
	pk := parentKind + "/" + parentName
	parent := Parent{Group: builtinGroup(parentKind), Kind: parentKind, Name: parentName, Allowances: c.allowances[pk].Allowances, SettledGeneration: c.settledAt[pk]}
	c.decide(Use(c.policies, parent, c.childChange(user, kind, name, old, new)), user, kind, name, old, new)
}

// duty is a controller's write under a settled parent that the drift
// decision tells apart as a standing duty (self-healing of an attempt,
// history pruning).
func (c *cluster) duty(user, parentKind, parentName, kind, name string, old, new map[string]any) {
	pk := parentKind + "/" + parentName
	d := Duty{Group: builtinGroup(parentKind), Kind: parentKind, Name: parentName, Generation: c.generation[pk], Initiator: alice}
	c.decide(Standing(c.policies, d, c.childChange(user, kind, name, old, new)), user, kind, name, old, new)
}

func (c *cluster) childChange(user, kind, name string, old, new map[string]any) Change {
	key := kind + "/" + name
	if new != nil && len(ChangedPaths(old, new)) > 0 {
		c.generation[key]++
	}
	return Change{Subject: Subject{User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}, Group: builtinGroup(kind), Kind: kind, Name: name,
		Old: old, New: new, Generation: c.generation[key]}
}

func (c *cluster) decide(v Verdict, user, kind, name string, old, new map[string]any) {
	for _, x := range v.Violations {
		c.violations = append(c.violations, x.Message)
	}
	w := Change{Subject: Subject{User: user}, Group: builtinGroup(kind), Kind: kind, Name: name, Old: old, New: new, Generation: c.generation[kind+"/"+name]}
	c.add(kind+"/"+name, Propagate(context.Background(), c.policies, v, w))
}

// settle: the object reports it has finished with its current generation;
// its allowances up to it are consumed and pruned.
func (c *cluster) settle(kind, name string) {
	key := kind + "/" + name
	c.settledAt[key] = c.generation[key]
	kept, _ := Prune(c.allowances[key], c.settledAt[key])
	c.allowances[key] = kept
}

// builtinGroup is the API group of the workload kinds the shipped
// policies speak of.
func builtinGroup(kind string) string {
	switch kind {
	case "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "ControllerRevision":
		return "apps"
	case "Job", "CronJob":
		return "batch"
	}
	return ""
}

func (c *cluster) noViolations() {
	c.t.Helper()
	if len(c.violations) > 0 {
		c.t.Errorf("%d violation(s):\n%s", len(c.violations), strings.Join(c.violations, "\n"))
	}
	c.violations = nil
}

const (
	kcmSA = "system:serviceaccount:kube-system:"
)

func podTemplate(image string, labels map[string]any) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"labels": labels},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
			"resources": map[string]any{}, "terminationMessagePath": "/dev/termination-log"}},
			"restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"},
	}
}

func deploy(replicas int64, image string, historyLimit int64) map[string]any {
	return map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web"},
		"spec": map[string]any{"replicas": replicas, "revisionHistoryLimit": historyLimit, "progressDeadlineSeconds": int64(600),
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": "25%", "maxUnavailable": "25%"}},
			"template": podTemplate(image, map[string]any{"app": "web"})}}
}

// rs is a ReplicaSet as the deployment controller writes it: the
// Deployment's template with the pod-template-hash label, its revision in
// an annotation.
func rs(name, hash string, replicas int64, image, revision string) map[string]any {
	labels := map[string]any{"app": "web", "pod-template-hash": hash}
	return map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{"name": name, "labels": labels, "annotations": map[string]any{
			"deployment.kubernetes.io/revision": revision, "deployment.kubernetes.io/desired-replicas": "3"}},
		"spec": map[string]any{"replicas": replicas, "selector": map[string]any{"matchLabels": labels},
			"template": podTemplate(image, labels)}}
}

func pod(name, image string, labels map[string]any) map[string]any {
	t := podTemplate(image, labels)
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "labels": labels}, "spec": t["spec"]}
}

func TestShippedPoliciesDeploymentLifeCycle(t *testing.T) {
	c := newCluster(t)
	ctrl, rsc := kcmSA+"deployment-controller", kcmSA+"replicaset-controller"
	v1, v2 := map[string]any{"app": "web", "pod-template-hash": "aaa"}, map[string]any{"app": "web", "pod-template-hash": "bbb"}

	// Create.
	c.change(person, "Deployment", "web", nil, deploy(1, "nginx:1", 10))
	c.controller(ctrl, "Deployment", "web", "ReplicaSet", "web-aaa", nil, rs("web-aaa", "aaa", 1, "nginx:1", "1"))
	c.controller(rsc, "ReplicaSet", "web-aaa", "Pod", "web-aaa-1", nil, pod("web-aaa-1", "nginx:1", v1))
	c.settle("ReplicaSet", "web-aaa")
	c.settle("Deployment", "web")
	c.noViolations()

	// Scale, as a person and as the autoscaler's /scale.
	for _, s := range []Subject{person, {User: hpa, Groups: []string{"system:serviceaccounts", "system:authenticated"}}} {
		c.change(s, "Deployment", "web", deploy(1, "nginx:1", 10), deploy(3, "nginx:1", 10))
		c.controller(ctrl, "Deployment", "web", "ReplicaSet", "web-aaa", rs("web-aaa", "aaa", 1, "nginx:1", "1"), rs("web-aaa", "aaa", 3, "nginx:1", "1"))
		c.controller(rsc, "ReplicaSet", "web-aaa", "Pod", "web-aaa-2", nil, pod("web-aaa-2", "nginx:1", v1))
		c.controller(rsc, "ReplicaSet", "web-aaa", "Pod", "web-aaa-3", nil, pod("web-aaa-3", "nginx:1", v1))
		c.settle("ReplicaSet", "web-aaa")
		c.settle("Deployment", "web")
		c.change(s, "Deployment", "web", deploy(3, "nginx:1", 10), deploy(1, "nginx:1", 10))
		c.controller(ctrl, "Deployment", "web", "ReplicaSet", "web-aaa", rs("web-aaa", "aaa", 3, "nginx:1", "1"), rs("web-aaa", "aaa", 1, "nginx:1", "1"))
		c.controller(rsc, "ReplicaSet", "web-aaa", "Pod", "web-aaa-2", pod("web-aaa-2", "nginx:1", v1), nil)
		c.controller(rsc, "ReplicaSet", "web-aaa", "Pod", "web-aaa-3", pod("web-aaa-3", "nginx:1", v1), nil)
		c.settle("ReplicaSet", "web-aaa")
		c.settle("Deployment", "web")
	}
	c.noViolations()

	// Image update: a new ReplicaSet scaled up, the old one down.
	c.change(person, "Deployment", "web", deploy(1, "nginx:1", 10), deploy(1, "nginx:2", 10))
	c.controller(ctrl, "Deployment", "web", "ReplicaSet", "web-bbb", nil, rs("web-bbb", "bbb", 1, "nginx:2", "2"))
	c.controller(rsc, "ReplicaSet", "web-bbb", "Pod", "web-bbb-1", nil, pod("web-bbb-1", "nginx:2", v2))
	c.controller(ctrl, "Deployment", "web", "ReplicaSet", "web-aaa", rs("web-aaa", "aaa", 1, "nginx:1", "1"), rs("web-aaa", "aaa", 0, "nginx:1", "1"))
	c.controller(rsc, "ReplicaSet", "web-aaa", "Pod", "web-aaa-1", pod("web-aaa-1", "nginx:1", v1), nil)
	c.noViolations()
	// The trace of the new ReplicaSet's Pod allowances runs from the
	// person's image change through the ReplicaSet.
	got := c.allowances["ReplicaSet/web-bbb"].Allowances
	if len(got) == 0 || got[0].Initiator != alice || len(got[0].Trace) != 2 ||
		got[0].Trace[0].Field != "spec.template.spec.containers[0].image" || got[0].Trace[1].Kind != "ReplicaSet" || got[0].Trace[1].Field != "spec.replicas" {
		t.Errorf("allowances of the new ReplicaSet: %+v", got)
	}
	c.settle("ReplicaSet", "web-aaa")
	c.settle("ReplicaSet", "web-bbb")
	c.settle("Deployment", "web")

	// Undo: the template goes back; the old ReplicaSet is scaled up again
	// and renumbered, the new one down.
	c.change(person, "Deployment", "web", deploy(1, "nginx:2", 10), deploy(1, "nginx:1", 10))
	c.controller(ctrl, "Deployment", "web", "ReplicaSet", "web-aaa", rs("web-aaa", "aaa", 0, "nginx:1", "1"), rs("web-aaa", "aaa", 1, "nginx:1", "3"))
	c.controller(rsc, "ReplicaSet", "web-aaa", "Pod", "web-aaa-4", nil, pod("web-aaa-4", "nginx:1", v1))
	c.controller(ctrl, "Deployment", "web", "ReplicaSet", "web-bbb", rs("web-bbb", "bbb", 1, "nginx:2", "2"), rs("web-bbb", "bbb", 0, "nginx:2", "2"))
	c.controller(rsc, "ReplicaSet", "web-bbb", "Pod", "web-bbb-1", pod("web-bbb-1", "nginx:2", v2), nil)
	c.settle("ReplicaSet", "web-aaa")
	c.settle("ReplicaSet", "web-bbb")
	c.settle("Deployment", "web")
	c.noViolations()

	// History cleanup: a lower revisionHistoryLimit, and the pruning the
	// controller does right after a rollout, under the settled Deployment.
	c.change(person, "Deployment", "web", deploy(1, "nginx:1", 10), deploy(1, "nginx:1", 0))
	c.controller(ctrl, "Deployment", "web", "ReplicaSet", "web-bbb", rs("web-bbb", "bbb", 0, "nginx:2", "2"), nil)
	c.settle("Deployment", "web")
	c.duty(ctrl, "Deployment", "web", "ReplicaSet", "web-ccc", rs("web-ccc", "ccc", 0, "nginx:0", "0"), nil)
	// Self-healing: a Pod of the settled ReplicaSet is re-created.
	c.duty(rsc, "ReplicaSet", "web-aaa", "Pod", "web-aaa-5", nil, pod("web-aaa-5", "nginx:1", v1))
	c.noViolations()

	// Violations are still held: in the window of an autoscaler's /scale,
	// the deployment controller's identity changing a ReplicaSet's
	// template.
	c.change(Subject{User: hpa, Groups: []string{"system:authenticated"}}, "Deployment", "web", deploy(1, "nginx:1", 0), deploy(2, "nginx:1", 0))
	c.controller(ctrl, "Deployment", "web", "ReplicaSet", "web-aaa", rs("web-aaa", "aaa", 1, "evil:1", "3"), rs("web-aaa", "aaa", 1, "nginx:1", "3"))
	if len(c.violations) != 1 || !strings.Contains(c.violations[0], "spec.template.spec.containers[0].image") {
		t.Errorf("the template revert was not held: %q", c.violations)
	}
}

func sts(replicas int64, image string) map[string]any {
	return map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": map[string]any{"name": "db"},
		"spec": map[string]any{"replicas": replicas, "serviceName": "db", "selector": map[string]any{"matchLabels": map[string]any{"app": "db"}},
			"template": podTemplate(image, map[string]any{"app": "db"}),
			"volumeClaimTemplates": []any{map[string]any{"metadata": map[string]any{"name": "data"},
				"spec": map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}}},
			"persistentVolumeClaimRetentionPolicy": map[string]any{"whenDeleted": "Delete", "whenScaled": "Delete"}}}
}

func revision(name string, n int64, image string) map[string]any {
	return map[string]any{"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": map[string]any{"name": name},
		"data": map[string]any{"spec": map[string]any{"template": podTemplate(image, nil), "$patch": "replace"}}, "revision": n}
}

func pvc(name string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}}
}

func TestShippedPoliciesStatefulSetAndDaemonSet(t *testing.T) {
	c := newCluster(t)
	ctrl := kcmSA + "statefulset-controller"
	labels := map[string]any{"app": "db"}
	c.change(person, "StatefulSet", "db", nil, sts(1, "pg:1"))
	c.controller(ctrl, "StatefulSet", "db", "ControllerRevision", "db-1", nil, revision("db-1", 1, "pg:1"))
	c.controller(ctrl, "StatefulSet", "db", "PersistentVolumeClaim", "data-db-0", nil, pvc("data-db-0"))
	c.controller(ctrl, "StatefulSet", "db", "Pod", "db-0", nil, pod("db-0", "pg:1", labels))
	c.settle("StatefulSet", "db")
	// Scale up and down.
	c.change(person, "StatefulSet", "db", sts(1, "pg:1"), sts(2, "pg:1"))
	c.controller(ctrl, "StatefulSet", "db", "PersistentVolumeClaim", "data-db-1", nil, pvc("data-db-1"))
	c.controller(ctrl, "StatefulSet", "db", "Pod", "db-1", nil, pod("db-1", "pg:1", labels))
	c.settle("StatefulSet", "db")
	c.change(person, "StatefulSet", "db", sts(2, "pg:1"), sts(1, "pg:1"))
	c.controller(ctrl, "StatefulSet", "db", "Pod", "db-1", pod("db-1", "pg:1", labels), nil)
	c.settle("StatefulSet", "db")
	// Image update, then undo: the old revision is renumbered.
	c.change(person, "StatefulSet", "db", sts(1, "pg:1"), sts(1, "pg:2"))
	c.controller(ctrl, "StatefulSet", "db", "ControllerRevision", "db-2", nil, revision("db-2", 2, "pg:2"))
	c.controller(ctrl, "StatefulSet", "db", "Pod", "db-0", pod("db-0", "pg:1", labels), nil)
	c.controller(ctrl, "StatefulSet", "db", "Pod", "db-0", nil, pod("db-0", "pg:2", labels))
	c.settle("StatefulSet", "db")
	c.change(person, "StatefulSet", "db", sts(1, "pg:2"), sts(1, "pg:1"))
	c.controller(ctrl, "StatefulSet", "db", "ControllerRevision", "db-1", revision("db-1", 1, "pg:1"), revision("db-1", 3, "pg:1"))
	c.controller(ctrl, "StatefulSet", "db", "Pod", "db-0", pod("db-0", "pg:2", labels), nil)
	c.controller(ctrl, "StatefulSet", "db", "Pod", "db-0", nil, pod("db-0", "pg:1", labels))
	c.settle("StatefulSet", "db")
	// History pruning under the settled StatefulSet.
	c.duty(ctrl, "StatefulSet", "db", "ControllerRevision", "db-2", revision("db-2", 2, "pg:2"), nil)
	c.noViolations()

	ds := func(image string) map[string]any {
		return map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": "agent"},
			"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "agent"}},
				"template": podTemplate(image, map[string]any{"app": "agent"})}}
	}
	dsc := kcmSA + "daemon-set-controller"
	agent := map[string]any{"app": "agent"}
	c.change(person, "DaemonSet", "agent", nil, ds("agent:1"))
	c.controller(dsc, "DaemonSet", "agent", "ControllerRevision", "agent-1", nil, revision("agent-1", 1, "agent:1"))
	c.controller(dsc, "DaemonSet", "agent", "Pod", "agent-x", nil, pod("agent-x", "agent:1", agent))
	c.settle("DaemonSet", "agent")
	c.change(person, "DaemonSet", "agent", ds("agent:1"), ds("agent:2"))
	c.controller(dsc, "DaemonSet", "agent", "ControllerRevision", "agent-2", nil, revision("agent-2", 2, "agent:2"))
	c.controller(dsc, "DaemonSet", "agent", "Pod", "agent-x", pod("agent-x", "agent:1", agent), nil)
	c.controller(dsc, "DaemonSet", "agent", "Pod", "agent-y", nil, pod("agent-y", "agent:2", agent))
	c.settle("DaemonSet", "agent")
	// A node joins: a Pod for it under the settled DaemonSet.
	c.duty(dsc, "DaemonSet", "agent", "Pod", "agent-z", nil, pod("agent-z", "agent:2", agent))
	c.noViolations()
}

func TestShippedPoliciesJobAndCronJob(t *testing.T) {
	c := newCluster(t)
	jc, cjc := kcmSA+"job-controller", kcmSA+"cronjob-controller"
	jobSpec := map[string]any{"backoffLimit": int64(6), "completions": int64(1), "parallelism": int64(1),
		"template": podTemplate("busybox", map[string]any{"job-name": "once"})}
	job := func(name string) map[string]any {
		return map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": map[string]any{"name": name}, "spec": jobSpec}
	}
	podOf := func(name string) map[string]any {
		p := pod(name, "busybox", map[string]any{"job-name": "once"})
		p["metadata"].(map[string]any)["finalizers"] = []any{"batch.kubernetes.io/job-tracking"}
		return p
	}
	// A Job a person creates: its Pod, and the tracking finalizer taken off.
	c.change(person, "Job", "once", nil, job("once"))
	c.controller(jc, "Job", "once", "Pod", "once-1", nil, podOf("once-1"))
	done := podOf("once-1")
	done["metadata"].(map[string]any)["finalizers"] = nil
	c.controller(jc, "Job", "once", "Pod", "once-1", podOf("once-1"), done)
	c.settle("Job", "once")
	c.noViolations()

	// A CronJob: its Jobs are created on schedule under the settled
	// CronJob (a standing duty), and pass allowances on to their Pods.
	cron := map[string]any{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": map[string]any{"name": "tick"},
		"spec": map[string]any{"schedule": "*/1 * * * *", "successfulJobsHistoryLimit": int64(1), "jobTemplate": map[string]any{"spec": jobSpec}}}
	c.change(person, "CronJob", "tick", nil, cron)
	c.settle("CronJob", "tick")
	c.duty(cjc, "CronJob", "tick", "Job", "tick-1", nil, job("tick-1"))
	c.controller(jc, "Job", "tick-1", "Pod", "tick-1-a", nil, podOf("tick-1-a"))
	if got := c.allowances["Job/tick-1"].Allowances; len(got) == 0 || got[0].Trace[0].Kind != "CronJob" || got[0].Trace[1].Kind != "Job" {
		t.Errorf("allowances of the scheduled Job: %+v", got)
	}
	c.settle("Job", "tick-1")
	c.duty(cjc, "CronJob", "tick", "Job", "tick-2", nil, job("tick-2"))
	c.duty(cjc, "CronJob", "tick", "Job", "tick-1", job("tick-1"), nil)
	c.noViolations()
}

// TestShippedPoliciesNameTheirGroups: the shipped policies speak of the
// workload kinds of kube-controller-manager only, not of a custom
// resource that shares a kind's name.
func TestShippedPoliciesNameTheirGroups(t *testing.T) {
	policies := shippedPolicies(t)
	for _, kind := range []string{"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob"} {
		governed, custom := false, false
		for _, p := range policies {
			governed = governed || p.Governs(builtinGroup(kind), kind)
			custom = custom || p.Governs("example.com", kind)
		}
		if !governed || custom {
			t.Errorf("%s: governed in %q %v, in example.com %v; want only the former", kind, builtinGroup(kind), governed, custom)
		}
	}
	g := Initiate(context.Background(), policies, Change{Subject: person, Group: "example.com", Kind: "Deployment", Name: "web",
		Old: deploy(1, "app:1", 10), New: deploy(3, "app:1", 10), Generation: 2})
	if len(g.Allowances) > 0 {
		t.Errorf("a scale of a custom Deployment granted %v", g.Allowances)
	}
}
