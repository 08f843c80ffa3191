// Confirming a verdict on what kube-apiserver will store: the proxy's own
// computation (the cached object with the write applied) is the fast path,
// but a cache a beat behind, defaulting, stringData folded into data,
// canonical quantities and server-side apply make it differ from what
// kube-apiserver stores. Verdicts that rest on it (drift, and "no desired
// change" under a parent that would hold a change) are decided again on a
// live read of the object and a server-side dry run of the same write.

package intercept

import (
	"encoding/json"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// maxConfirmAnswer bounds what is kept of a confirming dry run's answer:
// the object kube-apiserver would store.
const maxConfirmAnswer = 16 << 20

// refusedByServer is a dry run kube-apiserver refused: the write itself
// would be refused the same way, and its answer is relayed.
type refusedByServer struct{ answer *bufferedResponse }

func (e *refusedByServer) Error() string {
	return fmt.Sprintf("kube-apiserver refused a dry run of this write with %d", e.answer.code)
}

// dryRunOf is req as a server-side dry run, with body data. The dryRun
// goes where kube-apiserver reads it: a DELETE with a body takes its
// options from the body alone (a dryRun in the query next to a body is
// ignored, and the "dry run" would delete).
func dryRunOf(req *http.Request, data []byte) (*http.Request, error) {
	dry := req.Clone(req.Context())
	dry.RequestURI = ""
	if req.Method == http.MethodDelete && len(data) > 0 {
		opts, err := deleteOptionsOf(req, data)
		if err != nil {
			return nil, err
		}
		opts.DryRun = []string{metav1.DryRunAll}
		opts.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "DeleteOptions"}
		if data, err = json.Marshal(opts); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		dry.Header.Set("Content-Type", "application/json")
	} else {
		q := dry.URL.Query()
		q.Set("dryRun", metav1.DryRunAll)
		dry.URL.RawQuery = q.Encode()
	}
	restoreBody(dry, data)
	return dry, nil
}

// confirmWithServer replaces the computed facts of an update with
// kube-apiserver's: the stored object read live, and the object the same
// request would store (a dry run as the caller). The forwarded write then
// carries the live resourceVersion as a precondition, so it cannot land on
// a state other than the one it was decided on.
func (i *Interceptor) confirmWithServer(r *http.Request, p *pending, forward http.Handler) error {
	live, err := i.cfg.Objects.GetLive(r.Context(), p.w.gvr, p.namespace, p.w.info.Name)
	if apierrors.IsNotFound(err) {
		// Deleted meanwhile: kube-apiserver answers the write itself.
		p.confirmed = true
		return nil
	}
	if err != nil {
		return i.unresolvable(fmt.Errorf("reading the stored %s %s: %w", p.kind.Kind, qualifiedName(p.namespace, p.w.info.Name), err))
	}
	dry, err := dryRunOf(r, p.data)
	if err != nil {
		return err
	}
	// The answer is read here, whatever the caller accepts.
	dry.Header.Set("Accept", "application/json")
	answer := newBufferedResponse(maxConfirmAnswer)
	forward.ServeHTTP(answer, dry)
	if answer.code < 200 || answer.code > 299 {
		return &refusedByServer{answer}
	}
	if answer.truncated {
		return i.unresolvable(fmt.Errorf("kube-apiserver's dry run of this write answered more than %d bytes", maxConfirmAnswer))
	}
	stored := &unstructured.Unstructured{}
	if err := stored.UnmarshalJSON(answer.body.Bytes()); err != nil {
		return i.unresolvable(fmt.Errorf("reading kube-apiserver's dry run of this write: %w", err))
	}
	p.old, p.new = live, stored
	p.changed, p.changes = desiredChange(p.op, live, stored)
	p.shownChanges = nil
	p.confirmed = true
	p.precondition = live.GetResourceVersion()
	return nil
}
