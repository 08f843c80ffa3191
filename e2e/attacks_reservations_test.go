//go:build !kind

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// reservationRecords selects the proxy's approval reservation records.
const reservationRecords = "app.kubernetes.io/component=approval-reservation"

// reservationOrphanAge is the shortest --approval-reservation-orphan-age:
// the settling peer of these tests looks for orphans every 10s.
const reservationOrphanAge = 30 * time.Second

// A user who may write ConfigMaps in the proxy's namespace, and may not
// even read the Widget, rewrites the reservation record of a once approval
// while the write it was reserved for is held in flight, so that it
// approves every write. The write is then refused. Neither the replica
// that reserved the approval nor any other may put the forgery on the
// Widget: the approval that comes back is exactly the one that was taken,
// and it still admits one write.
func TestAttackRewrittenReservationRecordApprovesEveryWrite(t *testing.T) {
	ctx := context.Background()
	f := newOnceApprovedGadget(t, "res-rewrite")
	f.settleGadget("g", "Allow/DriftApproved")
	taken := onlyApproval(t, f)
	mallory := recordForger(t)
	settlingPeer(t)

	arrived, release := make(chan struct{}, 1), make(chan struct{})
	hook, err := framework.StartAdmissionHook(ctx, directClient(t), f.ns+"-holds-writes", f.ns, 30,
		[]admissionregistrationv1.RuleWithOperations{gadgetWrites()},
		func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if req.Name != "g" {
				return framework.Denied("probe")
			}
			if ptr.Deref(req.DryRun, false) {
				return framework.Allowed()
			}
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-release
			return framework.Denied("the write whose reservation record was forged")
		})
	mustf(t, err, "the webhook")
	t.Cleanup(hook.Close)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	waitForProbe(t, f, func(err error) bool { return err != nil && strings.Contains(err.Error(), "probe") }, "the webhook to be in force")

	answered := make(chan error, 1)
	go func() {
		_, err := f.setValue("g", "b", false)
		answered <- err
	}()
	select {
	case <-arrived:
	case err := <-answered:
		t.Fatalf("the approved write was answered before kube-apiserver's admission held it: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the approved write never reached kube-apiserver's admission")
	}

	// Mallory finds the record by its content (she cannot read the Widget,
	// but the record names it) and rewrites it at once.
	records, err := mallory.CoreV1().ConfigMaps(framework.DriftNamespace).List(ctx, metav1.ListOptions{LabelSelector: reservationRecords})
	mustf(t, err, "mallory lists the reservation records")
	var record *corev1.ConfigMap
	for i := range records.Items {
		if strings.Contains(records.Items[i].Data["reservation"], `"name":"`+f.widget+`"`) {
			record = &records.Items[i]
		}
	}
	if record == nil {
		t.Fatalf("no reservation record names the Widget while its approved write is in flight (%d records)", len(records.Items))
	}
	forged := strings.ReplaceAll(record.Data["reservation"], `"mode":"once"`, `"mode":"always"`)
	if forged == record.Data["reservation"] {
		t.Fatalf("the record holds no once approval to forge: %s", forged)
	}
	record.Data["reservation"] = forged
	_, err = mallory.CoreV1().ConfigMaps(framework.DriftNamespace).Update(ctx, record, metav1.UpdateOptions{})
	mustf(t, err, "mallory rewrites the reservation record")

	close(release)
	released = true
	select {
	case err := <-answered:
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "forged") {
			t.Fatalf("the held write: %v, want the webhook's refusal", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the held write was never answered")
	}

	// Settled when no record of the Widget is left and the Widget names
	// none: by the replica that reserved the approval, or by the peer from
	// what it finds. The forgery must never be on the Widget meanwhile.
	eventually(t, 3*reservationOrphanAge+time.Minute, "the reservation is settled", func() error {
		noForgedApproval(t, f)
		return reservationSettled(t, f)
	})
	// The settlement is final: nothing the peer finds later changes it.
	time.Sleep(reservationOrphanAge / 3)
	noForgedApproval(t, f)
	if got := onlyApproval(t, f); got != taken {
		t.Fatalf("after the refused write the Widget approves %s, want the approval taken for it, %s", got, taken)
	}

	// The approval that came back is the person's, not a forgery: it admits
	// one write, and is spent by it.
	hook.Remove()
	waitForProbe(t, f, func(err error) bool { return err == nil }, "the webhook to be gone")
	_, err = f.setValue("g", "b", false)
	mustf(t, err, "the approved write once the webhook is gone")
	if got := wgApprovals(t, f.getWidget().GetAnnotations()[wgAnnApprovals]); len(got) != 0 {
		t.Fatalf("the once approval is still on the Widget after the write it admitted: %v", got)
	}
	eventually(t, time.Minute, "the second reservation is settled", func() error { return reservationSettled(t, f) })
}

// The same user writes a whole reservation record of her own: a mode
// always approval of the Gadget, reserved long ago for a write that never
// landed. Every replica finds it an orphan, and none puts it on the
// Widget: the Widget never vouched for it.
func TestAttackForgedReservationRecordApprovesEveryWrite(t *testing.T) {
	ctx := context.Background()
	f := newOnceApprovedGadget(t, "res-orphan")
	f.settleGadget("g", "Allow/DriftApproved")
	// The person's approval is gone, spent or withdrawn: what the
	// forgery would put back is the only approval there could be.
	f.annotateWidget(map[string]*string{wgAnnApprovals: nil})
	mallory := recordForger(t)
	settlingPeer(t)

	gadget, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(ctx, "g", metav1.GetOptions{})
	mustf(t, err, "get the Gadget")
	entry := map[string]any{"apiVersion": wgAPIVersion, "kind": "Gadget", "name": "g", "generation": gadget.GetGeneration(), "mode": "always"}
	raw, _ := json.Marshal(entry)
	reservation, _ := json.Marshal(map[string]any{
		"parent":      map[string]any{"apiVersion": wgAPIVersion, "kind": "Widget", "name": f.widget},
		"approval":    entry,
		"approvalRaw": json.RawMessage(raw),
		"operation":   "UPDATE",
		"group":       framework.GadgetGVR.Group, "version": framework.GadgetGVR.Version, "resource": framework.GadgetGVR.Resource,
		"namespace": f.ns, "name": "g",
		// The Gadget as stored: the write never landed.
		"before":   map[string]any{"exists": true, "uid": string(gadget.GetUID()), "resourceVersion": gadget.GetResourceVersion()},
		"replica":  "kausality-proxy-dead",
		"reserved": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339),
	})
	name := "kausality-reservation-" + utilrand.String(5)
	_, err = mallory.CoreV1().ConfigMaps(framework.DriftNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"app.kubernetes.io/managed-by": "kausality-proxy", "app.kubernetes.io/component": "approval-reservation"}},
		Data: map[string]string{"reservation": string(reservation)},
	}, metav1.CreateOptions{})
	mustf(t, err, "mallory creates a reservation record")
	// Vouching for a record on the parent is the proxy's alone: not even
	// a person who may write the Widget can do it through the proxy.
	sum := sha256.Sum256(reservation)
	vouch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		"kausality.io/reservations": name + "=" + hex.EncodeToString(sum[:])}}})
	_, err = f.alice.dyn.Resource(framework.WidgetGVR).Patch(ctx, f.widget, types.MergePatchType, vouch, metav1.PatchOptions{})
	mustf(t, err, "alice's patch of the Widget's annotations")
	if stamps := f.getWidget().GetAnnotations()["kausality.io/reservations"]; strings.Contains(stamps, name) {
		t.Fatalf("a write through the proxy vouched for a reservation record on the parent: %q", stamps)
	}

	// Settled when gone: a replica claimed it and did not honour it.
	eventually(t, 2*reservationOrphanAge+time.Minute, "the forged record is settled", func() error {
		noForgedApproval(t, f)
		_, err := directClient(t).CoreV1().ConfigMaps(framework.DriftNamespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the forged record is still there: %v", err)
	})
	noForgedApproval(t, f)
	if got := wgApprovals(t, f.getWidget().GetAnnotations()[wgAnnApprovals]); len(got) != 0 {
		t.Fatalf("a forged reservation record put approvals on the Widget: %v", got)
	}
}

// recordForger is a user who may read and write ConfigMaps in the proxy's
// namespace, through the proxy, and nothing else: not even read a Widget.
func recordForger(t *testing.T) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	user := "mallory-records-" + utilrand.String(5)
	admin := directClient(t)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}},
	}
	_, err := admin.RbacV1().Roles(framework.DriftNamespace).Create(ctx, role, metav1.CreateOptions{})
	mustf(t, err, "role")
	_, err = admin.RbacV1().RoleBindings(framework.DriftNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	mustf(t, err, "binding")
	t.Cleanup(func() {
		_ = admin.RbacV1().RoleBindings(framework.DriftNamespace).Delete(context.Background(), user, metav1.DeleteOptions{})
		_ = admin.RbacV1().Roles(framework.DriftNamespace).Delete(context.Background(), user, metav1.DeleteOptions{})
	})
	waitAllowed(t, user, "update", "configmaps", framework.DriftNamespace)
	cfg, err := cluster.UserThroughProxy(user)
	mustf(t, err, "user %s", user)
	client, err := kubernetes.NewForConfig(cfg)
	mustf(t, err, "client for %s", user)
	_, err = client.CoreV1().ConfigMaps(framework.DriftNamespace).List(ctx, metav1.ListOptions{LabelSelector: reservationRecords})
	mustf(t, err, "%s lists the reservation records", user)
	return client
}

// settlingPeer starts a replica that settles the reservation records
// older than reservationOrphanAge, of any replica.
func settlingPeer(t *testing.T) {
	t.Helper()
	peer, err := env.StartReplica(context.Background(), framework.ReplicaOptions{
		Name:                 "settles-orphans-" + utilrand.String(5),
		Receivers:            []string{env.Reports.URL()},
		Drifts:               framework.DriftTimings(framework.DriftNamespace),
		ReservationOrphanAge: reservationOrphanAge,
	})
	mustf(t, err, "the settling peer")
	t.Cleanup(peer.Stop)
}

// onlyApproval is the Widget's one approval entry, as written.
func onlyApproval(t *testing.T, f *wgFamily) string {
	t.Helper()
	var entries []json.RawMessage
	v := f.getWidget().GetAnnotations()[wgAnnApprovals]
	if err := json.Unmarshal([]byte(v), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("the Widget's approvals %q: want one entry (%v)", v, err)
	}
	return string(entries[0])
}

// noForgedApproval fails t when the Widget holds an approval of every
// write: nobody but the forger wrote one.
func noForgedApproval(t *testing.T, f *wgFamily) {
	t.Helper()
	for _, a := range wgApprovals(t, f.getWidget().GetAnnotations()[wgAnnApprovals]) {
		if a["mode"] != "once" {
			t.Fatalf("a forged reservation record put an approval on the Widget: %v", a)
		}
	}
}

// reservationSettled reports an error while a record names f's Widget or
// the Widget names a record.
func reservationSettled(t *testing.T, f *wgFamily) error {
	t.Helper()
	list, err := directClient(t).CoreV1().ConfigMaps(framework.DriftNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: reservationRecords})
	if err != nil {
		return err
	}
	for _, cm := range list.Items {
		if strings.Contains(cm.Data["reservation"], `"name":"`+f.widget+`"`) {
			return fmt.Errorf("record %s of the Widget is left", cm.Name)
		}
	}
	if stamps := f.getWidget().GetAnnotations()["kausality.io/reservations"]; stamps != "" {
		return fmt.Errorf("the Widget still names reservations %q", stamps)
	}
	return nil
}
