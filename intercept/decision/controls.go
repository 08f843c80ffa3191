// Who may change which kausality.io annotation of an object, whatever the
// shape of the write. kube-apiserver keeps metadata.annotations on the
// status writes of most built-in kinds, so a status write is an annotation
// write as much as a PUT of the object is.

package decision

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// changedKeys lists, sorted, the keys selected by pick whose value differs
// between old and new (added and removed ones included).
func changedKeys(old, new map[string]string, pick func(string) bool) []string {
	var keys []string
	for k, v := range old {
		if w, ok := new[k]; pick(k) && (!ok || w != v) {
			keys = append(keys, k)
		}
	}
	for k := range new {
		if _, ok := old[k]; pick(k) && !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// isPersonsAnnotation: a kausality.io annotation people set (controls,
// trace labels, keys of later versions), not one the proxy computes.
func isPersonsAnnotation(key string) bool {
	return annotations.IsKausality(key) && !annotations.IsSystem(key)
}

// objectIdentity says whether the writer is the controller of the written
// object itself (not of its parent), the same way a child write tells its
// parent's controller: the object's kausality.io/controllers, else the
// owner of its status.observedGeneration.
func (x *decider) objectIdentity() controllerid.Identity {
	return controllerid.Identify(x.in.OldObject, x.in.FieldManager, x.user)
}

// guardOwnControls refuses an allowed update by the object's own controller
// that changes one of the object's controls as it would be stored (after
// the annotations the proxy takes from the stored object): the controls
// hold back that controller's drift, so it may not set them itself. A PUT
// of an old copy is no edit: kube-apiserver refuses it with a conflict.
func (x *decider) guardOwnControls() {
	in, d := x.in, x.d
	if in.Operation != Update || in.OldObject == nil || in.NewObject == nil || in.StaleUpdate {
		return
	}
	if d.Result == Deny {
		// Refused for another reason; a shadow write, which is sent
		// anyway, must still not carry this edit (KeepShadowAnnotations).
		if len(changedKeys(x.oldAnn, x.newAnn, annotations.IsControl)) > 0 {
			if id := x.objectIdentity(); id.Determined && id.IsController {
				d.OwnControlsEdited = true
			}
		}
		return
	}
	stored := x.newAnn
	if !d.ChildAnnotations.Empty() {
		stored = make(map[string]string, len(x.newAnn))
		for k, v := range x.newAnn {
			stored[k] = v
		}
		for _, k := range d.ChildAnnotations.Remove {
			delete(stored, k)
		}
		for k, v := range d.ChildAnnotations.Set {
			stored[k] = v
		}
	}
	keys := changedKeys(x.oldAnn, stored, annotations.IsControl)
	if lastAppliedControlsChanged(x.oldAnn[annotations.LastApplied], stored[annotations.LastApplied]) {
		keys = append(keys, annotations.LastApplied)
	}
	if len(keys) == 0 {
		// The object's own controller patches its controls without a
		// change of the copy it was decided on: decided again on the
		// object read live, in case the copy misses a control a person
		// has just set.
		if in.NamesControls && !in.Confirmed && !in.ObjectLive {
			if id := x.objectIdentity(); id.Determined && id.IsController {
				d.RecheckController = true
			}
		}
		return
	}
	if id := x.objectIdentity(); id.Determined && id.IsController {
		x.refuseOwnControls(keys, id)
		return
	}
	d.RecheckController = !in.Confirmed
}

// refuseOwnControls replaces the decision with the refusal of an edit of
// keys by the object's own controller.
func (x *decider) refuseOwnControls(keys []string, id controllerid.Identity) {
	d := x.d
	*d = Decision{Result: Deny, Category: OwnControlsRefused, Child: d.Child, Actor: d.Actor, Parent: d.Parent, Mode: d.Mode, ModeSource: d.ModeSource, Warnings: d.Warnings}
	why := "its status writes advanced the object's observedGeneration (" + annotations.Controllers + ")"
	if id.Method == controllerid.MethodManagedFields {
		why = "its field manager " + strconv.Quote(x.in.FieldManager) + " owns the object's status.observedGeneration"
	}
	d.Reason = "the object's own controller edits its controls " + strings.Join(keys, ", ") + ": " + why
	d.Message = "kausality: " + string(x.in.Operation) + x.shapeText() + " of " + d.Child.String() + " denied: the controller of " +
		d.Child.String() + " may not edit its own " + strings.Join(keys, ", ") + "; a person must. The caller, " + d.Actor.User +
		", is that controller: " + why + ". Approvals, rejections, freeze, snooze and mode hold back this controller's " +
		"drift, so they are refused to it through every kind of write. Ask a person who is not its controller to make this change."
	d.Causes = []metav1.StatusCause{{Type: CauseChild, Message: d.Child.String()}, {Type: CauseController, Message: d.Actor.User + ": " + why}}
	for _, k := range keys {
		d.Causes = append(d.Causes, metav1.StatusCause{Type: CauseControlAnnotation, Field: annotationField(k),
			Message: "the object's own controller may not change this annotation"})
	}
}

// shapeText names the subresource a write goes through.
func (x *decider) shapeText() string {
	if x.in.StatusWrite {
		return " (status subresource)"
	}
	return ""
}

// guardStatusAnnotations decides what a status write does to kausality.io
// annotations, and reports whether it refused the write. The annotations
// the proxy computes are kept as stored, as on every write of the object
// itself. The ones people set are refused: the status subresource is a
// controller's channel (RBAC grants it to controllers, and a controller
// there bypasses the protection of the object's own writes), and a person
// edits them on the object itself.
func (x *decider) guardStatusAnnotations() bool {
	in, d := x.in, x.d
	if in.OldObject == nil || in.NewObject == nil || in.StaleUpdate {
		return false
	}
	if keys := changedKeys(x.oldAnn, x.newAnn, isPersonsAnnotation); len(keys) > 0 {
		var controls []string
		for _, k := range keys {
			if annotations.IsControl(k) {
				controls = append(controls, k)
			}
		}
		if id := x.objectIdentity(); len(controls) > 0 && id.Determined && id.IsController {
			x.refuseOwnControls(controls, id)
			return true
		}
		x.refuseStatusAnnotations(keys)
		return true
	}
	if keys := changedKeys(x.oldAnn, x.newAnn, annotations.IsSystem); len(keys) > 0 {
		restored := make(map[string]string, len(x.newAnn))
		for k, v := range x.newAnn {
			restored[k] = v
		}
		for _, k := range keys {
			if v, ok := x.oldAnn[k]; ok {
				restored[k] = v
			} else {
				delete(restored, k)
			}
		}
		d.ChildAnnotations = diffAnnotations(x.newAnn, restored)
		d.Reason += "; kept the stored " + strings.Join(keys, ", ") + " (only the proxy writes them)"
	}
	return false
}

// refuseStatusAnnotations refuses a status write that changes annotations
// people set.
func (x *decider) refuseStatusAnnotations(keys []string) {
	d := x.d
	d.Result, d.Category = Deny, StatusAnnotationsRefused
	d.Reason = "a status write changes " + strings.Join(keys, ", ")
	d.Message = "kausality: " + string(x.in.Operation) + x.shapeText() + " of " + d.Child.String() + " denied: it changes " +
		strings.Join(keys, ", ") + ". kube-apiserver keeps metadata.annotations on this status write, and the kausality.io " +
		"annotations people set (approvals, rejections, freeze, snooze, mode, trace labels) are not changed through the " +
		"status subresource: leave them out of the status write, or, as a person, set them on the object itself: " +
		kubectlAnnotate(d.Child) + " " + keys[0] + "=..."
	d.Causes = []metav1.StatusCause{{Type: CauseChild, Message: d.Child.String()}}
	for _, k := range keys {
		d.Causes = append(d.Causes, metav1.StatusCause{Type: CauseControlAnnotation, Field: annotationField(k),
			Message: "not changed through the status subresource"})
	}
}

// lastAppliedControlsChanged reports whether the controls named in the
// annotations of a kubectl last-applied-configuration differ between old
// and new. kubectl apply computes what to remove from it: a controller
// that writes a control into its own object's last-applied configuration
// makes the next person who applies a manifest without it remove that
// control (a freeze, a rejection) unawares. A value that is not JSON
// counts as changed when it differs and mentions a kausality annotation.
func lastAppliedControlsChanged(old, new string) bool {
	if old == new {
		return false
	}
	before, okBefore := lastAppliedControls(old)
	after, okAfter := lastAppliedControls(new)
	if !okBefore || !okAfter {
		return strings.Contains(new, annotations.Prefix) || strings.Contains(old, annotations.Prefix)
	}
	return len(changedKeys(before, after, annotations.IsControl)) > 0
}

// lastAppliedControls are the control annotations a last-applied
// configuration names, and false when it is not a JSON object.
func lastAppliedControls(value string) (map[string]string, bool) {
	if value == "" {
		return nil, true
	}
	// Members by their exact names, as kubectl reads them: a struct
	// would take a decoy "Metadata" for "metadata".
	var applied map[string]any
	if err := json.Unmarshal([]byte(value), &applied); err != nil || applied == nil {
		return nil, false
	}
	metadata, _ := applied["metadata"].(map[string]any)
	named, _ := metadata["annotations"].(map[string]any)
	controls := map[string]string{}
	for k, v := range named {
		if annotations.IsControl(k) {
			s, _ := v.(string)
			controls[k] = s
		}
	}
	return controls, true
}
