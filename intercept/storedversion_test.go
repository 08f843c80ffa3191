package intercept_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// withUpdatersOnStable gives the stable family's ReplicaSet an updaters
// record, a system annotation only the proxy writes.
func withUpdatersOnStable(s *serveSetup) {
	for _, obj := range s.objects {
		if o, ok := obj.(*unstructured.Unstructured); ok && o.GetName() == "stable-1" {
			ann := o.GetAnnotations()
			ann[annotations.Updaters] = "aaaaa"
			o.SetAnnotations(ann)
		}
	}
}

// conflictingUpstream is kube-apiserver answering the first conflicts
// writes 409 and the rest 200, each forwarded patch appended to sent; dry
// runs are answered with their body.
func conflictingUpstream(t *testing.T, conflicts int, mu *sync.Mutex, sent *[]map[string]any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("dryRun") != "" {
			echoDryRun(w, r)
			return
		}
		data, _ := io.ReadAll(r.Body)
		var patch map[string]any
		if err := json.Unmarshal(data, &patch); err != nil {
			t.Errorf("forwarded body %q: %v", data, err)
		}
		mu.Lock()
		*sent = append(*sent, patch)
		n := len(*sent)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n <= conflicts {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(preconditionConflict))
			return
		}
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":200}`))
	}
}

// expectForwardedOn checks that the patches sent were forwarded with the
// resourceVersions want, and that any updaters record they write is
// putBack (unless "").
func expectForwardedOn(t *testing.T, sent []map[string]any, want []string, putBack string) {
	t.Helper()
	if len(sent) != len(want) {
		t.Fatalf("%d writes forwarded, want %d: %v", len(sent), len(want), sent)
	}
	for k, patch := range sent {
		meta, _ := patch["metadata"].(map[string]any)
		if version, _ := meta["resourceVersion"].(string); version != want[k] {
			t.Errorf("write %d forwarded with resourceVersion %q, want %q: %v", k, version, want[k], patch)
		}
		if ann, _ := meta["annotations"].(map[string]any); ann != nil && putBack != "" {
			if v, set := ann[annotations.Updaters]; set && v != putBack {
				t.Errorf("write %d writes the updaters record as %v, want the stored %s put back", k, v, putBack)
			}
		}
	}
}

// A write that changes a system annotation gets the stored value put back.
// That value is only as new as the proxy's copy, which may lag behind what
// the proxy itself wrote meanwhile (a reservation on a parent, a
// controller record): the write is made to land on the copy's version, so
// a stale copy costs a conflict the proxy answers itself, by deciding
// again on a live read, and never an older value written over a newer one.
func TestSystemAnnotationsPutBackLandOnTheStoredVersion(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	cases := []struct {
		name, body string
		status     bool
		// conflicts: how many forwards kube-apiserver answers 409 first.
		conflicts    int
		wantVersions []string
		// wantLiveReads: reads of the ReplicaSet beyond the cache.
		wantLiveReads int
	}{
		{name: "a patch that rewrites the updaters record is pinned to the stored version",
			body: `{"metadata":{"annotations":{"kausality.io/updaters":"zzzzz"}}}`, wantVersions: []string{"200"}},
		{name: "a copy that lagged behind: kube-apiserver's conflict is the proxy's own, and the write is decided again",
			body: `{"metadata":{"annotations":{"kausality.io/updaters":"zzzzz"}}}`, conflicts: 1, wantVersions: []string{"200", "200"}, wantLiveReads: 1},
		{name: "a patch of other annotations is not pinned",
			body: `{"metadata":{"annotations":{"team":"a"}}}`, wantVersions: []string{""}},
		{name: "the caller's own version stands",
			body: `{"metadata":{"resourceVersion":"200","annotations":{"kausality.io/updaters":"zzzzz"}}}`, wantVersions: []string{"200"}},
		{name: "a status patch that rewrites the updaters record is pinned too", status: true,
			body: `{"metadata":{"annotations":{"kausality.io/updaters":"zzzzz"}},"status":{"replicas":1}}`, wantVersions: []string{"200"}},
		{name: "a status patch of the status alone is not", status: true,
			body: `{"status":{"replicas":1}}`, wantVersions: []string{""}},
		{name: "a version the cache has not seen: the values put back are read live",
			body: `{"metadata":{"resourceVersion":"201","annotations":{"kausality.io/updaters":"zzzzz"}}}`, wantVersions: []string{"201"}, wantLiveReads: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []map[string]any
			)
			env := newServeEnv(t, nil, allowAll, withUpdatersOnStable)
			env.dyn.ClearActions()
			env.upstream = conflictingUpstream(t, tc.conflicts, &mu, &sent)
			path := rsPath + "/stable-1"
			if tc.status {
				path += "/status"
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: path,
				contentType: "application/merge-patch+json", body: []byte(tc.body), user: "alice"}))
			if rec.Code != http.StatusOK {
				t.Fatalf("code %d, want 200: %s (error %v)", rec.Code, rec.Body, env.lastError)
			}
			// A status write may read the object live for its own facts.
			if reads := env.liveReads("replicasets"); reads != tc.wantLiveReads && !tc.status {
				t.Errorf("%d live reads of the ReplicaSet, want %d", reads, tc.wantLiveReads)
			}
			expectForwardedOn(t, sent, tc.wantVersions, "aaaaa")
		})
	}
}

// Whatever a patch says of the resourceVersion, the cached values it gets
// put back land only on the version they were read from: a patch that
// names another version is decided on that version read live, and one
// that clears it (which kube-apiserver would take as an unconditional
// update) gets the cached version as its precondition.
func TestAPatchCannotCarryCachedSystemAnnotationsOntoAnotherVersion(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	cases := []struct {
		name, contentType, body string
	}{
		{"a merge patch that names a newer resourceVersion than the cache's", "application/merge-patch+json",
			`{"metadata":{"resourceVersion":"300","annotations":{"kausality.io/updaters":"zzzzz"}}}`},
		{"a merge patch that clears the resourceVersion", "application/merge-patch+json",
			`{"metadata":{"resourceVersion":null,"annotations":{"kausality.io/updaters":"zzzzz"}}}`},
		{"a strategic merge patch with an empty resourceVersion", "application/strategic-merge-patch+json",
			`{"metadata":{"resourceVersion":"","annotations":{"kausality.io/updaters":"zzzzz"}}}`},
		{"a JSON patch that removes the resourceVersion", "application/json-patch+json",
			`[{"op":"remove","path":"/metadata/resourceVersion"},{"op":"replace","path":"/metadata/annotations/kausality.io~1updaters","value":"zzzzz"}]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent [][]byte
			)
			env := newServeEnv(t, nil, allowAll, withUpdatersOnStable)
			env.dyn.ClearActions()
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				data, _ := io.ReadAll(r.Body)
				mu.Lock()
				sent = append(sent, data)
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":200}`))
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/stable-1",
				contentType: tc.contentType, body: []byte(tc.body), user: "alice"}))
			if rec.Code != http.StatusOK || len(sent) != 1 {
				t.Fatalf("code %d, %d writes forwarded; want 200 and 1 (error %v)", rec.Code, len(sent), env.lastError)
			}
			putsBack, lands := putBackAndVersion(t, tc.contentType, sent[0])
			if putsBack && lands != "200" && env.liveReads("replicasets") == 0 {
				t.Errorf("the cached updaters record (of resourceVersion 200) is put back by a write that lands on %q, without a live read: %s", lands, sent[0])
			}
		})
	}
}

// putBackAndVersion reads a forwarded patch: whether it writes the cached
// updaters record "aaaaa", and the resourceVersion the patched object
// carries as far as the patch decides it ("<stored>" when it leaves it, ""
// when it clears it).
func putBackAndVersion(t *testing.T, contentType string, data []byte) (putsBack bool, version string) {
	t.Helper()
	if contentType == "application/json-patch+json" {
		var ops []map[string]any
		if err := json.Unmarshal(data, &ops); err != nil {
			t.Fatalf("forwarded patch %q: %v", data, err)
		}
		version = "<stored>"
		for _, op := range ops {
			path, _ := op["path"].(string)
			switch {
			case path == "/metadata/resourceVersion" && op["op"] == "remove":
				version = ""
			case path == "/metadata/resourceVersion" && (op["op"] == "test" || op["op"] == "add" || op["op"] == "replace"):
				version, _ = op["value"].(string)
			case path == "/metadata/annotations/kausality.io~1updaters" && op["value"] == "aaaaa":
				putsBack = true
			}
		}
		return putsBack, version
	}
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatalf("forwarded patch %q: %v", data, err)
	}
	meta, _ := p["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	putsBack = ann[annotations.Updaters] == "aaaaa"
	rv, named := meta["resourceVersion"]
	switch {
	case !named:
		version = "<stored>"
	case rv == nil:
		version = ""
	default:
		version, _ = rv.(string)
	}
	return putsBack, version
}

// kube-apiserver applies the forwarded patch to what is stored: a JSON
// patch that names a version and then moves or copies it away would leave
// the patched object without one, an unconditional update that carries
// the cached put-back values onto a newer version. The upstream here
// applies the patch to the stored object at 201 (updaters bbbbb) as
// kube-apiserver would, 409 for a patched object of another version.
func TestAJSONPatchThatMovesItsResourceVersionAwayIsPinned(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	storedJSON := stableChildJSON(t, 1, "201", "bbbbb")
	for _, tc := range []struct{ name, body string }{
		{"replace, then move away", `[{"op":"replace","path":"/metadata/resourceVersion","value":"200"},{"op":"move","from":"/metadata/resourceVersion","path":"/metadata/annotations/rv"},{"op":"replace","path":"/metadata/annotations/kausality.io~1updaters","value":"zzzzz"}]`},
		{"add, then copy an empty value over it", `[{"op":"add","path":"/metadata/resourceVersion","value":"200"},{"op":"add","path":"/metadata/annotations/empty","value":""},{"op":"copy","from":"/metadata/annotations/empty","path":"/metadata/resourceVersion"},{"op":"replace","path":"/metadata/annotations/kausality.io~1updaters","value":"zzzzz"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu     sync.Mutex
				landed []map[string]any
			)
			env := newServeEnv(t, nil, allowAll, withUpdatersOnStable)
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				data, _ := io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				p, err := jsonpatch.DecodePatch(data)
				if err != nil {
					t.Errorf("forwarded patch %s: %v", data, err)
					return
				}
				out, err := p.Apply(storedJSON)
				if err != nil {
					w.WriteHeader(http.StatusUnprocessableEntity)
					_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422}`))
					return
				}
				var obj map[string]any
				_ = json.Unmarshal(out, &obj)
				meta, _ := obj["metadata"].(map[string]any)
				if rv, _ := meta["resourceVersion"].(string); rv != "" && rv != "201" {
					w.WriteHeader(http.StatusConflict)
					_, _ = w.Write([]byte(preconditionConflict))
					return
				}
				mu.Lock()
				landed = append(landed, meta)
				mu.Unlock()
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":200}`))
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/stable-1",
				contentType: "application/json-patch+json", body: []byte(tc.body), user: "alice"}))
			mu.Lock()
			defer mu.Unlock()
			for _, meta := range landed {
				if a, _ := meta["annotations"].(map[string]any); a[annotations.Updaters] == "aaaaa" {
					t.Errorf("the cached updaters record aaaaa (of version 200) landed on version 201 over bbbbb (code %d)", rec.Code)
				}
			}
		})
	}
}

// A change of the desired state records its writer in the updaters record:
// the stored record with the writer's hash added. Written on another
// version, it would drop a hash added there meanwhile (another writer's,
// through another replica), so a write that adds one lands on the version
// the record was read from. A writer the record names changes nothing in
// it, and its write is not pinned.
func TestAWriteThatAddsAnUpdaterLandsOnTheStoredVersion(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	const rsController = "system:serviceaccount:kube-system:replicaset-controller"
	cases := []struct {
		name, child, user string
		conflicts         int
		wantVersions      []string
	}{
		{name: "a new writer's change of the spec", child: "stable-1", user: "alice", wantVersions: []string{"200"}},
		{name: "a copy that lagged behind: decided again on a live read, the client hears nothing of it", child: "stable-1", user: "alice",
			conflicts: 1, wantVersions: []string{"200", "200"}},
		{name: "a writer the record names", child: "web-1", user: rsController, wantVersions: []string{""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []map[string]any
			)
			env := newServeEnv(t, nil, allowAll)
			env.upstream = conflictingUpstream(t, tc.conflicts, &mu, &sent)
			rec := httptest.NewRecorder()
			manager := benchKCM
			if tc.user == "alice" {
				manager = "kubectl-edit"
			}
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/" + tc.child + "?fieldManager=" + manager,
				contentType: "application/merge-patch+json", body: []byte(`{"spec":{"replicas":7}}`), user: tc.user}))
			if rec.Code != http.StatusOK {
				t.Fatalf("code %d, want 200: %s (error %v)", rec.Code, rec.Body, env.lastError)
			}
			expectForwardedOn(t, sent, tc.wantVersions, "")
		})
	}
}

// kube-apiserver reads a resourceVersion of 0 as none and applies such a
// write to whatever is stored. The system annotations put back into it are
// only as new as the proxy's copy, so the write is pinned to that copy's
// version as one naming none would be; the caller never hears of the
// precondition it did not ask for.
func TestAWriteNamingVersionZeroIsPinnedWhenValuesArePutBack(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	putBody := stableChildJSON(t, 3, "0", "zzzzz")
	cases := []struct {
		name, method, contentType, body string
		conflicts                       int
		wantVersions                    []string
		// putBack: the updaters record the write must carry; a PUT
		// that changes the spec adds its writer to the stored one.
		putBack string
	}{
		{name: "a merge patch", method: http.MethodPatch, contentType: "application/merge-patch+json",
			body: `{"metadata":{"resourceVersion":"0","annotations":{"kausality.io/updaters":"zzzzz"}}}`, wantVersions: []string{"200"}, putBack: "aaaaa"},
		{name: "a JSON patch", method: http.MethodPatch, contentType: "application/json-patch+json",
			body:         `[{"op":"replace","path":"/metadata/resourceVersion","value":"00"},{"op":"add","path":"/metadata/annotations/kausality.io~1updaters","value":"zzzzz"}]`,
			wantVersions: []string{"200"}, putBack: "aaaaa"},
		{name: "a PUT", method: http.MethodPut, contentType: "application/json", body: string(putBody), wantVersions: []string{"200"}},
		{name: "a PUT whose pin met a newer version: decided again, the client hears nothing of it", method: http.MethodPut,
			contentType: "application/json", body: string(putBody), conflicts: 1, wantVersions: []string{"200", "200"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []map[string]any
			)
			env := newServeEnv(t, nil, allowAll, withUpdatersOnStable)
			env.upstream = jsonPatchAppliedUpstream(t, tc.conflicts, &mu, &sent)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: tc.method, path: rsPath + "/stable-1",
				contentType: tc.contentType, body: []byte(tc.body), user: "alice"}))
			if rec.Code != http.StatusOK {
				t.Fatalf("code %d, want 200: %s (error %v)", rec.Code, rec.Body, env.lastError)
			}
			expectForwardedOn(t, sent, tc.wantVersions, tc.putBack)
		})
	}
}

// jsonPatchAppliedUpstream is conflictingUpstream, with a JSON patch
// recorded as the metadata it leaves on an empty object.
func jsonPatchAppliedUpstream(t *testing.T, conflicts int, mu *sync.Mutex, sent *[]map[string]any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") == "application/json-patch+json" && r.URL.Query().Get("dryRun") == "" {
			data, _ := io.ReadAll(r.Body)
			p, err := jsonpatch.DecodePatch(data)
			if err != nil {
				t.Errorf("forwarded JSON patch %q: %v", data, err)
			}
			applied, err := p.Apply([]byte(`{"metadata":{"resourceVersion":"","annotations":{}}}`))
			if err != nil {
				t.Errorf("applying the forwarded JSON patch %q: %v", data, err)
			}
			r.Body = io.NopCloser(bytes.NewReader(applied))
		}
		conflictingUpstream(t, conflicts, mu, sent)(w, r)
	}
}

// stableChildJSON is the stable family's ReplicaSet in JSON, with replicas,
// resourceVersion rv and the updaters record updaters.
func stableChildJSON(t *testing.T, replicas int64, rv, updaters string) []byte {
	t.Helper()
	child := benchChild("stable-1", "stable", "stable-uid", replicas)
	child.SetResourceVersion(rv)
	ann := child.GetAnnotations()
	ann[annotations.Updaters] = updaters
	child.SetAnnotations(ann)
	data, err := json.Marshal(child.Object)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
