package objects

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// typedDeployment is the Deployment whose JSON is stored.
func typedDeployment(t testing.TB, stored []byte) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := json.Unmarshal(stored, d); err != nil {
		t.Fatal(err)
	}
	d.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	return d
}

// typedEventFrame is a protobuf watch event of obj, framed by its length,
// as kube-apiserver writes it.
func typedEventFrame(t testing.TB, typ watch.EventType, obj runtime.Object) []byte {
	t.Helper()
	var raw bytes.Buffer
	if err := typedParentDecoder.Encode(obj, &raw); err != nil {
		t.Fatal(err)
	}
	event := metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw.Bytes()}}
	data, err := event.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(data))), data...)
}

func TestEncodesAsTheTypes(t *testing.T) {
	for _, tc := range []struct {
		major, minor, builtWith string
		want                    bool
	}{
		{"1", "35", "v0.35.4", true},
		// Older: a pod template's empty creationTimestamp is null in the
		// JSON of 1.33, which the types of 1.35 leave out.
		{"1", "34", "v0.35.4", false},
		{"1", "33", "v0.35.4", false},
		{"1", "35+", "v0.35.4", true},
		{"1", "36", "v0.35.4", false},
		{"1", "36+", "v0.35.0", false},
		{"2", "0", "v0.35.4", false},
		{"1", "", "v0.35.4", false},
		{"1", "35", "", false},
		{"1", "35", "v1.2.3", false},
		{"1", "35", "v0.35.0-alpha.1", true},
	} {
		got := encodesAsTheTypes(&version.Info{Major: tc.major, Minor: tc.minor}, tc.builtWith)
		if got != tc.want {
			t.Errorf("server %s.%s, types %s: %v, want %v", tc.major, tc.minor, tc.builtWith, got, tc.want)
		}
	}
	if encodesAsTheTypes(nil, "v0.35.4") {
		t.Error("an unknown server version counts as known")
	}
}

func TestTypedParentKind(t *testing.T) {
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	statefulSets := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	kinds := map[schema.GroupVersionResource]schema.GroupVersionKind{
		deployments:  appsv1.SchemeGroupVersion.WithKind("Deployment"),
		statefulSets: appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
		widgets:      {Group: "example.com", Version: "v1", Kind: "Widget"},
	}
	kindFor := func(gvr schema.GroupVersionResource) (schema.GroupVersionKind, error) {
		if gvk, ok := kinds[gvr]; ok {
			return gvk, nil
		}
		return schema.GroupVersionKind{}, errors.New("no such resource")
	}
	for _, tc := range []struct {
		name string
		gvr  schema.GroupVersionResource
		want bool
	}{
		{"a built-in kind", deployments, true},
		{"a built-in kind that embeds objects with a kind of their own", statefulSets, false},
		{"a custom resource", widgets, false},
		{"an unknown resource", schema.GroupVersionResource{Resource: "nothing"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gvk, got := typedParentKind(kindFor, tc.gvr)
			if got != tc.want || got && gvk != kinds[tc.gvr] {
				t.Errorf("%s: %v %v, want %v", tc.gvr, gvk, got, tc.want)
			}
		})
	}
}

// Whether kube-apiserver serves parents in protobuf is read again once a
// minute: an upgrade past the proxy's API types ends every watch, and the
// next ones are opened in JSON. A version that cannot be read is read
// again when next asked.
func TestProtobufServedFollowsAnUpgrade(t *testing.T) {
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	minor, reads := "35", 0
	var readErr error
	served := protobufServed(func() (*version.Info, error) {
		reads++
		return &version.Info{Major: "1", Minor: minor}, readErr
	}, "v0.35.4", func() time.Time { return now })
	for _, step := range []struct {
		after     time.Duration
		minor     string
		err       error
		want      bool
		wantReads int
	}{
		{0, "35", nil, true, 1},
		// Watches reopened together after a restart share a read.
		{2 * time.Second, "36", nil, true, 1},
		{3 * time.Second, "36", nil, false, 2},
		{time.Minute, "35", nil, true, 3},
		{10 * time.Second, "35", errors.New("refused"), false, 4},
		{time.Second, "35", nil, true, 5},
		{time.Second, "35", nil, true, 5},
		{10 * time.Second, "34", nil, false, 6},
	} {
		now = now.Add(step.after)
		minor, readErr = step.minor, step.err
		if got := served(); got != step.want || reads != step.wantReads {
			t.Errorf("after %s at 1.%s (%v): served %v after %d reads, want %v after %d", step.after, step.minor, step.err, got, reads, step.want, step.wantReads)
		}
	}
}

// A cache of a built-in kind's parents opens its watches in JSON while
// kube-apiserver is newer than the proxy's API types, and in protobuf
// again once it is not.
func TestTypedParentWatchIsJSONFromANewerServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := newParentServer(t, storedDeploymentJSON(1, 1001))
	s := srv.store(ctx)
	var mu sync.Mutex
	served := false
	s.typedParents = func(gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
		return appsv1.SchemeGroupVersion.WithKind("Deployment"), gvr == deployments
	}
	s.protobufServed = func() bool {
		mu.Lock()
		defer mu.Unlock()
		return served
	}
	waitCtx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	if err := s.WaitForSync(waitCtx, deployments); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the watch to open", func() bool { return srv.watchesOpened() > 0 })
	if accepts := srv.acceptedByWatches(); accepts[len(accepts)-1] != runtime.ContentTypeJSON {
		t.Fatalf("the watch asked for %v from a newer kube-apiserver", accepts)
	}
	srv.send(parentEventFrame(watch.Modified, storedDeploymentJSON(1, 2001)), false)
	waitUntil(t, "the JSON change to reach the cache", func() bool {
		p, ok := cachedParent(t, s, "p-00001")
		return ok && p.resourceVersion == "2001" && p.json != nil
	})

	mu.Lock()
	served = true
	mu.Unlock()
	opened := srv.watchesOpened()
	srv.send(parentEventFrame(watch.Error, []byte(`{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}`)), false)
	waitUntil(t, "the watch to open again", func() bool { return srv.watchesOpened() > opened })
	if accepts := srv.acceptedByWatches(); accepts[len(accepts)-1] != runtime.ContentTypeProtobuf {
		t.Fatalf("the watch asked for %v", accepts)
	}
	srv.send(typedEventFrame(t, watch.Modified, typedDeployment(t, storedDeploymentJSON(1, 3001))), false)
	waitUntil(t, "the protobuf change to reach the cache", func() bool {
		p, ok := cachedParent(t, s, "p-00001")
		return ok && p.resourceVersion == "3001" && p.protobuf != nil
	})
}

// The version of the API types the proxy says it is built with is the
// one go.mod requires.
func TestAPITypesVersionIsGoMods(t *testing.T) {
	goMod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	required := regexp.MustCompile(`(?m)^\s*k8s\.io/api (v\S+)`).FindSubmatch(goMod)
	if required == nil {
		t.Fatal("go.mod requires no k8s.io/api")
	}
	if string(required[1]) != apiTypesVersion {
		t.Errorf("go.mod requires k8s.io/api %s; apiTypesVersion says %s", required[1], apiTypesVersion)
	}
}

// richParents are built-in parents with the fields that tell encodings
// apart: empty and absent slices, quantities, int-or-strings, times,
// booleans that are false, a condition's observedGeneration, and
// managedFields of a spec writer, a status writer that owns
// status.observedGeneration, and one that owns only a condition's.
func richParents(t testing.TB) []runtime.Object {
	t.Helper()
	created := metav1.NewTime(time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC))
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "42", Generation: 3,
			CreationTimestamp: created, Labels: map[string]string{"app": name}, Annotations: map[string]string{"kausality.io/phase": "initialized"},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "apps/v1", Time: &created,
					FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:replicas":{}}}`)}},
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", Time: &created,
					FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{".":{}},"f:observedGeneration":{},"f:replicas":{}}}`)}},
				{Manager: "an-operator", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", Time: &created,
					FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:observedGeneration":{}}}}}`)}},
			}}
	}
	replicas := int32(3)
	no := false
	surge := intstr.FromString("25%")
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", Args: []string{},
				Env:   []corev1.EnvVar{{Name: "MODE", Value: "bench"}, {Name: "EMPTY"}},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				SecurityContext: &corev1.SecurityContext{Privileged: &no}}},
			AutomountServiceAccountToken: &no,
			Tolerations:                  []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}},
		},
	}
	conditions := []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, LastUpdateTime: created,
		LastTransitionTime: created, Reason: "MinimumReplicasAvailable"}}
	return []runtime.Object{
		&appsv1.Deployment{ObjectMeta: meta("web"), Spec: appsv1.DeploymentSpec{Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: template,
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge}}},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, Conditions: conditions}},
		&appsv1.DaemonSet{ObjectMeta: meta("agent"), Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: template}},
		&batchv1.Job{ObjectMeta: meta("once"), Spec: batchv1.JobSpec{Template: template, BackoffLimit: new(int32)},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{}}},
		&batchv1.CronJob{ObjectMeta: meta("nightly"), Spec: batchv1.CronJobSpec{Schedule: "0 1 * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: template}}}},
	}
}

// A built-in parent read from its protobuf is the tree kube-apiserver's
// JSON of it decodes to, lean as the JSON one is: kube-apiserver encodes
// as JSON the object it decoded from protobuf (etcd's), which is what the
// watch sends.
func TestTypedParentIsTheTreeOfItsJSON(t *testing.T) {
	for _, obj := range richParents(t) {
		gvks, _, err := typedParentScheme.ObjectKinds(obj)
		if err != nil {
			t.Fatal(err)
		}
		gvk := gvks[0]
		obj.GetObjectKind().SetGroupVersionKind(gvk)
		t.Run(gvk.Kind, func(t *testing.T) {
			stored, err := obj.(protobufObject).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			// As kube-apiserver holds it, decoded from etcd's protobuf.
			held, _ := typedParentScheme.New(gvk)
			if err := held.(protobufObject).Unmarshal(stored); err != nil {
				t.Fatal(err)
			}
			held.GetObjectKind().SetGroupVersionKind(gvk)
			asJSON, err := json.Marshal(held)
			if err != nil {
				t.Fatal(err)
			}
			fromJSON := decodedCompact(t, asJSON)
			want, err := fromJSON.object()
			if err != nil {
				t.Fatal(err)
			}

			p, _, err := compactProtobufParent(stored, gvk, false)
			if err != nil {
				t.Fatal(err)
			}
			if p.json != nil || p.protobuf == nil || p.bookmarkAnnotations != nil {
				t.Fatalf("kept json %d bytes, protobuf %d bytes, annotations %v", len(p.json), len(p.protobuf), p.bookmarkAnnotations)
			}
			if p.apiVersion != fromJSON.apiVersion || p.kind != fromJSON.kind || p.namespace != fromJSON.namespace ||
				p.name != fromJSON.name || p.uid != fromJSON.uid || p.resourceVersion != fromJSON.resourceVersion {
				t.Errorf("identity %+v, want %+v", p, fromJSON)
			}
			got, err := p.object()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Object, want.Object) {
				t.Errorf("the tree from protobuf differs from the tree from JSON (-json +protobuf):\n%s", cmp.Diff(want.Object, got.Object))
			}
			if mf := got.GetManagedFields(); len(mf) != 1 || mf[0].Manager != "kube-controller-manager" {
				t.Errorf("managedFields kept: %v", mf)
			}
		})
	}
}

func TestTypedParentEvents(t *testing.T) {
	d := typedDeployment(t, storedDeploymentJSON(1, 1001))
	bookmark := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1002",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	bookmark.SetGroupVersionKind(d.GroupVersionKind())
	gone := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}
	gone.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Status"})
	replicaSet := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs"}}
	replicaSet.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	frame := func(typ watch.EventType, obj runtime.Object) []byte { return typedEventFrame(t, typ, obj) }
	for _, tc := range []struct {
		name    string
		stream  []byte
		check   func(t *testing.T, typ watch.EventType, obj runtime.Object)
		wantErr string
	}{
		{name: "a change", stream: frame(watch.Modified, d), check: func(t *testing.T, typ watch.EventType, obj runtime.Object) {
			p, ok := obj.(*compactParent)
			if typ != watch.Modified || !ok || p.name != "p-00001" || p.resourceVersion != "1001" || p.bookmarkAnnotations != nil {
				t.Errorf("%s %#v", typ, obj)
			}
		}},
		{name: "a bookmark keeps its annotations", stream: frame(watch.Bookmark, bookmark), check: func(t *testing.T, typ watch.EventType, obj runtime.Object) {
			p, ok := obj.(*compactParent)
			if typ != watch.Bookmark || !ok || p.resourceVersion != "1002" || p.bookmarkAnnotations[metav1.InitialEventsAnnotationKey] != "true" {
				t.Errorf("%s %#v", typ, obj)
			}
		}},
		{name: "an error's Status", stream: frame(watch.Error, gone), check: func(t *testing.T, typ watch.EventType, obj runtime.Object) {
			s, ok := obj.(*metav1.Status)
			if typ != watch.Error || !ok || s.Code != 410 || s.Reason != metav1.StatusReasonExpired {
				t.Errorf("%s %#v", typ, obj)
			}
		}},
		{name: "another kind", stream: frame(watch.Added, replicaSet), wantErr: "a watch of Deployment sent a apps/v1, Kind=ReplicaSet"},
		{name: "an unknown event type", stream: frame("SYNCED", d), wantErr: `a watch event of a parent of unknown type "SYNCED"`},
		{name: "not protobuf", stream: append(binary.BigEndian.AppendUint32(nil, 3), 0xff, 0xff, 0xff), wantErr: "decoding a watch event of a parent"},
		{name: "the end of the watch", stream: nil, wantErr: "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := newTypedParentEvents(readCloser{bytes.NewReader(tc.stream)}, d.GroupVersionKind())
			typ, obj, err := events.Decode()
			if tc.wantErr != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.wantErr)) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, typ, obj)
		})
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// Over the caches' own connections, a parent of a built-in kind is watched
// in protobuf and cached as its lean protobuf; it is read, and reaches the
// observers, as the tree its JSON gives; a deletion reaches them too; a
// watch that ends with 410 Gone is listed again.
func TestTypedParentWatchCachesTheTreeOfItsJSON(t *testing.T) {
	for name, noWatchList := range map[string]bool{"watch list": false, "list": true} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv := newParentServer(t, storedDeploymentJSON(1, 1001), storedDeploymentJSON(2, 1002))
			srv.mu.Lock()
			srv.noWatchList = noWatchList
			srv.mu.Unlock()
			s := srv.store(ctx)
			s.typedParents = func(gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
				return appsv1.SchemeGroupVersion.WithKind("Deployment"), gvr == deployments
			}
			s.protobufServed = func() bool { return true }
			seen := newParentObserver()
			s.AddObserver(seen)
			waitCtx, done := context.WithTimeout(ctx, time.Minute)
			defer done()
			if err := s.WaitForSync(waitCtx, deployments); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the watch to open", func() bool { return srv.watchesOpened() > 0 })

			changed := bytes.Replace(storedDeploymentJSON(1, 2001), []byte(`"annotations":{`), []byte(`"labels":{"churn":"1"},"annotations":{`), 1)
			typed := typedDeployment(t, changed)
			srv.send(typedEventFrame(t, watch.Modified, typed), false)
			waitUntil(t, "the change to reach the cache", func() bool {
				p, ok := cachedParent(t, s, "p-00001")
				return ok && p.resourceVersion == "2001"
			})
			p, _ := cachedParent(t, s, "p-00001")
			if p.protobuf == nil || p.json != nil {
				t.Fatalf("the watched parent is kept as %d bytes of JSON and %d of protobuf", len(p.json), len(p.protobuf))
			}
			asJSON, err := json.Marshal(typed)
			if err != nil {
				t.Fatal(err)
			}
			var want unstructured.Unstructured
			if err := utiljson.Unmarshal(decodedCompact(t, asJSON).json, &want.Object); err != nil {
				t.Fatal(err)
			}
			u, ok := s.GetCachedWhole(deployments, "bench-scale", "p-00001")
			if !ok {
				t.Fatal("not cached")
			}
			if !reflect.DeepEqual(u.Object, want.Object) {
				t.Errorf("read (-json +protobuf):\n%s", cmp.Diff(want.Object, u.Object))
			}
			waitUntil(t, "the observer to hear of the change", func() bool {
				seen.mu.Lock()
				defer seen.mu.Unlock()
				o := seen.observed["p-00001"]
				return o != nil && o.GetLabels()["churn"] == "1"
			})
			seen.mu.Lock()
			observed := seen.observed["p-00001"]
			seen.mu.Unlock()
			if !reflect.DeepEqual(observed.Object, want.Object) {
				t.Errorf("observed (-json +protobuf):\n%s", cmp.Diff(want.Object, observed.Object))
			}

			gone := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}
			gone.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Status"})
			deletedAndGone(t, srv, s, seen, typedEventFrame(t, watch.Deleted, typedDeployment(t, storedDeploymentJSON(2, 2002))),
				typedEventFrame(t, watch.Error, gone))
		})
	}
}

// A parent without its pod templates is as settled as it is whole: what
// tells it (kstatus, the observed generations) reads no template. The
// parent itself keeps its templates.
func TestWithoutPodTemplatesIsAsSettled(t *testing.T) {
	statuses := map[string]func(obj runtime.Object){
		"as written": func(runtime.Object) {},
		"observedGeneration behind": func(obj runtime.Object) {
			switch o := obj.(type) {
			case *appsv1.Deployment:
				o.Status.ObservedGeneration = 1
			case *appsv1.DaemonSet:
				o.Status.ObservedGeneration = 1
			}
		},
		"all ready": func(obj runtime.Object) {
			switch o := obj.(type) {
			case *appsv1.Deployment:
				o.Status = appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3,
					Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}}
			case *appsv1.DaemonSet:
				o.Status = appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 2, CurrentNumberScheduled: 2,
					UpdatedNumberScheduled: 2, NumberAvailable: 2, NumberReady: 2}
			case *batchv1.Job:
				o.Status = batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
			}
		},
	}
	for _, parent := range richParents(t) {
		gvks, _, err := typedParentScheme.ObjectKinds(parent)
		if err != nil {
			t.Fatal(err)
		}
		for name, setStatus := range statuses {
			t.Run(gvks[0].Kind+"/"+name, func(t *testing.T) {
				obj := parent.DeepCopyObject()
				obj.GetObjectKind().SetGroupVersionKind(gvks[0])
				setStatus(obj)
				whole, err := typedTree(obj)
				if err != nil {
					t.Fatal(err)
				}
				status, err := typedTree(withoutPodTemplates(obj))
				if err != nil {
					t.Fatal(err)
				}
				wantCurrent, wantWhy := settle.Current(whole)
				current, why := settle.Current(status)
				if current != wantCurrent || why != wantWhy {
					t.Errorf("without pod templates %v (%s); whole %v (%s)", current, why, wantCurrent, wantWhy)
				}
				after, err := typedTree(obj)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(after.Object, whole.Object) {
					t.Error("leaving out the templates changed the parent")
				}
				for _, path := range [][]string{{"spec", "template", "spec", "containers"}, {"spec", "jobTemplate", "spec", "template", "spec", "containers"}} {
					if v, found, _ := unstructured.NestedFieldNoCopy(status.Object, path...); found && v != nil {
						t.Errorf("%v is still there", path)
					}
				}
			})
		}
	}
}

// statusObserver is a StatusObserver that asks for the whole parent.
type statusObserver struct {
	mu            sync.Mutex
	identity      metav1.Object
	key           string
	status, whole *unstructured.Unstructured
	statuses      int
}

func (o *statusObserver) ObserveStatus(identity metav1.Object, _ schema.GroupKind, key string, status, whole func() *unstructured.Unstructured) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.identity, o.key = identity, key
	o.status, o.whole = status(), whole()
	o.statuses++
}
func (o *statusObserver) Observe(*unstructured.Unstructured) {
	panic("a StatusObserver is not given a whole parent")
}
func (o *statusObserver) Forget(types.UID) {}

// A StatusObserver gets a parent watched in protobuf without its pod
// templates, and whole when it asks: the tree its JSON gives. A parent
// watched in JSON it gets whole both times.
func TestStatusObserverGetsTheParentWithoutItsTemplates(t *testing.T) {
	d := typedDeployment(t, storedDeploymentJSON(1, 7))
	stored, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	lean, watched, err := compactProtobufParent(stored, d.GroupVersionKind(), false)
	if err != nil {
		t.Fatal(err)
	}
	want, err := lean.object()
	if err != nil {
		t.Fatal(err)
	}
	for name, decoded := range map[string]*watchDecoded{"protobuf": watched, "JSON": {tree: want.DeepCopy()}, "list": nil} {
		t.Run(name, func(t *testing.T) {
			o := &statusObserver{}
			parentChanged([]Observer{o}, lean, decoded)
			if o.statuses != 1 {
				t.Fatalf("told %d times", o.statuses)
			}
			if !reflect.DeepEqual(o.whole.Object, want.Object) {
				t.Errorf("whole (-want +got):\n%s", cmp.Diff(want.Object, o.whole.Object))
			}
			containers, _, _ := unstructured.NestedFieldNoCopy(o.status.Object, "spec", "template", "spec", "containers")
			if hasTemplate := containers != nil; hasTemplate == (name == "protobuf") {
				t.Errorf("the status has its pod template: %v", hasTemplate)
			}
			if o.status.GetResourceVersion() != "7" || o.status.GetGeneration() != want.GetGeneration() {
				t.Errorf("status of version %s, generation %d", o.status.GetResourceVersion(), o.status.GetGeneration())
			}
			if o.identity.GetResourceVersion() != "7" || o.identity.GetGeneration() != want.GetGeneration() || o.identity.GetUID() != want.GetUID() {
				t.Errorf("identity %+v", o.identity)
			}
			if hasKey := o.key != ""; hasKey != (name == "protobuf") {
				t.Errorf("status key %q", o.key)
			}
		})
	}
}

// The status key of a parent changes with what settledness reads of it
// (generation, deletion, annotations, status; and the spec, which its
// generation stands for), and with nothing else.
func TestStatusKey(t *testing.T) {
	base := typedDeployment(t, storedDeploymentJSON(1, 7))
	now := metav1.NewTime(time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC))
	keyOf := func(d *appsv1.Deployment) string {
		t.Helper()
		data, err := d.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		lean, err := leanParentProtobuf(data, false)
		if err != nil {
			t.Fatal(err)
		}
		return lean.statusKey
	}
	for _, tc := range []struct {
		name   string
		change func(d *appsv1.Deployment)
		same   bool
	}{
		{"a label", func(d *appsv1.Deployment) { d.Labels = map[string]string{"churn": "1"} }, true},
		{"the resourceVersion", func(d *appsv1.Deployment) { d.ResourceVersion = "8" }, true},
		{"managedFields", func(d *appsv1.Deployment) { d.ManagedFields = nil }, true},
		{"a managedFields timestamp", func(d *appsv1.Deployment) { d.ManagedFields[1].Time = &now }, true},
		{"the generation", func(d *appsv1.Deployment) { d.Generation++ }, false},
		{"the spec", func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = 9 }, false},
		{"the deletion", func(d *appsv1.Deployment) { d.DeletionTimestamp = &now }, false},
		{"an annotation", func(d *appsv1.Deployment) { d.Annotations["kausality.io/observed-generation"] = "1" }, false},
		{"an annotation's value", func(d *appsv1.Deployment) { d.Annotations["kausality.io/phase"] = "x" }, false},
		{"the status", func(d *appsv1.Deployment) { d.Status.ReadyReplicas = 1 }, false},
		{"a condition", func(d *appsv1.Deployment) { d.Status.Conditions[0].Status = corev1.ConditionFalse }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := base.DeepCopy()
			tc.change(d)
			if same := keyOf(base) == keyOf(d); same != tc.same {
				t.Errorf("same key %v, want %v", same, tc.same)
			}
		})
	}
}

// A field set owns status.observedGeneration only at the top of its
// status; asked twice, the remembered answer is the same.
func TestOwnsObservedGeneration(t *testing.T) {
	large := `{"f:status":{"f:observedGeneration":{},"f:x":"` + string(bytes.Repeat([]byte("a"), maxRememberedFieldSet)) + `"}}`
	for raw, want := range map[string]bool{
		`{"f:status":{"f:observedGeneration":{}}}`:                                             true,
		`{"f:spec":{"f:replicas":{}},"f:status":{".":{},"f:observedGeneration":{}}}`:           true,
		`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:observedGeneration":{}}}}}`: false,
		`{"f:spec":{"f:observedGeneration":{}}}`:                                               false,
		`{"f:status":{"f:replicas":{}}}`:                                                       false,
		`{"f:status":"f:observedGeneration"}`:                                                  false,
		`not json "f:observedGeneration"`:                                                      false,
		large:                                                                                  true,
	} {
		for range 2 {
			if got := ownsObservedGeneration([]byte(raw)); got != want {
				t.Errorf("%.80s: %v, want %v", raw, got, want)
			}
		}
	}
	if ownsObservedGeneration(nil) {
		t.Error("no field set owns it")
	}
}

// A parent's protobuf that is not an object's is an error, not a parent.
func TestLeanParentProtobufRefusesWhatIsNoObject(t *testing.T) {
	d := typedDeployment(t, storedDeploymentJSON(1, 7))
	stored, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"cut short":                   stored[:len(stored)/2],
		"metadata that is a number":   protowire.AppendVarint(protowire.AppendTag(nil, objectMetadata, protowire.VarintType), 7),
		"a name that is a number":     protowire.AppendBytes(protowire.AppendTag(nil, objectMetadata, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, objectMetaName, protowire.VarintType), 1)),
		"a generation that is a text": protowire.AppendBytes(protowire.AppendTag(nil, objectMetadata, protowire.BytesType), protowire.AppendString(protowire.AppendTag(nil, objectMetaGeneration, protowire.BytesType), "1")),
	} {
		if _, err := leanParentProtobuf(data, true); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A kind whose objects hold objects with an apiVersion and kind of their
// own is not watched in protobuf: protobuf leaves those out.
func TestEmbedsTypeMeta(t *testing.T) {
	for _, tc := range []struct {
		obj  runtime.Object
		want bool
	}{
		{&appsv1.Deployment{}, false},
		{&appsv1.ReplicaSet{}, false},
		{&appsv1.DaemonSet{}, false},
		{&batchv1.Job{}, false},
		{&batchv1.CronJob{}, false},
		{&corev1.ReplicationController{}, false},
		{&appsv1.StatefulSet{}, true},
		{&metav1.Status{}, false},
	} {
		if got := embedsTypeMeta(reflect.TypeOf(tc.obj).Elem(), map[reflect.Type]bool{}); got != tc.want {
			t.Errorf("%T: %v, want %v", tc.obj, got, tc.want)
		}
	}
}
