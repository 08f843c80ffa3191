// Acting on a decision: refusing with a Status, writing annotations into
// the body, the dry run before a once approval is reserved, DriftReports,
// and what the proxy learns from a status write it forwarded.

package intercept

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
	"github.com/kausality-io/kausality-proxy/report"
)

// learnStatus tells the settledness memory about a status write that
// kube-apiserver accepted, before the cache sees it: the status is the
// write's, the spec is the stored one (a status write never changes it,
// whatever spec its body carries).
func (i *Interceptor) learnStatus(p *pending) {
	if p.old == nil || p.new == nil {
		return
	}
	status, ok := p.new.Object["status"]
	if !ok {
		return
	}
	obj := &unstructured.Unstructured{Object: make(map[string]interface{}, len(p.old.Object))}
	for k, v := range p.old.Object {
		obj.Object[k] = v
	}
	obj.Object["status"] = status
	i.settled.Observe(obj)
}

// preflight sends out as a server-side dry run and reports whether
// kube-apiserver would accept it. When it would not, its answer has been
// written to w and nothing was changed anywhere.
func (i *Interceptor) preflight(w http.ResponseWriter, out *http.Request, forward http.Handler, writeError ErrorWriter) bool {
	data, err := readAll(out)
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return false
	}
	dry, err := dryRunOf(out, data)
	if err != nil {
		writeError(w, err)
		return false
	}
	rec := newBufferedResponse(maxPreflightAnswer)
	forward.ServeHTTP(rec, dry)
	if rec.code >= 200 && rec.code < 300 {
		return true
	}
	rec.replay(w, writeError)
	return false
}

// readAll reads a replayable request body without consuming it.
func readAll(r *http.Request) ([]byte, error) {
	if r.GetBody == nil {
		return nil, nil
	}
	b, err := r.GetBody()
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }()
	return io.ReadAll(b)
}

// report sends the DriftReport the decision calls for, once the outcome is
// known: after a denial, or after the upstream accepted the write (a
// reserved once approval is only really used then).
func (i *Interceptor) report(r *http.Request, p *pending, d *decision.Decision) {
	if i.cfg.Drifts == nil {
		return
	}
	u, _ := request.UserFrom(r.Context())
	i.cfg.Drifts.Observe(d, report.Write{Operation: p.op, OldObject: p.old, NewObject: p.new,
		Changes: p.changes, User: u, FieldManager: p.w.fieldManager, DryRun: p.w.dryRun}, p.parent)
}

func (i *Interceptor) deny(w http.ResponseWriter, r *http.Request, p *pending, d *decision.Decision, writeError ErrorWriter) {
	p.outcome = "denied"
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
			Group:  p.w.gvr.Group,
			Kind:   p.w.gvr.Resource,
			Causes: d.Causes,
		},
	}}
	i.recordDecision(p, d)
	writeError(w, err)
	if !p.w.dryRun {
		i.report(r, p, d)
	}
}

// mutate returns the request to forward: unchanged, or with the child
// annotation changes the decision asks for written into its body.
func (i *Interceptor) mutate(r *http.Request, p *pending, d *decision.Decision) (*http.Request, error) {
	// A status write carries annotations too: kube-apiserver keeps them
	// for most built-in kinds.
	annotate := !d.ChildAnnotations.Empty() && p.new != nil && (p.w.sub == mainResource || p.w.sub == statusSubresource)
	precondition := p.precondition != "" && p.w.sub == mainResource && p.op == decision.Update
	if !annotate && !precondition {
		return r, nil
	}
	var (
		data        = p.data
		contentType = r.Header.Get("Content-Type")
		err         error
	)
	if p.w.verb == "patch" {
		if annotate {
			data, err = patch.AddAnnotations(p.patchTy, data, d.ChildAnnotations.Pointers(), p.new)
			if errors.Is(err, patch.ErrNotRewritable) {
				// Forwarding it would remove every kausality.io annotation,
				// the object's own mode and the trace included.
				return nil, apierrors.NewInvalid(p.kind.GroupKind(), p.w.info.Name, field.ErrorList{field.Forbidden(
					field.NewPath("metadata", "annotations"),
					"kausality-proxy: this patch replaces metadata.annotations as a whole, which would drop the kausality.io annotations the proxy keeps on this object; patch individual annotation keys instead")})
			}
		}
		if err == nil && precondition {
			data, _, err = patch.WithResourceVersion(p.patchTy, data, p.precondition)
		}
	} else {
		// The client's object, never the dry run's answer: what is
		// forwarded is what the client sent, plus the proxy's own changes.
		obj := p.sent.DeepCopy()
		if annotate {
			d.ChildAnnotations.Apply(obj)
		}
		if precondition && obj.GetResourceVersion() == "" {
			obj.SetResourceVersion(p.precondition)
		}
		data, contentType, err = body.Encode(obj, p.format)
	}
	if err != nil {
		return nil, err
	}
	out := r.Clone(r.Context())
	restoreBody(out, data)
	out.Header.Set("Content-Type", contentType)
	return out, nil
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

// maxPreflightAnswer bounds what is kept of a dry run's answer; only a
// refusal is relayed, and refusals are small Status objects.
const maxPreflightAnswer = 1 << 20

// bufferedResponse holds an answer that may or may not be relayed.
type bufferedResponse struct {
	header    http.Header
	code      int
	body      bytes.Buffer
	limit     int
	truncated bool
}

func newBufferedResponse(limit int) *bufferedResponse {
	return &bufferedResponse{header: http.Header{}, limit: limit}
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	// An informational 1xx is not the answer; the final status follows.
	if b.code == 0 && (code < 100 || code >= 200) {
		b.code = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	if room := b.limit - b.body.Len(); room < len(p) {
		b.truncated = true
		b.body.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.body.Write(p)
}

// replay writes the held answer to w, or a Status saying what happened when
// it was too large to hold.
func (b *bufferedResponse) replay(w http.ResponseWriter, writeError ErrorWriter) {
	if b.truncated || b.code == 0 {
		code := int32(http.StatusBadGateway)
		if b.code >= 400 && b.code <= 599 {
			code = int32(b.code)
		}
		writeError(w, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code,
			Message: fmt.Sprintf("kube-apiserver refused a dry run of this write with %d, and its answer was too large to relay; nothing was written", b.code)}})
		return
	}
	for k, vs := range b.header {
		if strings.EqualFold(k, "Content-Length") {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(b.code)
	_, _ = w.Write(b.body.Bytes())
}
