package intercept_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/intercept"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
)

const (
	rsPath     = "/apis/apps/v1/namespaces/apps/replicasets"
	kcmUser    = "system:serviceaccount:kube-system:deployment-controller"
	kcmAgent   = "kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/abcdef"
	kubectlUA  = "kubectl/v1.35.4 (linux/amd64)"
	freezeTrue = "true"
)

// withFrozenFamily adds a settled Deployment "frozen" with
// kausality.io/freeze and n ReplicaSets "frozen-1".."frozen-n".
func withFrozenFamily(n int) serveOption {
	return func(s *serveSetup) {
		p := benchParent("frozen", "frozen-uid", 5, 5)
		ann := p.GetAnnotations()
		ann[annotations.Freeze] = freezeTrue
		p.SetAnnotations(ann)
		s.objects = append(s.objects, p)
		for k := 1; k <= n; k++ {
			s.objects = append(s.objects, benchChild(fmt.Sprintf("frozen-%d", k), "frozen", "frozen-uid", 1))
		}
	}
}

// terminatingNamespace marks the namespace "apps" as being deleted.
func terminatingNamespace(s *serveSetup) {
	ns := s.objects[0].(*unstructured.Unstructured)
	now := metav1.Now()
	ns.SetDeletionTimestamp(&now)
	ns.SetFinalizers([]string{"kubernetes"})
}

// forwardedRequest is what reached kube-apiserver.
type forwardedRequest struct {
	query url.Values
	body  string
}

// recording answers like answering(code) and records every request.
func recording(code int, into *[]forwardedRequest, mu *sync.Mutex) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		mu.Lock()
		*into = append(*into, forwardedRequest{query: r.URL.Query(), body: string(data)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":` + fmt.Sprint(code) + `}`))
	}
}

// A deletecollection is decided object by object, each as the DELETE of
// it; one object that may not be deleted refuses the whole request.
func TestDeleteCollection(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	unavailable := apierrors.NewServiceUnavailable("etcd is down")
	person := func(path string) (benchWrite, string) {
		return benchWrite{method: http.MethodDelete, path: path, user: "alice"}, kubectlUA
	}
	controller := func(path string) (benchWrite, string) {
		return benchWrite{method: http.MethodDelete, path: path, user: kcmUser}, kcmAgent
	}
	type who func(string) (benchWrite, string)
	cases := []struct {
		name        string
		opts        []serveOption
		by          who
		path        string
		body        string
		wantCode    int
		wantForward int
		// wantHeld are the objects the refusal names in details.causes
		// (in any order; kube-apiserver lists by name, the fake does not),
		// or, with wantHeldCount, some of them.
		wantHeld      []string
		wantHeldCount int
		wantMessage   []string
		wantWarning   string
		// wantNoList: the proxy listed nothing.
		wantNoList bool
	}{
		{
			name: "a person deletes the children of a settled parent: new origins, forwarded",
			opts: []serveOption{enforce}, by: person, path: rsPath + "?labelSelector=app%3Dstable",
			wantCode: http.StatusOK, wantForward: 1,
		},
		{
			name: "the controller deletes the children of its settled parent: drift, nothing is deleted",
			opts: []serveOption{enforce}, by: controller, path: rsPath + "?labelSelector=app%3Dstable",
			wantCode: http.StatusForbidden, wantHeld: []string{"stable-1"},
			wantMessage: []string{"deletecollection of replicasets.apps in namespace apps denied, nothing was deleted", "1 of the 1 objects",
				"apps/v1 ReplicaSet apps/stable-1 (DriftUnapproved)", "kausality.io/approvals"},
		},
		{
			name: "the children of a frozen parent, deleted by a person",
			opts: []serveOption{enforce, withFrozenFamily(2)}, by: person, path: rsPath + "?labelSelector=app%3Dfrozen",
			wantCode: http.StatusForbidden, wantHeld: []string{"frozen-1", "frozen-2"},
			wantMessage: []string{"2 of the 2 objects", "apps/frozen-1 (Frozen)", "apps/frozen-2 (Frozen)", "kausality.io/freeze"},
		},
		{
			name: "a freeze holds in log mode too",
			opts: []serveOption{withFrozenFamily(1)}, by: person, path: rsPath + "?labelSelector=app%3Dfrozen",
			wantCode: http.StatusForbidden, wantHeld: []string{"frozen-1"},
		},
		{
			name: "the controller while its parent carries out a spec change: expected, forwarded",
			opts: []serveOption{enforce}, by: controller, path: rsPath + "?labelSelector=app%3Dweb",
			wantCode: http.StatusOK, wantForward: 1,
		},
		{
			name: "the whole namespace: one held object refuses every delete",
			opts: []serveOption{enforce, withFrozenFamily(1)}, by: person, path: rsPath,
			wantCode: http.StatusForbidden, wantHeld: []string{"frozen-1"}, wantMessage: []string{"1 of the 3 objects"},
		},
		{
			name: "a refusal names ten objects and counts the others",
			opts: []serveOption{enforce, withFrozenFamily(13)}, by: person, path: rsPath + "?labelSelector=app%3Dfrozen",
			wantCode:      http.StatusForbidden,
			wantHeldCount: 10, wantMessage: []string{"13 of the 13 objects", ", and 3 more."},
		},
		{
			name: "nothing matches: forwarded",
			opts: []serveOption{enforce, withFrozenFamily(1)}, by: person, path: rsPath + "?labelSelector=app%3Dnone",
			wantCode: http.StatusOK, wantForward: 1,
		},
		{
			name: "a field selector the proxy passes on selects what is decided",
			opts: []serveOption{enforce, withFrozenFamily(1), selectingByName}, by: person, path: rsPath + "?fieldSelector=metadata.name%3Dstable-1",
			wantCode: http.StatusOK, wantForward: 1,
		},
		{
			name: "a namespace being deleted is emptied undecided",
			opts: []serveOption{enforce, withFrozenFamily(2), terminatingNamespace}, by: person, path: rsPath + "?labelSelector=app%3Dfrozen",
			wantCode: http.StatusOK, wantForward: 1, wantNoList: true,
		},
		{
			name: "--failure-policy=Fail: what would be deleted cannot be listed",
			opts: []serveOption{enforce, withFrozenFamily(1), failing("list", "replicasets", 0, unavailable)}, by: person, path: rsPath,
			wantCode: http.StatusServiceUnavailable,
		},
		{
			name: "--failure-policy=Ignore: forwarded undecided, with a warning",
			opts: []serveOption{enforce, ignoreFailures, withFrozenFamily(1), failing("list", "replicasets", 0, unavailable)}, by: person, path: rsPath,
			wantCode: http.StatusOK, wantForward: 1, wantWarning: "no drift decision was made (--failure-policy=Ignore)",
		},
		{
			name: "a dry run in the body is decided and consumes nothing",
			opts: []serveOption{enforce, withApprovedFamily}, by: controller, path: rsPath + "?labelSelector=app%3Dapproved",
			body:     `{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]}`,
			wantCode: http.StatusOK, wantForward: 1, wantWarning: "kausality dry-run: Allow (DriftApproved)",
		},
		{
			name: "a dryRun other than All is refused by kube-apiserver, so it is a dry run too and consumes nothing",
			opts: []serveOption{enforce, withApprovedFamily}, by: controller, path: rsPath + "?labelSelector=app%3Dapproved",
			body:     `{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["all"]}`,
			wantCode: http.StatusOK, wantForward: 1, wantWarning: "kausality dry-run: Allow (DriftApproved)",
		},
		{
			name: "a dryRun in the query next to a body is no dry run: the once approval is taken",
			opts: []serveOption{enforce, withApprovedFamily}, by: controller, path: rsPath + "?labelSelector=app%3Dapproved&dryRun=All",
			body:     `{"kind":"DeleteOptions","apiVersion":"v1"}`,
			wantCode: http.StatusOK, wantForward: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowAll, tc.opts...)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			env.dyn.ClearActions()
			w, ua := tc.by(tc.path)
			w.body = []byte(tc.body)
			if tc.body != "" {
				w.contentType = "application/json"
			}
			r := env.request(t, w)
			r.Header.Set("User-Agent", ua)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, r)
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d (error: %v)", rec.Code, tc.wantCode, env.lastError)
			}
			if got := int(env.forwarded.Load()); got != tc.wantForward {
				t.Errorf("forwarded %d requests, want %d", got, tc.wantForward)
			}
			if tc.wantWarning != "" && !strings.Contains(strings.Join(rec.Header().Values("Warning"), "\n"), tc.wantWarning) {
				t.Errorf("warnings %q lack %q", rec.Header().Values("Warning"), tc.wantWarning)
			}
			for _, a := range env.dyn.Actions() {
				if tc.wantNoList && a.GetVerb() == "list" {
					t.Errorf("the proxy listed %s", a.GetResource())
				}
			}
			if tc.wantCode != http.StatusForbidden {
				return
			}
			var status apierrors.APIStatus
			if !errors.As(env.lastError, &status) {
				t.Fatalf("the refusal %v is no Status", env.lastError)
			}
			s := status.Status()
			if s.Reason != metav1.StatusReasonForbidden || s.Details == nil || s.Details.Kind != "replicasets" || s.Details.Group != "apps" {
				t.Errorf("Status %+v, want Forbidden with details of apps replicasets", s)
			}
			for _, want := range tc.wantMessage {
				if !strings.Contains(s.Message, want) {
					t.Errorf("the message does not say %q: %s", want, s.Message)
				}
			}
			var held []string
			for _, c := range s.Details.Causes {
				if c.Type == "KausalityChild" {
					held = append(held, strings.TrimPrefix(c.Message, "DELETE apps/v1 ReplicaSet apps/"))
				}
			}
			slices.Sort(held)
			switch {
			case tc.wantHeldCount > 0:
				if len(held) != tc.wantHeldCount {
					t.Errorf("causes name %d objects (%v), want %d", len(held), held, tc.wantHeldCount)
				}
			case !slices.Equal(held, tc.wantHeld):
				t.Errorf("causes name %v, want %v", held, tc.wantHeld)
			}
		})
	}
}

// selectingByName makes the proxy's list honour a metadata.name field
// selector, which the fake client ignores.
func selectingByName(s *serveSetup) {
	s.reactors = append(s.reactors, reactor{verb: "list", resource: "replicasets", fn: func(a clienttesting.Action) (bool, runtime.Object, error) {
		fs := a.(clienttesting.ListAction).GetListRestrictions().Fields
		name, ok := fs.RequiresExactMatch("metadata.name")
		if !ok {
			return false, nil, nil
		}
		list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSetList"}}
		for _, o := range s.objects {
			if u := o.(*unstructured.Unstructured); u.GetKind() == "ReplicaSet" && u.GetName() == name {
				list.Items = append(list.Items, *u.DeepCopy())
			}
		}
		return true, list, nil
	}})
}

// A once approval a collection's object consumes is taken as for one
// write: after a dry run of the whole request as the caller, with dryRun
// where kube-apiserver reads it, and put back only after a conflict.
func TestDeleteCollectionOnceApproval(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	for _, tc := range []struct {
		name         string
		body         string
		code         int
		wantApproval bool
		// wantDryRunIn: where the first forwarded request carried dryRun.
		wantDryRunIn string
		// deletes: kube-apiserver deletes the object before it answers
		// code, as it does when a later object of the collection fails.
		deletes bool
	}{
		{name: "options in the body", body: `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`, code: http.StatusOK, wantDryRunIn: "body"},
		{name: "no body", code: http.StatusOK, wantDryRunIn: "query"},
		{name: "kube-apiserver answers a conflict: the approval is put back", code: http.StatusConflict, wantApproval: true, wantDryRunIn: "query"},
		{name: "kube-apiserver deleted the object, then answered a refusal: the approval stays spent", code: http.StatusUnprocessableEntity,
			wantDryRunIn: "query", deletes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowAll, enforce, withApprovedFamily)
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				first := len(sent) == 0
				mu.Unlock()
				code := tc.code
				if first {
					code = http.StatusOK
				}
				if !first && tc.deletes {
					if err := env.dyn.Resource(replicasetsGVR).Namespace("apps").Delete(context.Background(), "approved-1", metav1.DeleteOptions{}); err != nil {
						t.Error(err)
					}
				}
				recording(code, &sent, &mu)(w, r)
			}
			w := benchWrite{method: http.MethodDelete, path: rsPath + "?labelSelector=app%3Dapproved", user: kcmUser, body: []byte(tc.body)}
			if tc.body != "" {
				w.contentType = "application/json"
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, w))
			if rec.Code != tc.code {
				t.Fatalf("code %d, want %d (error %v)", rec.Code, tc.code, env.lastError)
			}
			if len(sent) != 2 {
				t.Fatalf("forwarded %d requests, want the dry run and the request", len(sent))
			}
			dry, real := sent[0], sent[1]
			inQuery := strings.Join(dry.query["dryRun"], ",") == "All"
			var opts metav1.DeleteOptions
			_ = json.Unmarshal([]byte(dry.body), &opts)
			inBody := strings.Join(opts.DryRun, ",") == "All"
			switch {
			case tc.wantDryRunIn == "body" && (!inBody || opts.PropagationPolicy == nil || *opts.PropagationPolicy != metav1.DeletePropagationBackground):
				t.Errorf("the dry run's body %s lacks dryRun or the caller's options", dry.body)
			case tc.wantDryRunIn == "query" && !inQuery:
				t.Errorf("the dry run's query %v lacks dryRun", dry.query)
			}
			if real.body != tc.body || len(real.query["dryRun"]) > 0 {
				t.Errorf("the request was not forwarded as it came: %v %s", real.query, real.body)
			}
			parent, err := env.dyn.Resource(deploymentsGVR).Namespace("apps").Get(context.Background(), "approved", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if has := parent.GetAnnotations()[annotations.Approvals] == onceApproval; has != tc.wantApproval {
				t.Errorf("approval on the parent afterwards: %v, want %v", has, tc.wantApproval)
			}
		})
	}
}

// The forwarded request deletes what was decided: it is pinned to the
// resourceVersion of the proxy's list, unless the caller named one.
func TestDeleteCollectionIsPinnedToTheDecidedList(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	listAt := func(s *serveSetup) {
		s.reactors = append(s.reactors, reactor{verb: "list", resource: "replicasets", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
			list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSetList",
				"metadata": map[string]any{"resourceVersion": "4711"}}}
			list.Items = append(list.Items, *benchChild("stable-1", "stable", "stable-uid", 1))
			return true, list, nil
		}})
	}
	for _, tc := range []struct {
		name, query  string
		body         string
		wantRV       string
		wantRVMatch  string
		wantSelector string
		// wantBody: the options forwarded in a body ("" for none).
		wantBody *metav1.DeleteOptions
	}{
		{name: "pinned", query: "?labelSelector=app%3Dstable", wantRV: "4711", wantRVMatch: "Exact", wantSelector: "app=stable",
			wantBody: &metav1.DeleteOptions{}},
		{name: "pinned, the caller's query options go in a body where the pin is no precondition",
			query: "?labelSelector=app%3Dstable&propagationPolicy=Foreground&gracePeriodSeconds=5", wantRV: "4711", wantRVMatch: "Exact", wantSelector: "app=stable",
			wantBody: &metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground), GracePeriodSeconds: ptr.To[int64](5)}},
		{name: "without a body the caller's resourceVersion stands: kube-apiserver makes it every delete's precondition",
			query: "?labelSelector=app%3Dstable&resourceVersion=0", wantRV: "0", wantSelector: "app=stable"},
		{name: "with a body the caller's resourceVersion is pinned to the list made with it",
			query: "?labelSelector=app%3Dstable&resourceVersion=0", body: `{"propagationPolicy":"Background"}`, wantRV: "4711", wantRVMatch: "Exact", wantSelector: "app=stable",
			wantBody: &metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}},
		{name: "with a body a resourceVersion not older than is pinned to the list made with it",
			query: "?labelSelector=app%3Dstable&resourceVersion=4000&resourceVersionMatch=NotOlderThan", body: `{}`, wantRV: "4711", wantRVMatch: "Exact", wantSelector: "app=stable",
			wantBody: &metav1.DeleteOptions{}},
		{name: "an exact resourceVersion stands: the list was made at it",
			query: "?labelSelector=app%3Dstable&resourceVersion=4711&resourceVersionMatch=Exact", body: `{}`, wantRV: "4711", wantRVMatch: "Exact", wantSelector: "app=stable",
			wantBody: &metav1.DeleteOptions{}},
		{name: "a continued list stands: it is its token's snapshot",
			query: "?labelSelector=app%3Dstable&continue=abc", body: `{}`, wantSelector: "app=stable", wantBody: &metav1.DeleteOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowAll, enforce, listAt)
			env.upstream = recording(http.StatusOK, &sent, &mu)
			w := benchWrite{method: http.MethodDelete, path: rsPath + tc.query, user: "alice"}
			if tc.body != "" {
				w.body, w.contentType = []byte(tc.body), "application/json"
			}
			r := env.request(t, w)
			r.Header.Set("User-Agent", kubectlUA)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK || len(sent) != 1 {
				t.Fatalf("code %d, %d forwarded (error %v)", rec.Code, len(sent), env.lastError)
			}
			q := sent[0].query
			if got := strings.Join(q["resourceVersion"], ","); got != tc.wantRV {
				t.Errorf("resourceVersion %q, want %q", got, tc.wantRV)
			}
			if got := strings.Join(q["resourceVersionMatch"], ","); got != tc.wantRVMatch {
				t.Errorf("resourceVersionMatch %q, want %q", got, tc.wantRVMatch)
			}
			if got := strings.Join(q["labelSelector"], ","); got != tc.wantSelector {
				t.Errorf("labelSelector %q, want %q", got, tc.wantSelector)
			}
			if tc.wantBody == nil {
				if sent[0].body != "" {
					t.Errorf("forwarded with body %s, want none", sent[0].body)
				}
				return
			}
			var got metav1.DeleteOptions
			if err := json.Unmarshal([]byte(sent[0].body), &got); err != nil {
				t.Fatalf("forwarded body %q: %v", sent[0].body, err)
			}
			want := tc.wantBody.DeepCopy()
			if tc.body == "" {
				// Made by the proxy from the caller's query; a caller's
				// body goes as it came.
				want.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "DeleteOptions"}
			}
			if !equality.Semantic.DeepEqual(&got, want) {
				t.Errorf("forwarded options %s, want %+v", sent[0].body, want)
			}
		})
	}
}

// Authorization comes first, as for every write: a caller who may not
// deletecollection gets kube-apiserver's 403, and nothing is listed.
func TestDeleteCollectionAuthorizesFirst(t *testing.T) {
	var verbs []string
	var mu sync.Mutex
	env := newServeEnv(t, nil, func(spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		verbs = append(verbs, spec.ResourceAttributes.Verb)
		return false, nil
	}, enforce, withFrozenFamily(1))
	env.dyn.ClearActions()
	r := env.request(t, benchWrite{method: http.MethodDelete, path: rsPath, user: "mallory"})
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, r)
	if rec.Code != http.StatusForbidden || env.forwarded.Load() != 0 {
		t.Fatalf("code %d, forwarded %d", rec.Code, env.forwarded.Load())
	}
	if !strings.Contains(env.lastError.Error(), `cannot deletecollection resource "replicasets"`) {
		t.Errorf("not kube-apiserver's wording: %v", env.lastError)
	}
	if strings.Join(verbs, ",") != "deletecollection" {
		t.Errorf("reviewed verbs %v, want deletecollection", verbs)
	}
	if n := len(env.dyn.Actions()); n != 0 {
		t.Errorf("the proxy made %d calls for a caller who may not write: %v", n, env.dyn.Actions())
	}
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// withPods serves pods: "held-pod" of a frozen ReplicaSet, "free-pod" of
// an unfrozen one.
func withPods(s *serveSetup) {
	s.resources = append(s.resources, servedResource{gvr: podsGVR, listKind: "PodList",
		resource: metav1.APIResource{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get", "list", "watch", "create", "delete"}}})
	held := benchChild("held", "stable", "stable-uid", 1)
	ann := held.GetAnnotations()
	ann[annotations.Freeze] = freezeTrue
	held.SetAnnotations(ann)
	free := benchChild("free", "stable", "stable-uid", 1)
	pod := func(name, rs string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "apps", "uid": name + "-uid", "resourceVersion": "300",
				"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": rs + "-uid", "controller": true}}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "registry.k8s.io/pause:3.10"}}},
		}}
	}
	s.objects = append(s.objects, held, free, pod("held-pod", "held"), pod("free-pod", "free"))
}

// An eviction is decided as the DELETE of the pod: a frozen ReplicaSet's
// pod cannot be evicted; a person draining a node is a new origin.
func TestEviction(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	eviction := func(pod string) []byte {
		return []byte(`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"` + pod + `","namespace":"apps"}}`)
	}
	for _, tc := range []struct {
		name, pod, query string
		wantCode         int
		wantForward      int64
	}{
		{name: "a pod of a frozen ReplicaSet", pod: "held-pod", wantCode: http.StatusForbidden},
		{name: "the same as a dry run", pod: "held-pod", query: "?dryRun=All", wantCode: http.StatusForbidden},
		{name: "a person drains: a new origin", pod: "free-pod", wantCode: http.StatusOK, wantForward: 1},
		{name: "a pod that does not exist: kube-apiserver answers", pod: "gone-pod", wantCode: http.StatusOK, wantForward: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, enforce, withPods)
			r := env.request(t, benchWrite{method: http.MethodPost, path: "/api/v1/namespaces/apps/pods/" + tc.pod + "/eviction" + tc.query,
				contentType: "application/json", body: eviction(tc.pod), user: "bob"})
			r.Header.Set("User-Agent", kubectlUA)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, r)
			if rec.Code != tc.wantCode || env.forwarded.Load() != tc.wantForward {
				t.Fatalf("code %d forwarded %d, want %d and %d (error %v)", rec.Code, env.forwarded.Load(), tc.wantCode, tc.wantForward, env.lastError)
			}
			if tc.wantCode == http.StatusForbidden {
				var status apierrors.APIStatus
				if !errors.As(env.lastError, &status) || !strings.Contains(status.Status().Message, "DELETE of v1 Pod apps/"+tc.pod+" denied") ||
					!strings.Contains(status.Status().Message, annotations.Freeze) {
					t.Errorf("the refusal does not name the pod's delete and the freeze: %v", env.lastError)
				}
			}
		})
	}
}

// A shadow controller's deletecollection is decided object by object and
// logged, and goes upstream exactly as it came.
func TestDeleteCollectionShadow(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: ops\n  match:\n    user: alice\n  mode: shadow\n"))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	var (
		mu   sync.Mutex
		sent []forwardedRequest
	)
	env := newServeEnv(t, zap.New(core), func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil },
		enforce, withFrozenFamily(2), func(s *serveSetup) { s.config.Settings = func() *config.Config { return cfg } })
	env.upstream = recording(http.StatusOK, &sent, &mu)
	r := env.request(t, benchWrite{method: http.MethodDelete, path: rsPath + "?labelSelector=app%3Dfrozen", user: "alice"})
	r.Header.Set("User-Agent", kubectlUA)
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK || len(sent) != 1 {
		t.Fatalf("code %d, %d forwarded (error %v)", rec.Code, len(sent), env.lastError)
	}
	if got := strings.Join(sent[0].query["resourceVersion"], ""); got != "" {
		t.Errorf("the shadow request was changed: resourceVersion %q", got)
	}
	wouldDeny := 0
	for _, e := range logs.FilterMessage(intercept.DecisionMessage).All() {
		fields := e.ContextMap()
		if fields["verb"] == "deletecollection" && fields["wouldDeny"] == true && fields["category"] == "Frozen" && fields["outcome"] == "shadow:200" {
			wouldDeny++
		}
	}
	if wouldDeny != 2 {
		t.Errorf("%d wouldDeny Frozen lines, want one per ReplicaSet: %v", wouldDeny, logs.All())
	}
}

// With a metadata client, the objects of a deletecollection are listed as
// metadata, a page at a time, and decided as they come: the refusal counts
// and names them all the same, and nothing is listed whole.
func TestDeleteCollectionListsMetadataPageByPage(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	const frozen = 25
	var (
		pages    []string
		pagesMu  sync.Mutex
		children []metav1.PartialObjectMetadata
	)
	withMetadata := func(s *serveSetup) {
		for _, o := range s.objects {
			u := o.(*unstructured.Unstructured)
			if u.GetKind() != "ReplicaSet" || u.GetLabels()["app"] != "frozen" {
				continue
			}
			var m metav1.PartialObjectMetadata
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m); err != nil {
				t.Fatal(err)
			}
			m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}}
			children = append(children, m)
		}
		client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
		// Two pages: the first ten, then the rest.
		client.PrependReactor("list", "replicasets", func(a clienttesting.Action) (bool, runtime.Object, error) {
			pagesMu.Lock()
			first := len(pages) == 0
			pages = append(pages, "listed")
			pagesMu.Unlock()
			list := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: "4711"}}
			page := children[10:]
			if first {
				page, list.Continue = children[:10], "page-2"
			}
			for k := range page {
				list.Items = append(list.Items, runtime.RawExtension{Object: &page[k]})
			}
			return true, list, nil
		})
		s.config.Metadata = client
	}
	env := newServeEnv(t, nil, allowAll, enforce, withFrozenFamily(frozen), withMetadata)
	env.dyn.ClearActions()
	r := env.request(t, benchWrite{method: http.MethodDelete, path: rsPath + "?labelSelector=app%3Dfrozen", user: "alice"})
	r.Header.Set("User-Agent", kubectlUA)
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, r)
	if rec.Code != http.StatusForbidden || env.forwarded.Load() != 0 {
		t.Fatalf("code %d, forwarded %d (error %v)", rec.Code, env.forwarded.Load(), env.lastError)
	}
	var status apierrors.APIStatus
	if !errors.As(env.lastError, &status) {
		t.Fatalf("not a Status: %v", env.lastError)
	}
	msg := status.Status().Message
	if !strings.Contains(msg, fmt.Sprintf("%d of the %d objects", frozen, frozen)) || !strings.Contains(msg, fmt.Sprintf("and %d more", frozen-10)) {
		t.Errorf("the refusal does not count every object of both pages: %s", msg)
	}
	if len(pages) != 2 {
		t.Errorf("listed %d pages, want 2", len(pages))
	}
	for _, a := range env.dyn.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "replicasets" {
			t.Errorf("the ReplicaSets were listed whole: %v", a)
		}
	}
}
