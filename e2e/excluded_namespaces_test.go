//go:build !kind

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// excludingConfig is the proxy's config with the default excluded
// namespaces and more.
func excludingConfig(more ...string) string {
	return framework.BaseConfig + "excludedNamespaces: [" + strings.Join(append([]string{"kube-system", "kube-public", "kube-node-lease"}, more...), ", ") + "]\n"
}

// createGadgetDirectly creates Gadget name in ns at kube-apiserver, past
// the proxy.
func createGadgetDirectly(t *testing.T, f *wgFamily, ns, name string) {
	t.Helper()
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": wgAPIVersion, "kind": "Gadget",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"value": "x"},
	}}
	_, err := f.admin.Resource(framework.GadgetGVR).Namespace(ns).Create(context.Background(), g, metav1.CreateOptions{})
	mustf(t, err, "creating Gadget %s/%s directly", ns, name)
}

// gadgetSource is where the proxy's store answers a lookup of Gadget
// ns/name from.
func gadgetSource(ns, name string) (objects.Source, error) {
	_, src, err := env.Interceptor.Objects().GetMetadata(context.Background(), framework.GadgetGVR, ns, name)
	return src, err
}

// writesSent are the writes sent to path since the first request from:
// reads and dry runs (a drift is confirmed with one) left out.
func writesSent(path string, from int) []framework.Recorded {
	var writes []framework.Recorded
	for _, r := range env.Recorder.Requests(path)[from:] {
		if r.Method != http.MethodGet && !strings.Contains(r.RawQuery, "dryRun=") {
			writes = append(writes, r)
		}
	}
	return writes
}

// waitCachedWithout waits until the proxy's cache of Gadgets answers for
// Gadget included/name but not for excluded/name: it has listed again
// with excluded left out.
func waitCachedWithout(t *testing.T, excluded, included, name string) {
	t.Helper()
	eventually(t, 2*time.Minute, "the cache of Gadgets leaves out "+excluded, func() error {
		in, err := gadgetSource(included, name)
		if err != nil {
			return err
		}
		out, err := gadgetSource(excluded, name)
		if err != nil {
			return err
		}
		if in != objects.FromCache || out != objects.FromLive {
			return fmt.Errorf("%s/%s read from %s, %s/%s from %s", included, name, in, excluded, name, out)
		}
		return nil
	})
}

// The caches of children leave out the excluded namespaces: a write
// there passes through and its child never enters the cache. A reload
// that includes the namespace makes the cache list it, and a controller's
// writes there are decided again, from the cache: its drift on a child
// created while the namespace was excluded is denied before anything
// reaches kube-apiserver, and its Expected write is the one request
// forwarded. Excluded again, its writes pass through untouched.
func TestExcludedNamespacesAreNotCachedAndFollowAReload(t *testing.T) {
	ctx := context.Background()
	store := env.Interceptor.Objects()
	f := newWGFamily(t, "excluded", "enforce")
	other := wgNamespace(t, "excluded-other", "")
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	mustf(t, store.WaitForMetadataSync(syncCtx, framework.GadgetGVR), "the cache of Gadgets syncs")
	createGadgetDirectly(t, f, f.ns, "probe")
	createGadgetDirectly(t, f, other, "probe")
	eventually(t, time.Minute, "the cache holds both probes", func() error {
		for _, ns := range []string{f.ns, other} {
			if src, err := gadgetSource(ns, "probe"); err != nil || src != objects.FromCache {
				return fmt.Errorf("%s/probe read from %s (%v)", ns, src, err)
			}
		}
		return nil
	})

	// (a) Excluded: the cache lists again without the namespace, a write
	// there passes through, and its child is not cached even once a
	// later change of another namespace has reached the cache.
	setConfig(t, excludingConfig(f.ns))
	waitCachedWithout(t, f.ns, other, "probe")
	gadgetPath := "/namespaces/" + f.ns + "/gadgets"
	env.Recorder.Watch(gadgetPath)
	mark := wgMark(t)
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates Gadget g in the excluded namespace")
	if sent := writesSent(gadgetPath, 0); len(sent) != 1 || sent[0].Method != http.MethodPost {
		t.Fatalf("the create in the excluded namespace sent %v upstream, want the one POST", methods(sent))
	}
	createGadgetDirectly(t, f, other, "after")
	eventually(t, time.Minute, "the cache holds a Gadget created after g elsewhere", func() error {
		if src, err := gadgetSource(other, "after"); err != nil || src != objects.FromCache {
			return fmt.Errorf("%s/after read from %s (%v)", other, src, err)
		}
		return nil
	})
	if src, err := gadgetSource(f.ns, "g"); err != nil || src != objects.FromLive {
		t.Fatalf("Gadget g of the excluded namespace read from %s (%v), want live: the cache holds it", src, err)
	}
	if lines := wgDecisionsAfter(t, mark, "gadgets", f.ns, "g"); len(lines) != 0 {
		t.Errorf("the write in the excluded namespace was decided: %v", lines)
	}

	// (b) Included again: the cache lists the namespace, g with it. (The
	// base config is restored once, by the first setConfig's cleanup.)
	mustf(t, cluster.SetConfig(ctx, excludingConfig()), "including %s again", f.ns)
	eventually(t, 2*time.Minute, "the cache lists Gadget g once its namespace is included", func() error {
		if src, err := gadgetSource(f.ns, "g"); err != nil || src != objects.FromCache {
			return fmt.Errorf("read from %s (%v)", src, err)
		}
		return nil
	})
	f.initialize()
	f.settleGadget("g", "Deny/DriftUnapproved")
	before := len(env.Recorder.Requests(gadgetPath))
	mark = wgMark(t)
	_, err = f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"drift"}}`), metav1.PatchOptions{FieldManager: wgManager})
	wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
	wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftUnapproved")
	if sent := writesSent(gadgetPath, before); len(sent) != 0 {
		t.Fatalf("the denied drift sent %v upstream, want nothing", methods(sent))
	}
	if v := f.gadgetValue("g"); v != "a" {
		t.Fatalf("Gadget g holds %q after the denied drift, want a", v)
	}

	f.bumpSpec()
	f.settleGadget("g", "Allow/Expected")
	before = len(env.Recorder.Requests(gadgetPath))
	mark = wgMark(t)
	_, err = f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"value":"b"}}`), metav1.PatchOptions{FieldManager: wgManager})
	mustf(t, err, "the controller carries out the Widget's change")
	line := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, line, "Allow", "Expected")
	if sent := writesSent(gadgetPath, before); len(sent) != 1 || sent[0].Method != http.MethodPatch {
		t.Fatalf("the Expected write sent %v upstream, want the one PATCH", methods(sent))
	}

	// (c) Excluded again: the cache leaves the namespace out once more,
	// and the controller's drift passes through as it was sent.
	mustf(t, cluster.SetConfig(ctx, excludingConfig(f.ns)), "excluding %s again", f.ns)
	waitCachedWithout(t, f.ns, other, "probe")
	f.setStatus(true)
	before = len(env.Recorder.Requests(gadgetPath))
	mark = wgMark(t)
	body := []byte(`{"spec":{"value":"passed"}}`)
	_, err = f.gadgets(f.ctrl).Patch(ctx, "g", types.MergePatchType, body, metav1.PatchOptions{FieldManager: wgManager})
	mustf(t, err, "the controller's write in the namespace excluded again")
	sent := writesSent(gadgetPath, before)
	if len(sent) != 1 || sent[0].Method != http.MethodPatch || !bytes.Equal(sent[0].Body, body) {
		t.Fatalf("the write in the excluded namespace sent %v upstream, want the one PATCH with the caller's bytes", methods(sent))
	}
	if v := f.gadgetValue("g"); v != "passed" {
		t.Fatalf("Gadget g holds %q, want the value written", v)
	}
	if lines := wgDecisionsAfter(t, mark, "gadgets", f.ns, "g"); len(lines) != 0 {
		t.Errorf("the write in the namespace excluded again was decided: %v", lines)
	}
}
