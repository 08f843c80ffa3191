package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

const saLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// saForms are the forms a Secret value can take on the wire: as written
// (stringData, a message) and base64 (data), padded or not.
func saForms(values ...string) []string {
	var out []string
	for _, v := range values {
		out = append(out, v, base64.RawStdEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v)))
	}
	return out
}

// saLeaks returns the forms of values found in data.
func saLeaks(data string, forms []string) []string {
	var found []string
	for _, f := range forms {
		if strings.Contains(data, f) {
			found = append(found, f)
		}
	}
	return found
}

// saSecretWrite is the controller's read-modify-write of its Secret: data,
// stringData and the last applied configuration kubectl apply would keep
// all carry the new values.
func saSecretWrite(f *wgFamily, name, password, token string, dryRun bool) error {
	ctx := context.Background()
	s, err := f.ctrl.kube.CoreV1().Secrets(f.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.Data["password"] = []byte(password)
	s.StringData = map[string]string{"token": token}
	s.Annotations[saLastApplied] = saLastAppliedFor(name, password)
	opts := metav1.UpdateOptions{FieldManager: wgManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = f.ctrl.kube.CoreV1().Secrets(f.ns).Update(ctx, s, opts)
	return err
}

func saLastAppliedFor(name, password string) string {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": name},
		"data": map[string]string{"password": base64.StdEncoding.EncodeToString([]byte(password))}})
	return string(b)
}

// A controller's drift of a Secret it owns is reported, denied in enforce
// mode and warned about in log mode, and none of it — the DriftReport, the
// denial, the warning, the decision lines, the proxy's whole log — carries
// a value of the Secret, as written or base64.
func TestSecretsAndApprovalsSecretReport(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "sa-secret", "enforce")
	stored := "stored-pw-" + utilrand.String(12)
	drifted := "drifted-pw-" + utilrand.String(12)
	token := "drifted-token-" + utilrand.String(12)
	logged := "logmode-pw-" + utilrand.String(12)
	forms := saForms(stored, drifted, token, logged)

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns, OwnerReferences: []metav1.OwnerReference{f.ownerRef()},
			Annotations: map[string]string{saLastApplied: saLastAppliedFor("db", stored)}},
		Data: map[string][]byte{"password": []byte(stored), "user": []byte("app")},
	}
	_, err := f.ctrl.kube.CoreV1().Secrets(f.ns).Create(ctx, secret, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the controller creates its Secret while the Widget initializes")
	f.initialize()
	f.settle("Deny/DriftUnapproved", func() error {
		return saSecretWrite(f, "db", "probe-"+utilrand.String(6), "probe", true)
	})

	// Enforce: denied, and reported.
	mark := wgMark(t)
	err = saSecretWrite(f, "db", drifted, token, false)
	s := wgDenied(t, err, f, "Secret", "db", wgAnnApprovals)
	denial, _ := json.Marshal(s)
	if leaks := saLeaks(string(denial), forms); len(leaks) > 0 {
		t.Errorf("the denial carries Secret values %q: %s", leaks, denial)
	}
	if !strings.Contains(s.Message, "data.password") {
		t.Errorf("the denial does not name the changed key data.password: %s", s.Message)
	}
	d := wgDecision(t, mark, "secrets", f.ns, "db")
	wgExpectDecision(t, d, "Deny", "DriftUnapproved")

	var reports []byte
	eventually(t, 30*time.Second, "a Detected DriftReport about the Secret", func() error {
		list, err := cluster.DriftReports(f.ns, "db")
		if err != nil {
			return err
		}
		for _, r := range list {
			if r.Spec.Phase == "Detected" && r.Spec.Child.Kind == "Secret" {
				reports, _ = json.Marshal(list)
				return nil
			}
		}
		return fmt.Errorf("%d reports, none Detected", len(list))
	})
	if leaks := saLeaks(string(reports), forms); len(leaks) > 0 {
		t.Errorf("the DriftReports carry Secret values %q: %s", leaks, reports)
	}
	// What drifted is still said: the changed keys, with the marker for
	// values (the objects are kept by identity only).
	for _, want := range []string{`"path":"data.password","old":"\u003credacted\u003e","new":"\u003credacted\u003e"`, `"path":"data.token","old":"\u003cunset\u003e","new":"\u003credacted\u003e"`} {
		if !strings.Contains(string(reports), want) {
			t.Errorf("the DriftReports lack %s: %s", want, reports)
		}
	}

	// Log mode (the Secret's own stored mode): allowed, with a warning.
	_, err = f.admin.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(f.ns).Patch(ctx, "db", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"kausality.io/mode":"log"}}}`), metav1.PatchOptions{})
	mustf(t, err, "setting the Secret's mode to log")
	f.settle("Allow/DriftUnapproved", func() error {
		return saSecretWrite(f, "db", "probe-"+utilrand.String(6), "probe", true)
	})
	f.ctrl.warnings.take()
	mark = wgMark(t)
	mustf(t, saSecretWrite(f, "db", logged, token, false), "the drift write in log mode")
	warnings := f.ctrl.warnings.take()
	if !wgSomeContainsAll(warnings, "drift", "Secret "+f.ns+"/db", "data.password") {
		t.Errorf("no warning naming the drift of data.password: %q", warnings)
	}
	if leaks := saLeaks(strings.Join(warnings, "\n"), forms); len(leaks) > 0 {
		t.Errorf("the warnings carry Secret values %q: %q", leaks, warnings)
	}
	d = wgDecision(t, mark, "secrets", f.ns, "db")
	wgExpectDecision(t, d, "Allow", "DriftUnapproved")
	if got, _ := f.ctrl.kube.CoreV1().Secrets(f.ns).Get(ctx, "db", metav1.GetOptions{}); got == nil || string(got.Data["password"]) != logged {
		t.Fatalf("the write allowed in log mode did not land")
	}

	// No decision line about the Secret, and nothing else the proxy
	// logged, carries a value.
	lines, _ := json.Marshal(decisionsFor(t, "secrets", f.ns, "db"))
	if leaks := saLeaks(string(lines), forms); len(leaks) > 0 {
		t.Errorf("the decision lines carry Secret values %q: %s", leaks, lines)
	}
	if !strings.Contains(string(lines), "data.password") {
		t.Errorf("the decision lines do not name the changed key: %s", lines)
	}
	log, err := cluster.ProxyLog()
	mustf(t, err, "reading the proxy log")
	if leaks := saLeaks(string(log), forms); len(leaks) > 0 {
		t.Errorf("the proxy log carries Secret values %q", leaks)
	}
}

// saAppend adds an entry to an approvals value as a person editing the
// text would: everything already there stays as it is.
func saAppend(value, entry string) string {
	v := strings.TrimSpace(value)
	if v == "" || v == "[]" {
		return "[" + entry + "]"
	}
	return strings.TrimSuffix(v, "]") + "," + entry + "]"
}

// saAddApproval is a read-modify-write update of the Widget's approvals by
// client c, retried on conflicts; it returns how many conflicts it met.
func saAddApproval(ctx context.Context, f *wgFamily, c dynamic.Interface, entry string) (conflicts int, err error) {
	backoff := wait.Backoff{Steps: 30, Duration: 5 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: 200 * time.Millisecond}
	err = retry.OnError(backoff, apierrors.IsConflict, func() error {
		w, err := c.Resource(framework.WidgetGVR).Get(ctx, f.widget, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ann := w.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[wgAnnApprovals] = saAppend(ann[wgAnnApprovals], entry)
		w.SetAnnotations(ann)
		_, err = c.Resource(framework.WidgetGVR).Update(ctx, w, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			conflicts++
		}
		return err
	})
	return conflicts, err
}

func (f *wgFamily) saApprovals(ctx context.Context) (string, error) {
	w, err := f.admin.Resource(framework.WidgetGVR).Get(ctx, f.widget, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return w.GetAnnotations()[wgAnnApprovals], nil
}

// A person's approval added concurrently with the proxy's pruning survives,
// as written, and so does an entry the proxy cannot read: 50 rounds of a
// controller write that prunes a stale approval (an expected write after a
// spec change) racing a person's read-modify-write that adds one.
func TestSecretsAndApprovalsPruneRace(t *testing.T) {
	const rounds = 50
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newWGFamily(t, "sa-race", "enforce")
	_, err := f.createGadget("g", "v0", false)
	mustf(t, err, "create Gadget")
	f.initialize()
	unreadable := fmt.Sprintf(`{"apiVersion":%q,"kind":"Gadget","name":"g","mode":"someday","note":"not the proxy's to delete"}`, wgAPIVersion)
	initial := "[" + unreadable + "]"
	f.annotateWidget(map[string]*string{wgAnnApprovals: &initial})
	// From here on the Widget carries out a spec change its controller
	// never reports done: every controller write is expected, and prunes
	// approvals for generation 1.
	f.bumpSpec()
	f.settleGadget("g", "Allow/Expected")
	stale := fmt.Sprintf(`{"apiVersion":%q,"kind":"Gadget","name":"g","generation":1,"mode":"once"}`, wgAPIVersion)

	start := time.Now()
	var people []string
	raced, writes := 0, 0
	for i := range rounds {
		if _, err := saAddApproval(ctx, f, f.admin, stale); err != nil {
			t.Fatalf("round %d: adding the stale approval: %v", i, err)
		}
		person := fmt.Sprintf(`{ "apiVersion": %q, "kind": "Gadget", "name": "person-%d", "mode": "always", "note": "round %d" }`, wgAPIVersion, i, i)
		people = append(people, person)

		var wg sync.WaitGroup
		var ctrlErr, personErr error
		var conflicts, n int
		wg.Add(2)
		go func() {
			// The controller writes until the proxy has pruned the stale
			// approval: a write decided from a cache that has not seen
			// it yet prunes nothing.
			defer wg.Done()
			for ; ctx.Err() == nil; n++ {
				if _, err := f.setValue("g", fmt.Sprintf("r%d-%d", i, n), false); err != nil {
					ctrlErr = fmt.Errorf("controller write: %w", err)
					return
				}
				v, err := f.saApprovals(ctx)
				if err != nil {
					ctrlErr = err
					return
				}
				if !strings.Contains(v, stale) {
					return
				}
				time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			}
			ctrlErr = ctx.Err()
		}()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
			conflicts, personErr = saAddApproval(ctx, f, f.alice.dyn, person)
		}()
		wg.Wait()
		if ctrlErr != nil || personErr != nil {
			t.Fatalf("round %d: controller: %v; person: %v", i, ctrlErr, personErr)
		}
		writes += n + 1
		if conflicts > 0 {
			raced++
		}

		v, err := f.saApprovals(ctx)
		mustf(t, err, "reading the approvals")
		if strings.Contains(v, stale) {
			t.Fatalf("round %d: the stale approval was not pruned: %s", i, v)
		}
		for j, p := range people {
			if !strings.Contains(v, p) {
				t.Fatalf("round %d: the approval a person added in round %d is gone or rewritten: %s", i, j, v)
			}
		}
		if !strings.Contains(v, unreadable) {
			t.Fatalf("round %d: the entry the proxy cannot read is gone or rewritten: %s", i, v)
		}
	}
	t.Logf("%d rounds in %s: %d controller writes, the person's update met a concurrent prune (409) in %d rounds",
		rounds, time.Since(start).Round(time.Millisecond), writes, raced)

	// The approvals are still what people wrote, in their order.
	v, err := f.saApprovals(ctx)
	mustf(t, err, "reading the approvals")
	if want := "[" + unreadable + "," + strings.Join(people, ",") + "]"; v != want {
		t.Errorf("approvals after %d rounds:\n got  %s\n want %s", rounds, v, want)
	}
}

// A once approval consumed next to entries the proxy cannot read takes only
// itself off the parent: the rest stays byte for byte.
func TestSecretsAndApprovalsUnreadableEntriesSurviveConsumption(t *testing.T) {
	f := newInitializedGadgetFamily(t, "sa-consume", "enforce")
	odd := fmt.Sprintf(`{"apiVersion":%q,"kind":"Gadget","mode":"once"}`, wgAPIVersion)
	noted := fmt.Sprintf(`{ "apiVersion": %q, "kind": "Gadget", "name": "other", "mode": "always", "ticket": "INC-7" }`, wgAPIVersion)
	once := fmt.Sprintf(`{"apiVersion":%q,"kind":"Gadget","name":"g","generation":1,"mode":"once"}`, wgAPIVersion)
	wrongType := fmt.Sprintf(`{"apiVersion":%q,"kind":"Gadget","name":"g","generation":"1"}`, wgAPIVersion)
	value := "[" + odd + "," + once + "," + noted + "," + wrongType + "]"
	f.annotateWidget(map[string]*string{wgAnnApprovals: &value})
	f.settleGadget("g", "Allow/DriftApproved")

	f.ctrl.warnings.take()
	mark := wgMark(t)
	_, err := f.setValue("g", "b", false)
	mustf(t, err, "the write the once approval allows")
	d := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Allow", "DriftApproved")
	wgExpectField(t, d, "approvalMode", "once")
	if w := f.ctrl.warnings.take(); !wgSomeContainsAll(w, wgAnnApprovals, "entry 0", "kept as written") {
		t.Errorf("no warning about the entry the proxy cannot read: %q", w)
	}
	want := "[" + odd + "," + noted + "," + wrongType + "]"
	if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != want {
		t.Errorf("approvals after consumption:\n got  %s\n want %s", got, want)
	}

	// The next drift write finds no approval: the unreadable entries never
	// approve anything.
	f.settleGadget("g", "Deny/DriftUnapproved")
	_, err = f.setValue("g", "c", false)
	wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
	if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != want {
		t.Errorf("approvals after a denied write:\n got  %s\n want %s", got, want)
	}
}
