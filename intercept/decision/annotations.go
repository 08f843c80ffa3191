package decision

import (
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// The three compute functions of the Kausality design's "Annotation
// Protection from Controller Sync", refined:
//   - system annotations (trace, updaters, controllers, phase,
//     observedGeneration) never come from a request: they are kept as
//     stored, except trace and updaters, which are recomputed on a
//     desired-state change;
//   - on controller writes every user annotation comes from the stored
//     object (what a controller copied from its parent is dropped);
//   - on other writes user annotations are taken from the request (they
//     stay editable), also when only metadata changes.
//
// old is the stored object's annotations (nil on CREATE), new the request's.
// Non-kausality annotations always come from new. The returned map is new.

// ComputeAnnotationsForController computes a controller write's annotations.
func ComputeAnnotationsForController(old, new map[string]string, desiredChanged bool, newTrace, newUpdaters string) map[string]string {
	return computeAnnotations(old, new, annotations.IsKausality, desiredChanged, newTrace, newUpdaters)
}

// ComputeAnnotationsForUser computes the annotations of a write by anyone
// else (a new causal origin, or a write without parent).
func ComputeAnnotationsForUser(old, new map[string]string, desiredChanged bool, newTrace, newUpdaters string) map[string]string {
	return computeAnnotations(old, new, annotations.IsSystem, desiredChanged, newTrace, newUpdaters)
}

// computeAnnotations takes the keys fromStored selects from old and every
// other key from new, then recomputes trace and updaters on a
// desired-state change.
func computeAnnotations(old, new map[string]string, fromStored func(string) bool, desiredChanged bool, newTrace, newUpdaters string) map[string]string {
	out := make(map[string]string, len(new)+2)
	for k, v := range new {
		if !fromStored(k) {
			out[k] = v
		}
	}
	for k, v := range old {
		if fromStored(k) {
			out[k] = v
		}
	}
	if desiredChanged {
		setSystem(out, newTrace, newUpdaters)
	}
	return out
}

func setSystem(out map[string]string, newTrace, newUpdaters string) {
	if newTrace != "" {
		out[annotations.Trace] = newTrace
	} else {
		delete(out, annotations.Trace)
	}
	if newUpdaters != "" {
		out[annotations.Updaters] = newUpdaters
	} else {
		delete(out, annotations.Updaters)
	}
}

// AnnotationChanges are changes to the annotations of the request's object,
// to apply before forwarding it.
type AnnotationChanges struct {
	// Set maps keys to their new values.
	Set map[string]string `json:"set,omitempty"`
	// Remove lists keys to delete (sorted).
	Remove []string `json:"remove,omitempty"`
}

// Empty reports whether there is nothing to change.
func (c *AnnotationChanges) Empty() bool { return c == nil || (len(c.Set) == 0 && len(c.Remove) == 0) }

// Apply applies the changes to obj's annotations.
func (c *AnnotationChanges) Apply(obj *unstructured.Unstructured) {
	if obj == nil {
		return
	}
	c.ApplyTo(obj)
}

// ApplyTo applies the changes to the annotations of obj, of any type; none
// left, it has none.
func (c *AnnotationChanges) ApplyTo(obj metav1.Object) {
	if c.Empty() {
		return
	}
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = make(map[string]string, len(c.Set))
	}
	for _, k := range c.Remove {
		delete(ann, k)
	}
	for k, v := range c.Set {
		ann[k] = v
	}
	if len(ann) == 0 {
		ann = nil
	}
	obj.SetAnnotations(ann)
}

// Pointers renders the changes as key → value, nil meaning remove (the
// form patch.AddAnnotations takes).
func (c *AnnotationChanges) Pointers() map[string]*string {
	if c.Empty() {
		return nil
	}
	m := make(map[string]*string, len(c.Set)+len(c.Remove))
	for k, v := range c.Set {
		m[k] = &v
	}
	for _, k := range c.Remove {
		m[k] = nil
	}
	return m
}

// diffAnnotations returns the changes turning from into to (nil if none).
func diffAnnotations(from, to map[string]string) *AnnotationChanges {
	var c AnnotationChanges
	for k, v := range to {
		if old, ok := from[k]; !ok || old != v {
			if c.Set == nil {
				c.Set = make(map[string]string, 2)
			}
			c.Set[k] = v
		}
	}
	for k := range from {
		if _, ok := to[k]; !ok {
			c.Remove = append(c.Remove, k)
		}
	}
	if c.Empty() {
		return nil
	}
	sort.Strings(c.Remove)
	return &c
}

// ResetsControllers reports whether a write empties the object's
// kausality.io/controllers record on purpose: it sets the value to "" (a
// write that omits it keeps it, as every system annotation), and its user
// is not in the record. A person resets the record so that a controller
// that changed identity is recorded again; the recorded controllers cannot
// reset their own record.
func ResetsControllers(old, new map[string]string, u controllerid.User) bool {
	v, set := new[annotations.Controllers]
	recorded := controllerid.ParseHashes(old[annotations.Controllers])
	return set && strings.TrimSpace(v) == "" && len(recorded) > 0 && !u.In(recorded)
}

// KeepSystemAnnotations is what puts the system annotations a write would
// change (from old, as stored, to new) back to their stored values; nil
// when it changes none. A write the proxy forwards undecided (a
// controller's in shadow mode) must not write what only the proxy writes,
// on which the decisions of other writes rest. A create (old nil) writes
// none of them.
func KeepSystemAnnotations(old, new *unstructured.Unstructured) *AnnotationChanges {
	if new == nil {
		return nil
	}
	written := annotationsOf(new)
	return diffAnnotations(written, computeAnnotations(annotationsOf(old), written, annotations.IsSystem, false, "", ""))
}

// KeepShadowAnnotations is KeepSystemAnnotations for a shadow write, by
// writer (a user hash). One the decision refused for its kausality.io
// annotations (the object's own controller editing its controls, or a
// status write of a person's annotation) keeps those as stored too: a
// shadow write is never made to fail, but it must not do what no mode lets
// its writer do. The approvals and modes it changes are recorded as its
// writer's (kausality.io/approvals-by, kausality.io/modes-by), as on every
// write: a controller in shadow mode is no less its parent's controller
// once it is known.
func KeepShadowAnnotations(old, new *unstructured.Unstructured, d *Decision, writer string) *AnnotationChanges {
	if new == nil {
		return nil
	}
	fromStored := annotations.IsSystem
	if d != nil && (d.Category == OwnControlsRefused || d.Category == StatusAnnotationsRefused || d.OwnControlsEdited) {
		fromStored = annotations.IsKausality
	}
	stored, written := annotationsOf(old), annotationsOf(new)
	after := computeAnnotations(stored, written, fromStored, false, "", "")
	if after[annotations.Approvals] != stored[annotations.Approvals] {
		setOrDelete(after, annotations.ApprovalsBy,
			annotations.Attribute(stored[annotations.ApprovalsBy], stored[annotations.Approvals], after[annotations.Approvals], writer))
	}
	setOrDelete(after, annotations.ModesBy, annotations.RecordModeSetters(stored[annotations.ModesBy], stored, after, written, writer))
	return diffAnnotations(written, after)
}

// setOrDelete sets key in ann to value, or deletes it for "".
func setOrDelete(ann map[string]string, key, value string) {
	if value == "" {
		delete(ann, key)
	} else {
		ann[key] = value
	}
}

// withSet returns c with key set to value instead of removed.
func withSet(c *AnnotationChanges, key, value string) *AnnotationChanges {
	out := AnnotationChanges{Set: map[string]string{key: value}}
	if c != nil {
		for k, v := range c.Set {
			if k != key {
				out.Set[k] = v
			}
		}
		for _, k := range c.Remove {
			if k != key {
				out.Remove = append(out.Remove, k)
			}
		}
	}
	return &out
}

// withRemoved returns c with key removed instead of set.
func withRemoved(c *AnnotationChanges, key string) *AnnotationChanges {
	out := AnnotationChanges{Remove: []string{key}}
	if c != nil {
		for k, v := range c.Set {
			if k != key {
				if out.Set == nil {
					out.Set = map[string]string{}
				}
				out.Set[k] = v
			}
		}
		for _, k := range c.Remove {
			if k != key {
				out.Remove = append(out.Remove, k)
			}
		}
	}
	sort.Strings(out.Remove)
	return &out
}
