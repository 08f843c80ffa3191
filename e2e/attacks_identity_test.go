package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

const idAnnControllers = "kausality.io/controllers"

// idWaitRecord waits until the Widget's controllers record is want.
func idWaitRecord(f *wgFamily, want string) {
	f.t.Helper()
	eventually(f.t, 60*time.Second, idAnnControllers+" = "+want, func() error {
		if got := f.getWidget().GetAnnotations()[idAnnControllers]; got != want {
			return fmt.Errorf("%s = %q", idAnnControllers, got)
		}
		return nil
	})
}

// idWaitAllowed waits until kube-apiserver allows user verb on the test
// group's resource (and subresource) in ns, before the proxy is asked: it
// would cache a denial.
func idWaitAllowed(t *testing.T, user, verb, resource, subresource, ns string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s may %s %s/%s", user, verb, resource, subresource), func() error {
		sar, err := directClient(t).AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: framework.TestGroup,
					Resource: resource, Subresource: subresource, Namespace: ns},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return errors.New("not yet allowed")
		}
		return nil
	})
}

// idStatusWriter is a user who may write the status of every Widget, and
// nothing else.
func idStatusWriter(t *testing.T, name string) *wgActor {
	t.Helper()
	ctx := context.Background()
	admin := directClient(t)
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{framework.TestGroup}, Resources: []string{"widgets/status"},
			Verbs: []string{"get", "update", "patch"}}},
	}, metav1.CreateOptions{})
	mustf(t, err, "cluster role %s", name)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: name}},
	}, metav1.CreateOptions{})
	mustf(t, err, "cluster role binding %s", name)
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	idWaitAllowed(t, name, "patch", "widgets", "status", "")
	cfg, err := cluster.UserThroughProxy(name)
	mustf(t, err, "user %s", name)
	return wgNewActor(t, cfg, name)
}

// Five users who may write a parent's status each report an
// observedGeneration beyond its generation, which used to record each as
// the parent's controller and push the real one out of the five places of
// kausality.io/controllers: its drift then passed as a new origin.
func TestAttackStatusWritersPushControllerOut(t *testing.T) {
	f := newWGFamily(t, "idpush", "enforce")
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates Gadget g")
	f.initialize()
	ctrl := controllerid.LongHash(wgControllerUser)
	idWaitRecord(f, ctrl)
	f.settleGadget("g", "Deny/DriftUnapproved")

	mark := wgMark(t)
	var writers []string
	for i := 1; i <= 5; i++ {
		name := fmt.Sprintf("status-writer-%d-%s", i, utilrand.String(4))
		writers = append(writers, name)
		a := idStatusWriter(t, name)
		patch := fmt.Sprintf(`{"status":{"observedGeneration":%d}}`, f.getWidget().GetGeneration()+int64(i))
		_, err := a.dyn.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType,
			[]byte(patch), metav1.PatchOptions{}, "status")
		mustf(t, err, "%s reports observedGeneration beyond the generation", name)
	}
	// The proxy logs each status write's decision after it started the
	// side writes the decision asked for; they are a GET and a PATCH.
	eventually(t, 60*time.Second, "decision lines for the five status writes", func() error {
		seen := map[string]bool{}
		for _, d := range wgDecisionsAfter(t, mark, "widgets", "", f.widget) {
			seen[d.Str("user")] = true
		}
		for _, w := range writers {
			if !seen[w] {
				return fmt.Errorf("none yet for %s", w)
			}
		}
		return nil
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		recorded := controllerid.ParseHashes(f.getWidget().GetAnnotations()[idAnnControllers])
		if !controllerid.ContainsHash(recorded, ctrl) {
			t.Fatalf("the status writers pushed the controller out of %s: %q", idAnnControllers, recorded)
		}
		for _, w := range writers {
			if controllerid.UserOf(w).In(recorded) {
				t.Fatalf("%s, who reported an observedGeneration the Widget never had, is recorded as its controller: %q", w, recorded)
			}
		}
		time.Sleep(time.Second)
	}
	// The real controller reports the generation it observed again; its
	// revert is still drift, not a new origin.
	f.setStatus(true)
	f.settleGadget("g", "Deny/DriftUnapproved")
}

// idCollider finds a user name whose 5-character Kausality hash is the
// victim's: milliseconds of brute force.
func idCollider(t *testing.T, victim string) string {
	t.Helper()
	want := controllerid.Hash(victim)
	prefix := "chosen-" + utilrand.String(4) + "-"
	for i := 0; i < 1<<28; i++ {
		if name := prefix + strconv.Itoa(i); controllerid.Hash(name) == want {
			return name
		}
	}
	t.Fatal("no colliding name found")
	return ""
}

// A record in Kausality's 5-character form names the controller; a user
// name with the same short hash is found in milliseconds and used to count
// as the controller. The controller's first status write through the
// proxy upgrades the record to the long form, and then the chosen name is
// a person like any other.
func TestAttackChosenNameCollidesWithControllerHash(t *testing.T) {
	f := newWGFamily(t, "idcoll", "enforce")
	short := controllerid.Hash(wgControllerUser)
	f.annotateWidget(map[string]*string{idAnnControllers: &short})
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates Gadget g")

	name := idCollider(t, wgControllerUser)
	if controllerid.Hash(name) != short || controllerid.LongHash(name) == controllerid.LongHash(wgControllerUser) {
		t.Fatalf("collider %q: short %s long %s", name, controllerid.Hash(name), controllerid.LongHash(name))
	}
	cfg, err := cluster.UserThroughProxy(name, "system:masters")
	mustf(t, err, "user %s", name)
	mallory := wgNewActor(t, cfg, name)

	f.initialize()
	f.settleGadget("g", "Deny/DriftUnapproved")

	// The collider sends the controller's field manager too: only its
	// user could make it the controller. The proxy's cache may be a beat
	// behind the upgraded record; a dry run changes nothing.
	eventually(t, 60*time.Second, name+"'s write is a person's (Allow/NewOrigin), not the controller's", func() error {
		mallory.warnings.take()
		_, err := f.writeGadget(mallory, "g", true, func(g *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(g.Object, "mallory", "spec", "value")
		})
		if got := wgCategory(err, mallory.warnings.take()); got != "Allow/NewOrigin" {
			return fmt.Errorf("%s, whose short hash is the controller's, got %s", name, got)
		}
		return nil
	})
	idWaitRecord(f, controllerid.LongHash(wgControllerUser))
	f.settleGadget("g", "Deny/DriftUnapproved")
}

// Annotation text reaches terminals: kubectl prints a denial's message as
// it comes, and `kubectl kausality why` prints the freeze. An escape
// sequence in a freeze reason could clear the screen or rewrite what a
// person reads.
func TestAttackEscapeSequencesInFreezeMessage(t *testing.T) {
	f := newWGFamily(t, "idesc", "enforce")
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates Gadget g")
	f.initialize()
	freeze := `{"user":"ops","reason":"incident\u001b[2J\u001b[H\u001b]8;;http://evil.example\u0007 42\u202e"}`
	f.annotateWidget(map[string]*string{wgAnnFreeze: &freeze})
	f.settleGadget("g", "Deny/Frozen")

	_, err = f.setValue("g", "b", false)
	s := wgDenied(t, err, f, "Gadget", "g", wgAnnFreeze)
	texts := []string{s.Message}
	for _, c := range s.Details.Causes {
		texts = append(texts, c.Message, c.Field)
	}
	for _, text := range texts {
		if strings.ContainsAny(text, "\x1b\x07\u202e") {
			t.Errorf("a control character reaches the caller: %q", text)
		}
	}
	if !strings.Contains(s.Message, `incident\x1b[2J\x1b[H\x1b]8;;http://evil.example\x07 42\u202e`) {
		t.Errorf("the freeze reason is not shown with its control characters escaped: %s", s.Message)
	}

	out := newPlugin(t, f.alice.cfg).run("-n", f.ns, "why", "gadgets/g")
	if strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Errorf("kubectl kausality why prints control characters: %q", out)
	}
	if !strings.Contains(out, `\x1b[2J`) {
		t.Errorf("kubectl kausality why does not show the escaped freeze reason: %s", out)
	}
}

// A user who may write a child but not read its parent learned, from a
// denial, the parent's name, generation and freeze reason.
func TestAttackDenialLeaksParentToCallerWhoCannotReadIt(t *testing.T) {
	f := newWGFamily(t, "idleak", "enforce")
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "the controller creates Gadget g")
	f.initialize()
	freeze := `{"user":"ops","reason":"INC-4711 acquisition of the widget team"}`
	f.annotateWidget(map[string]*string{wgAnnFreeze: &freeze})

	ctx := context.Background()
	admin := directClient(t)
	bob := "bob-" + utilrand.String(5)
	_, err = admin.RbacV1().Roles(f.ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "gadget-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{framework.TestGroup}, Resources: []string{"gadgets"},
			Verbs: []string{"get", "list", "update", "patch"}}},
	}, metav1.CreateOptions{})
	mustf(t, err, "role")
	_, err = admin.RbacV1().RoleBindings(f.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gadget-editor"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "gadget-editor"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: bob}},
	}, metav1.CreateOptions{})
	mustf(t, err, "role binding")
	idWaitAllowed(t, bob, "update", "gadgets", "", f.ns)
	cfg, err := cluster.UserThroughProxy(bob)
	mustf(t, err, "user %s", bob)
	b := wgNewActor(t, cfg, bob)
	if _, err := b.dyn.Resource(framework.WidgetGVR).Get(ctx, f.widget, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("%s reads the Widget: %v", bob, err)
	}

	var s metav1.Status
	eventually(t, 60*time.Second, bob+"'s write of the Gadget is denied as frozen", func() error {
		_, err := f.writeGadget(b, "g", false, func(g *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(g.Object, "bob", "spec", "value")
		})
		var st apierrors.APIStatus
		if !errors.As(err, &st) || st.Status().Code != 403 {
			return fmt.Errorf("got %v", err)
		}
		if _, frozen := wgCause(st.Status(), "KausalityFrozen"); !frozen {
			return fmt.Errorf("not a freeze: %s", st.Status().Message)
		}
		s = st.Status()
		return nil
	})
	texts := []string{s.Message}
	for _, c := range s.Details.Causes {
		texts = append(texts, c.Message, c.Field)
	}
	for _, text := range texts {
		for _, secret := range []string{f.widget, "INC-4711", "generation ", "Widget"} {
			if strings.Contains(text, secret) {
				t.Errorf("the denial shows %q to a caller who may not read the parent: %s", secret, text)
			}
		}
	}
	if !strings.Contains(s.Message, "ask someone who may read and edit this object's controller owner") {
		t.Errorf("the denial does not say what to do: %s", s.Message)
	}
	if got := f.gadgetValue("g"); got != "a" {
		t.Errorf("Gadget g has value %q after a denied write", got)
	}
}

// The record is a system annotation: a write that omits it keeps it, and
// only a person who is not in it may empty it, which the proxy takes as
// "forget the record" (the decision package's tests cover who may).
// `kubectl kausality reset-controllers` does that through the proxy.
func TestResetControllersThroughProxy(t *testing.T) {
	f := newWGFamily(t, "idreset", "")
	f.initialize()
	idWaitRecord(f, controllerid.LongHash(wgControllerUser))

	out := newPlugin(t, f.alice.cfg).run("reset-controllers", "widgets.e2e.kausality.io/"+f.widget)
	if !strings.Contains(out, "forgot the recorded controllers") {
		t.Errorf("reset-controllers says %q", out)
	}
	if got, ok := f.getWidget().GetAnnotations()[idAnnControllers]; ok {
		t.Fatalf("%s is still on the Widget after reset-controllers: %q", idAnnControllers, got)
	}
	// The controller's next status write that advances observedGeneration
	// records it again.
	f.bumpSpec()
	f.setStatus(true)
	idWaitRecord(f, controllerid.LongHash(wgControllerUser))
}
