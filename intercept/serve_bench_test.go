package intercept_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/authn"
	"github.com/kausality-io/kausality-proxy/intercept"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// The whole write-interception handler with a warm object store: what an
// intercepted write costs in the proxy when its parent, the stored child
// and the namespace are all in the informer caches. The store's clients are
// client-go fakes; every request they receive is recorded, so
// "upstream/op" is how many round trips to kube-apiserver the proxy's own
// clients would have made per write (the forwarded write itself excluded).

const benchKCM = "kube-controller-manager"

var (
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	replicasetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	namespacesGVR  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

func benchParent(name, uid string, generation, observed int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]interface{}{
			"name": name, "namespace": "apps", "uid": uid, "resourceVersion": "100", "generation": generation,
			"annotations": map[string]interface{}{
				"kausality.io/phase": "initialized",
				"kausality.io/trace": `[{"apiVersion":"apps/v1","kind":"Deployment","name":"` + name + `","generation":` + fmt.Sprint(generation) + `,"user":"alice","timestamp":"2026-01-01T00:00:00Z"}]`,
			},
			"managedFields": []interface{}{
				map[string]interface{}{"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
					"fieldsV1": map[string]interface{}{"f:spec": map[string]interface{}{"f:replicas": map[string]interface{}{}, "f:template": map[string]interface{}{}}}},
				map[string]interface{}{"manager": benchKCM, "operation": "Update", "subresource": "status", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
					"fieldsV1": map[string]interface{}{"f:status": map[string]interface{}{"f:observedGeneration": map[string]interface{}{}, "f:conditions": map[string]interface{}{}}}},
			},
		},
		"spec": map[string]interface{}{"replicas": int64(3)},
		// A rolled-out Deployment: kstatus says Current when it has caught
		// up, so its controller's writes are drift.
		"status": map[string]interface{}{"observedGeneration": observed,
			"replicas": int64(3), "updatedReplicas": int64(3), "readyReplicas": int64(3), "availableReplicas": int64(3),
			"conditions": []interface{}{
				map[string]interface{}{"type": "Available", "status": "True"},
				map[string]interface{}{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
			}},
	}}
}

// preconditionConflict is kube-apiserver's answer to a write whose
// resourceVersion precondition failed, word for word.
const preconditionConflict = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on replicasets.apps \"stable-1\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"stable-1","group":"apps","kind":"replicasets"},"code":409}`

// replicaSetControllerHash is the replicaset controller's hash in an
// updaters record.
var replicaSetControllerHash = controllerid.UserOf(controllerid.UserIdentifier("system:serviceaccount:kube-system:replicaset-controller", "")).Short

func benchChild(name, parent, parentUID string, replicas int64) *unstructured.Unstructured {
	labels := map[string]interface{}{"app": parent, "pod-template-hash": "7d4b9"}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]interface{}{
			"name": name, "namespace": "apps", "uid": name + "-uid", "resourceVersion": "200", "generation": int64(2),
			"labels": labels,
			// The replicaset controller created it: its updaters record
			// names it, and its writes add no one.
			"annotations": map[string]interface{}{"deployment.kubernetes.io/revision": "1", annotations.Updaters: replicaSetControllerHash},
			"ownerReferences": []interface{}{map[string]interface{}{
				"apiVersion": "apps/v1", "kind": "Deployment", "name": parent, "uid": parentUID, "controller": true, "blockOwnerDeletion": true,
			}},
		},
		"spec": map[string]interface{}{
			"replicas": replicas,
			"selector": map[string]interface{}{"matchLabels": labels},
			"template": map[string]interface{}{
				"metadata": map[string]interface{}{"labels": labels},
				"spec": map[string]interface{}{"containers": []interface{}{map[string]interface{}{
					"name": "app", "image": "registry.k8s.io/pause:3.10",
					"ports": []interface{}{map[string]interface{}{"containerPort": int64(8080), "protocol": "TCP"}},
				}}},
			},
		},
	}}
}

type benchEnv struct {
	handler   http.Handler
	dyn       *dynamicfake.FakeDynamicClient
	forwarded atomic.Int64
	reviews   atomic.Int64
	mu        sync.Mutex
	lastError error
	users     atomic.Int64
	errors    atomic.Int64
	infoF     *request.RequestInfoFactory
	// upstream answers forwarded requests; nil answers 200 with {}.
	upstream http.HandlerFunc
	// interceptor is the Interceptor behind handler.
	interceptor *intercept.Interceptor
}

// serveSetup is what options of newServeEnv may change before the
// interceptor is built.
type serveSetup struct {
	objects []runtime.Object
	config  intercept.Config
	// reactors are prepended to the fake dynamic client (the proxy's own
	// reads and writes), after the initial cache sync.
	reactors []reactor
	// resources are served besides Deployments, ReplicaSets and
	// Namespaces, with the list kind of each.
	resources []servedResource
	// replicaSetsAsChildren caches ReplicaSets as metadata only, as for a
	// kind that is no parent: writes of them are decided on their
	// metadata first.
	replicaSetsAsChildren bool
	// cachedAsChildren are resources besides ReplicaSets whose caches of
	// children are synced before the first write, as after their first
	// write in a running proxy.
	cachedAsChildren []schema.GroupVersionResource
}

func replicaSetsAsChildren(s *serveSetup) { s.replicaSetsAsChildren = true }

type servedResource struct {
	gvr      schema.GroupVersionResource
	resource metav1.APIResource
	listKind string
}

type serveOption func(*serveSetup)

func newBenchEnv(b testing.TB, log *zap.Logger, opts ...serveOption) *benchEnv {
	return newServeEnv(b, log, func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }, opts...)
}

// newServeEnv is the interception handler over a warm store, with the real
// cached SubjectAccessReview authorizer over a fake review client whose
// answers allow gives.
func newServeEnv(b testing.TB, log *zap.Logger, allow func(authorizationv1.SubjectAccessReviewSpec) (bool, error), opts ...serveOption) *benchEnv {
	b.Helper()
	ns := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]interface{}{"name": "apps", "resourceVersion": "1"},
	}}
	objs := []runtime.Object{
		ns,
		benchParent("web", "web-uid", 6, 5), // reconciling: the controller's writes are Expected
		benchParent("stable", "stable-uid", 5, 5), // stable: the controller's writes are drift
		benchChild("web-1", "web", "web-uid", 1),
		benchChild("stable-1", "stable", "stable-uid", 1),
	}
	setup := serveSetup{objects: objs}
	for _, o := range opts {
		o(&setup)
	}
	listKinds := map[schema.GroupVersionResource]string{
		deploymentsGVR: "DeploymentList", replicasetsGVR: "ReplicaSetList", namespacesGVR: "NamespaceList",
	}
	for _, r := range setup.resources {
		listKinds[r.gvr] = r.listKind
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, setup.objects...)
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Namespaced: true, Kind: "Deployment", Verbs: metav1.Verbs{"get", "list", "watch", "update", "patch", "create"}},
			{Name: "replicasets", Namespaced: true, Kind: "ReplicaSet", Verbs: metav1.Verbs{"get", "list", "watch", "update", "patch", "create"}},
		}},
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "namespaces", Namespaced: false, Kind: "Namespace", Verbs: metav1.Verbs{"get", "list", "watch"}},
		}},
	}}}
	for _, r := range setup.resources {
		gv := r.gvr.GroupVersion().String()
		i := slices.IndexFunc(disc.Resources, func(l *metav1.APIResourceList) bool { return l.GroupVersion == gv })
		if i < 0 {
			disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: gv})
			i = len(disc.Resources) - 1
		}
		disc.Resources[i].APIResources = append(disc.Resources[i].APIResources, r.resource)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	var env *benchEnv
	store := objects.New(ctx, disc, dyn, metadataView{dyn})
	for _, gvr := range []schema.GroupVersionResource{deploymentsGVR, replicasetsGVR, namespacesGVR} {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		if gvr != replicasetsGVR || !setup.replicaSetsAsChildren {
			err = store.WaitForSync(wctx, gvr)
		}
		if err == nil && gvr == replicasetsGVR {
			err = store.WaitForMetadataSync(wctx, gvr)
		}
		wcancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, gvr := range setup.cachedAsChildren {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		err := store.WaitForMetadataSync(wctx, gvr)
		wcancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	env = &benchEnv{dyn: dyn, infoF: &request.RequestInfoFactory{
		APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api"),
	}}
	reviews := kubefake.NewClientset()
	reviews.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		env.reviews.Add(1)
		sar := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		allowed, err := allow(sar.Spec)
		if err != nil {
			return true, nil, err
		}
		sar.Status.Allowed = allowed
		return true, sar, nil
	})
	authenticator, err := authn.New(authn.Config{SubjectAccessReviews: reviews.AuthorizationV1().SubjectAccessReviews(), AuthorizedTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range setup.reactors {
		dyn.PrependReactor(r.verb, r.resource, r.fn)
	}
	cfg := setup.config
	cfg.Objects, cfg.Writer, cfg.Log, cfg.Authorizer = store, dyn, log, authenticator.Authorizer()
	i := intercept.New(cfg)
	env.interceptor = i
	forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if env.upstream != nil {
			env.forwarded.Add(1)
			env.upstream(w, r)
			return
		}
		env.forwarded.Add(1)
		echoDryRun(w, r)
	})
	env.handler = i.Wrap(forward, func(w http.ResponseWriter, err error) {
		env.errors.Add(1)
		env.mu.Lock()
		env.lastError = err
		env.mu.Unlock()
		var status apierrors.APIStatus
		code := http.StatusInternalServerError
		if errors.As(err, &status) {
			code = int(status.Status().Code)
		}
		w.WriteHeader(code)
	})
	return env
}

// upstreamCalls counts what the store's clients sent, informers' initial
// list and watch excluded, and the SubjectAccessReviews.
func (e *benchEnv) upstreamCalls() int {
	n := int(e.reviews.Load())
	for _, a := range e.dyn.Actions() {
		switch a.GetVerb() {
		case "list", "watch":
		default:
			n++
		}
	}
	return n
}

type benchWrite struct {
	name, method, path, contentType string
	body                            []byte
	user                            string
	// newUserEach makes every request come from a user the authorizer has
	// not seen: the cost of an authorization cache miss.
	newUserEach bool
}

func (e *benchEnv) request(b testing.TB, w benchWrite) *http.Request {
	r := httptest.NewRequest(w.method, w.path, bytes.NewReader(w.body))
	if w.contentType != "" {
		r.Header.Set("Content-Type", w.contentType)
	}
	r.Header.Set("User-Agent", "kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/abcdef")
	info, err := e.infoF.NewRequestInfo(r)
	if err != nil {
		b.Fatal(err)
	}
	ctx := request.WithRequestInfo(r.Context(), info)
	name := w.user
	if w.newUserEach {
		name = fmt.Sprintf("%s-%d", w.user, e.users.Add(1))
	}
	ctx = request.WithUser(ctx, &user.DefaultInfo{Name: name, Groups: []string{"system:authenticated"}})
	return r.WithContext(ctx)
}

func benchWrites() []benchWrite {
	rs := "/apis/apps/v1/namespaces/apps/replicasets"
	ctrl := "system:serviceaccount:kube-system:replicaset-controller"
	updated := func(name, parent, uid string) []byte {
		c := benchChild(name, parent, uid, 3)
		data, _ := c.MarshalJSON()
		return data
	}
	created := benchChild("web-2", "web", "web-uid", 1)
	unstructured.RemoveNestedField(created.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(created.Object, "metadata", "uid")
	createBody, _ := created.MarshalJSON()
	protobufUpdate, protobufType, err := body.Encode(benchChild("web-1", "web", "web-uid", 3), body.Protobuf)
	if err != nil {
		panic(err)
	}
	q := "?fieldManager=" + benchKCM
	return []benchWrite{
		{"CreateExpected", http.MethodPost, rs + q, "application/json", createBody, ctrl, false},
		{"UpdateExpected", http.MethodPut, rs + "/web-1" + q, "application/json", updated("web-1", "web", "web-uid"), ctrl, false},
		{"UpdateExpectedProtobuf", http.MethodPut, rs + "/web-1" + q, protobufType, protobufUpdate, ctrl, false},
		{"MergePatchExpected", http.MethodPatch, rs + "/web-1" + q, "application/merge-patch+json", []byte(`{"spec":{"replicas":3}}`), ctrl, false},
		{"StrategicPatchExpected", http.MethodPatch, rs + "/web-1" + q, "application/strategic-merge-patch+json", []byte(`{"spec":{"replicas":3}}`), ctrl, false},
		{"JSONPatchExpected", http.MethodPatch, rs + "/web-1" + q, "application/json-patch+json", []byte(`[{"op":"replace","path":"/spec/replicas","value":3}]`), ctrl, false},
		{"ApplyExpected", http.MethodPatch, rs + "/web-1" + q + "&force=true", "application/apply-patch+yaml",
			[]byte(`{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web-1","namespace":"apps"},"spec":{"replicas":3}}`), ctrl, false},
		{name: "UpdateExpectedAuthorizationMiss", method: http.MethodPut, path: rs + "/web-1" + q, contentType: "application/json",
			body: updated("web-1", "web", "web-uid"), user: ctrl, newUserEach: true},
		{"UpdateNewOrigin", http.MethodPut, rs + "/stable-1?fieldManager=kubectl-edit", "application/json", updated("stable-1", "stable", "stable-uid"), "alice", false},
		{"UpdateDriftLogMode", http.MethodPut, rs + "/stable-1" + q, "application/json", updated("stable-1", "stable", "stable-uid"), ctrl, false},
		{"GetPassThrough", http.MethodGet, rs + "/web-1", "", nil, ctrl, false},
	}
}

func benchmarkServe(b *testing.B, log *zap.Logger, only map[string]bool) {
	benchmarkServeOn(b, log, only, false)
}

// benchmarkServeOn is benchmarkServe; with freshGoroutine each write is
// served on a goroutine of its own, as net/http serves each request, so
// that the cost of growing its stack from Go's initial size counts.
func benchmarkServeOn(b *testing.B, log *zap.Logger, only map[string]bool, freshGoroutine bool, opts ...serveOption) {
	env := newBenchEnv(b, log, opts...)
	for _, w := range benchWrites() {
		if only != nil && !only[w.name] {
			continue
		}
		b.Run(w.name, func(b *testing.B) {
			serve := func() { env.handler.ServeHTTP(httptest.NewRecorder(), env.request(b, w)) }
			if freshGoroutine {
				done := make(chan struct{})
				inline := serve
				serve = func() {
					go func() { inline(); done <- struct{}{} }()
					<-done
				}
			}
			// Warm: the first apply parses the built-in schema once.
			for range 3 {
				serve()
			}
			calls, fwd := env.upstreamCalls(), env.forwarded.Load()
			b.ReportAllocs()
			cpu := processCPU()
			b.ResetTimer()
			for b.Loop() {
				serve()
			}
			b.StopTimer()
			n := float64(b.N)
			// Wall time follows the other processes on a shared machine;
			// the process's CPU time (garbage collection included) does
			// not.
			b.ReportMetric(float64(processCPU()-cpu)/n, "cpu-ns/op")
			b.ReportMetric(float64(env.upstreamCalls()-calls)/n, "upstream/op")
			b.ReportMetric(float64(env.forwarded.Load()-fwd)/n, "forwarded/op")
			if env.errors.Load() > 0 {
				b.Fatalf("intercept refused the write: %v", env.lastError)
			}
		})
	}
}

// BenchmarkServe runs each kind of write through the interception handler,
// with the decision log discarded (zap.NewNop).
func BenchmarkServe(b *testing.B) { benchmarkServe(b, nil, nil) }

// BenchmarkServeFreshGoroutine is the Expected writes of a child cached
// as metadata only (the ReplicaSets of the proxy's benchmark), each
// served on a goroutine of its own with the production JSON decision
// line, as the proxy serves them.
func BenchmarkServeFreshGoroutine(b *testing.B) {
	enc := zap.NewProductionEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zapcore.InfoLevel))
	benchmarkServeOn(b, log, map[string]bool{"UpdateExpected": true, "MergePatchExpected": true, "ApplyExpected": true}, true, replicaSetsAsChildren)
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkServeJSONLog is the Expected writes whose annotations are
// written into the client's body (an update, a merge and a strategic
// merge patch) with the production JSON decision line (encoded, written
// to io.Discard).
func BenchmarkServeJSONLog(b *testing.B) {
	enc := zap.NewProductionEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zapcore.InfoLevel))
	benchmarkServe(b, log, map[string]bool{"UpdateExpected": true, "MergePatchExpected": true, "StrategicPatchExpected": true})
}

// reactor answers the proxy's own calls of one verb on one resource.
type reactor struct {
	verb, resource string
	fn             clienttesting.ReactionFunc
}

// echoDryRun answers like kube-apiserver for the update of a whole object:
// a dry run answers the object it would store (here: the object sent), a
// write answers 200.
func echoDryRun(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if r.URL.Query().Get("dryRun") != "" {
		_, _ = w.Write(data)
		return
	}
	_, _ = w.Write([]byte(`{}`))
}

// liveReads counts the proxy's live GETs of resource since the fake
// client's actions were last cleared.
func (e *benchEnv) liveReads(resource string) int {
	n := 0
	for _, a := range e.dyn.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}
