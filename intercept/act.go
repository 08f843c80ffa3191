// Acting on a decision: refusing with a Status, the request to forward
// (annotations written into the body, the precondition the decision rests
// on), DriftReports, and what the proxy learns from a status write it
// forwarded.

package intercept

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/notify"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
)

// learnStatus tells the settledness memory about a status write that
// kube-apiserver accepted, before the cache sees it: the status is the
// write's, the spec is the stored one (a status write never changes it,
// whatever spec its body carries).
func (i *Interceptor) learnStatus(f *facts) {
	if f.old == nil || f.new == nil {
		return
	}
	status, ok := f.new.Object["status"]
	if !ok {
		return
	}
	obj := &unstructured.Unstructured{Object: make(map[string]interface{}, len(f.old.Object))}
	for k, v := range f.old.Object {
		obj.Object[k] = v
	}
	obj.Object["status"] = status
	i.settled.Observe(obj)
}

// report sends the DriftReport the decision calls for, once the outcome is
// known: after a denial, or after the upstream accepted the write (a
// reserved once approval is only really used then).
func (i *Interceptor) report(f *facts, d *decision.Decision) {
	if i.cfg.Drifts == nil {
		return
	}
	i.cfg.Drifts.Observe(d, notify.Write{Operation: f.op, OldObject: f.old, NewObject: f.new,
		Changes: f.changes, User: f.req.user, FieldManager: f.req.w.fieldManager, DryRun: f.dryRun}, f.parent.obj)
}

// deny refuses the write with the decision's Status.
func (i *Interceptor) deny(w http.ResponseWriter, f *facts, d *decision.Decision, writeError ErrorWriter) {
	for _, warning := range d.Warnings {
		w.Header().Add("Warning", formatWarning(warning))
	}
	err := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: d.Message,
		Details: &metav1.StatusDetails{
			Name:   d.Child.Name,
			Group:  f.req.w.gvr.Group,
			Kind:   f.req.w.gvr.Resource,
			Causes: d.Causes,
		},
	}}
	i.recordDecision(f, d, "denied")
	writeError(w, err)
	if !f.dryRun {
		i.report(f, d)
	}
}

// forwarded is the request to forward for a decided write.
type forwarded struct {
	req *http.Request
	// preconditionAdded: the proxy added the resourceVersion the decision
	// rests on, which the client did not send.
	preconditionAdded bool
}

// prepare returns the request to forward: unchanged, or with the child
// annotation changes the decision asks for written into its body, and the
// resourceVersion the decision was confirmed on as a precondition.
func prepare(r *http.Request, f *facts, d *decision.Decision) (forwarded, error) {
	wr := f.req.w
	// A status write carries annotations too: kube-apiserver keeps them
	// for most built-in kinds.
	annotate := !d.ChildAnnotations.Empty() && f.new != nil && (wr.sub == mainResource || wr.sub == statusSubresource)
	precondition := f.precondition != "" && (wr.sub == mainResource || wr.sub == scaleSubresource) && f.op == decision.Update
	if !annotate && !precondition {
		return forwarded{req: r}, nil
	}
	var (
		data        = f.data
		contentType = r.Header.Get("Content-Type")
		added       bool
		err         error
	)
	if wr.verb == "patch" {
		if annotate {
			data, err = patch.AddAnnotations(f.patchType, data, d.ChildAnnotations.Pointers(), f.new)
			if errors.Is(err, patch.ErrNotRewritable) {
				// Forwarding it would remove every kausality.io annotation,
				// the object's own mode and the trace included.
				return forwarded{}, apierrors.NewInvalid(f.kind.GroupKind(), wr.info.Name, field.ErrorList{field.Forbidden(
					field.NewPath("metadata", "annotations"),
					"kausality-proxy: this patch replaces metadata.annotations as a whole, which would drop the kausality.io annotations the proxy keeps on this object; patch individual annotation keys instead")})
			}
		}
		if err == nil && precondition {
			data, added, err = patch.WithResourceVersion(f.patchType, data, f.precondition)
		}
	} else {
		// The client's object, never the dry run's answer: what is
		// forwarded is what the client sent, plus the proxy's own changes.
		obj := f.sent.DeepCopy()
		if annotate {
			d.ChildAnnotations.Apply(obj)
		}
		if precondition && obj.GetResourceVersion() == "" {
			obj.SetResourceVersion(f.precondition)
			added = true
		}
		data, contentType, err = body.Encode(obj, f.format)
	}
	if err != nil {
		return forwarded{}, err
	}
	out := r.Clone(r.Context())
	restoreBody(out, data)
	out.Header.Set("Content-Type", contentType)
	return forwarded{req: out, preconditionAdded: added}, nil
}

// afterSuccess is what follows a write kube-apiserver applied: what a
// status write teaches, the parent writes, the trace of a /scale write,
// and the DriftReport.
func (i *Interceptor) afterSuccess(f *facts, d *decision.Decision) {
	if f.req.w.sub == statusSubresource {
		i.learnStatus(f)
	}
	i.sideWrites(d.ParentWrites)
	i.traceScaled(f, d)
	i.report(f, d)
}

// formatWarning renders an RFC 7234 warning as kube-apiserver does.
func formatWarning(text string) string {
	text = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, text)
	// kubectl unquotes the text before it prints it: escape sequences
	// taken from annotations or names must arrive escaped.
	return `299 - ` + strconv.Quote(annotations.Printable(text))
}
