// The orchestration of one intercepted write, in one direction: classify
// (classify.go) → gather the facts (facts.go) → decide (the pure decision
// package) → act (act.go, parentwrites.go). Policy lives in the decision
// package; this file only carries it out.

package intercept

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
	"github.com/kausality-io/kausality-proxy/intercept/reservations"
	"github.com/kausality-io/kausality-proxy/internal/httpx"
)

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// maxReservationAttempts bounds the re-decide loop when reserving a once
// approval races another writer of the parent.
const maxReservationAttempts = 3

// pending is the state of one intercepted write.
type pending struct {
	// w is the classification: final, never rewritten.
	w *write
	// op is the effective operation: an apply or a PUT of an object that
	// does not exist is a create.
	op decision.Operation
	// namespace is the object's: the request's, or "" for cluster-scoped
	// resources (kube-apiserver's request info names a Namespace object's
	// own name as its namespace).
	namespace  string
	settings   *config.Config
	controller *config.Controller
	clock      clock.PassiveClock
	start      time.Time
	kind       schema.GroupVersionKind
	data       []byte
	format     body.Format
	patchTy    types.PatchType
	old        *unstructured.Unstructured
	// oldIsMetadata: old is the cached metadata of the stored child, not
	// the whole object (objects.Store caches children so).
	oldIsMetadata bool
	new           *unstructured.Unstructured
	changed       bool
	changes       []desired.Change
	// shownChanges are the changes messages may show: nil until a drift
	// verdict asks, then changes, or changes without their values.
	shownChanges []desired.Change
	parent       *unstructured.Unstructured
	parentSource string
	// formerParent is the controller owner the write moves the child away
	// from (removing or re-pointing the controller ownerReference).
	formerParent       *unstructured.Unstructured
	formerParentSource string
	// parentHidden, formerParentHidden: the caller may not read that
	// parent, so messages do not show it (known once
	// parentsVisibilityKnown).
	parentHidden, formerParentHidden bool
	parentsVisibilityKnown           bool
	// warnings are about facts that could not be read but were not needed.
	warnings []string
	// sent is the object the client sent (creates and updates).
	sent *unstructured.Unstructured
	// confirmed: old and new are kube-apiserver's (a live read and a dry
	// run), and precondition is the resourceVersion the write was decided
	// on, which the forwarded write must still find.
	confirmed    bool
	precondition string
	// policies matches the write against the writer's approval policies:
	// one per request, so that deciding again reuses what it found, and
	// one evaluation budget covers the request.
	policies *policy.Matcher
	// reservation records the once approval reserved for the write.
	reservation *reservations.Record
	nsMode      string
	outcome     string // what finally happened, for the decision line
}

func (i *Interceptor) serveWrite(w http.ResponseWriter, r *http.Request, wr *write, forward http.Handler, writeError ErrorWriter) {
	p := &pending{w: wr, op: wr.op, namespace: wr.namespace, clock: i.cfg.Clock, start: i.cfg.Clock.Now(), settings: i.cfg.Settings()}
	u, _ := request.UserFrom(r.Context())
	p.controller = p.settings.ControllerFor(u, wr.fieldManager)
	fail := func(err error) {
		p.outcome = "error"
		i.logError(r, p, err)
		writeError(w, err)
	}

	// Nothing is read, decoded or written for a caller who may not write.
	if err := i.authorizeWrite(r.Context(), u, wr); err != nil {
		i.refuseUnauthorized(w, r, p, err, forward, writeError)
		return
	}
	if wr.collection {
		i.serveCollection(w, r, p, forward, writeError)
		return
	}

	if p.shadow() {
		i.serveShadow(w, r, p, forward)
		return
	}

	data, err := i.readInterceptedBody(w, r)
	if err != nil {
		fail(err)
		return
	}
	p.data = data
	bodyDryRun, err := deleteDryRun(r, wr, data)
	if err != nil {
		fail(err)
		return
	}
	if bodyDryRun && !wr.dryRun {
		// kube-apiserver reads a delete's options from its body: a dry run
		// there is as much a dry run as one in the query, and must consume
		// nothing.
		dry := *wr
		dry.dryRun = true
		wr, p.w = &dry, &dry
	}

	if err := i.load(r, p); err != nil {
		if !i.forwardIgnored(w, r, p, err, forward) {
			fail(err)
		}
		return
	}
	if p.skip() {
		forward.ServeHTTP(w, r)
		return
	}

	d, proceed := i.decideAndReserve(w, r, p, forward, writeError)
	if !proceed {
		return
	}
	reserved := d.ConsumeOnce && d.ApprovalsUpdate != nil && !wr.dryRun

	out, err := i.mutate(r, p, &d)
	if err != nil {
		if reserved {
			i.giveBack(reservedWriteOf(p, d.ApprovalsUpdate), "the write could not be prepared")
		}
		fail(err)
		return
	}
	for _, warning := range d.Warnings {
		w.Header().Add("Warning", formatWarning(warning))
	}
	if wr.dryRun {
		w.Header().Add("Warning", formatWarning(fmt.Sprintf("kausality dry-run: %s (%s): %s", d.Result, d.Category, d.Reason)))
	}

	rec := httpx.NewCodeRecorder(w)
	if reserved {
		// Settled before the client hears the answer: a client that
		// retries at once finds the approval back when it is put back.
		reservation := reservedWriteOf(p, d.ApprovalsUpdate)
		rec.BeforeHeader = func(code int) { i.settleReservation(reservation, code) }
	}
	forward.ServeHTTP(rec, out)
	if reserved && rec.Code() == 0 {
		// No answer was written at all: it does not say either.
		i.settleReservation(reservedWriteOf(p, d.ApprovalsUpdate), 0)
	}
	succeeded := rec.Code() >= 200 && rec.Code() < 300
	p.outcome = "forwarded:" + strconv.Itoa(rec.Code())
	if succeeded && !wr.dryRun {
		if wr.sub == statusSubresource {
			i.learnStatus(p)
		}
		i.sideWrites(d.ParentWrites)
		i.traceScaled(p, &d)
		i.report(r, p, &d)
	}
	i.recordDecision(p, &d)
}

// refuseUnauthorized answers a write whose caller is not known to be
// allowed to make it.
func (i *Interceptor) refuseUnauthorized(w http.ResponseWriter, r *http.Request, p *pending, err error, forward http.Handler, writeError ErrorWriter) {
	var unavailable *authorizationUnavailableError
	switch {
	case p.shadow():
		// Shadow changes nothing: kube-apiserver answers as it would
		// without the proxy.
		p.outcome = "shadow:not-authorized"
		forward.ServeHTTP(w, r)
	case errors.As(err, &unavailable) && decision.OnFailure(i.cfg.FailurePolicy, decision.Unreachable).Forward:
		p.outcome = "ignored-failure"
		i.logError(r, p, err)
		w.Header().Add("Warning", formatWarning("kausality: no drift decision was made (--failure-policy=Ignore): "+err.Error()))
		forward.ServeHTTP(w, r)
	case errors.As(err, &unavailable):
		p.outcome = "error"
		i.logError(r, p, err)
		writeError(w, unavailable.status())
	default:
		p.outcome = "not-authorized"
		writeError(w, err)
	}
}

// decideAndReserve decides the write and, when it consumes a once
// approval, reserves the approval on the parent. It reports false when it
// has answered the request itself (a denial, an error, a refused dry run).
func (i *Interceptor) decideAndReserve(w http.ResponseWriter, r *http.Request, p *pending, forward http.Handler, writeError ErrorWriter) (decision.Decision, bool) {
	wr := p.w
	fail := func(err error) {
		p.outcome = "error"
		i.logError(r, p, err)
		writeError(w, err)
	}
	preflighted := false
	for attempt := 1; ; attempt++ {
		d, err := i.decideConfirmed(r, p, forward)
		var refused *refusedByServer
		if errors.As(err, &refused) {
			// The write itself would be refused the same way; nothing
			// was changed anywhere.
			p.outcome = "dry-run-refused"
			refused.answer.replay(w, writeError)
			i.recordDecision(p, &d)
			return d, false
		}
		if err != nil {
			if !i.forwardIgnored(w, r, p, err, forward) {
				fail(err)
			}
			return d, false
		}
		if d.Result == decision.Deny {
			i.deny(w, r, p, &d, writeError)
			return d, false
		}
		if !d.ConsumeOnce || d.ApprovalsUpdate == nil || wr.dryRun {
			return d, true
		}
		// A once approval is written off the parent before the write is
		// forwarded. That is a write with the proxy's credentials, so it is
		// made only for a write kube-apiserver is going to accept: a dry
		// run as the caller answers that first.
		if !preflighted {
			out, err := i.mutate(r, p, &d)
			if err != nil {
				fail(err)
				return d, false
			}
			if !i.preflight(w, out, forward, writeError) {
				p.outcome = "dry-run-refused"
				i.recordDecision(p, &d)
				return d, false
			}
			preflighted = true
		}
		err = i.reserve(r.Context(), p, d.ApprovalsUpdate)
		if err == nil {
			return d, true
		}
		switch decision.OnReservationError(reservationError(err), attempt, maxReservationAttempts) {
		case decision.RefuseRetryable:
			fail(apierrors.NewConflict(schema.GroupResource{Group: wr.gvr.Group, Resource: wr.gvr.Resource}, wr.info.Name,
				fmt.Errorf("could not reserve the once approval on %s: the parent kept changing (%v); retry the write", d.ApprovalsUpdate.Target, err)))
			return d, false
		case decision.RefuseAsFailure:
			err = i.unresolvable(fmt.Errorf("reserving the once approval on %s: %w", d.ApprovalsUpdate.Target, err))
			if !i.forwardIgnored(w, r, p, err, forward) {
				fail(err)
			}
			return d, false
		}
		// Someone else changed the parent (maybe took the approval), or
		// deleted it: decide again from a fresh snapshot.
		if err := i.refreshParent(r.Context(), p); err != nil {
			if !i.forwardIgnored(w, r, p, err, forward) {
				fail(err)
			}
			return d, false
		}
	}
}

// decideConfirmed decides, and confirms a drift verdict made from the cache.
// The controller reacts to the same watch event as our cache; a cache a
// beat behind shows the parent as reconciled when its spec has just
// changed. Drift is rare, so it is confirmed with one live read and decided
// again from that single fresh snapshot.
func (i *Interceptor) decideConfirmed(r *http.Request, p *pending, forward http.Handler) (decision.Decision, error) {
	d := i.decide(r, p)
	if p.oldIsMetadata && !d.StandsOnMetadata(p.op) {
		if err := i.reloadStored(r, p); err != nil {
			return d, err
		}
		d = i.decide(r, p)
	}
	if d.RecheckController && p.w.sub == mainResource {
		if err := i.reloadStored(r, p); err != nil {
			return d, err
		}
		d = i.decide(r, p)
	}
	if d.ConfirmWithServer && p.w.sub == mainResource {
		if err := i.confirmWithServer(r, p, forward); err != nil {
			return d, err
		}
		d = i.decide(r, p)
	}
	if decision.NeedsConfirmation(&d, p.parentSource == string(objects.FromCache)) {
		if err := i.refreshParent(r.Context(), p); err != nil {
			return d, err
		}
		d = i.decide(r, p)
	}
	if (d.Drift || d.Result == decision.Deny) && p.shownChanges == nil && len(p.changes) > 0 {
		// Drift and denial messages (frozen, rejected) list the changed
		// fields with their stored and new values. The stored ones are
		// shown only to a caller who may read the object, and never for a
		// Secret.
		p.shownChanges = p.changes
		u, _ := request.UserFrom(r.Context())
		if p.kind.GroupKind() == (schema.GroupKind{Kind: "Secret"}) || !i.mayRead(r.Context(), u, p.w) {
			p.shownChanges = withoutValues(p.changes)
			d = i.decide(r, p)
		}
	}
	if (d.Result == decision.Deny || len(d.Warnings) > 0) && !p.parentsVisibilityKnown {
		p.parentsVisibilityKnown = true
		u, _ := request.UserFrom(r.Context())
		p.parentHidden = p.parent != nil && !i.mayReadParent(r.Context(), u, p.parent)
		p.formerParentHidden = p.formerParent != nil && !i.mayReadParent(r.Context(), u, p.formerParent)
		if p.parentHidden || p.formerParentHidden {
			d = i.decide(r, p)
		}
	}
	return d, nil
}

// withoutValues keeps only the paths of changes.
func withoutValues(changes []desired.Change) []desired.Change {
	out := make([]desired.Change, len(changes))
	for i, c := range changes {
		out[i] = desired.Change{Path: c.Path}
	}
	return out
}

// serveShadow handles a write of a controller in shadow mode: the full
// decision is computed and logged, and the request goes upstream exactly as
// it came: no annotation, no approval consumed, no denial, no warning, no
// side write. Whatever goes wrong while deciding is logged, never returned.
func (i *Interceptor) serveShadow(w http.ResponseWriter, r *http.Request, p *pending, forward http.Handler) {
	p.outcome = "shadow"
	data, ok := i.readShadowBody(w, r, p, forward)
	if !ok {
		return
	}
	d, decided, err := i.shadowDecision(r, p, data, forward)
	restoreBody(r, data)
	rec := httpx.NewCodeRecorder(w)
	forward.ServeHTTP(rec, r)
	p.outcome = "shadow:" + strconv.Itoa(rec.Code())
	switch {
	case err != nil:
		i.logError(r, p, err)
	case decided:
		i.recordDecision(p, &d)
	}
}

// shadowDecision decides a shadow write. Nothing that goes wrong here,
// a panic included, may keep the request from being forwarded.
func (i *Interceptor) shadowDecision(r *http.Request, p *pending, data []byte, forward http.Handler) (d decision.Decision, decided bool, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			i.cfg.Log.Error("panic while deciding a shadow write", zap.Any("panic", rec), zap.Stack("stack"))
			err = fmt.Errorf("panic while deciding: %v", rec)
		}
	}()
	p.data = data
	if err := i.load(r, p); err != nil {
		return d, false, err
	}
	if p.skip() {
		return d, false, nil
	}
	d, err = i.decideConfirmed(r, p, forward)
	var refused *refusedByServer
	if errors.As(err, &refused) {
		// kube-apiserver refuses the write itself: the unconfirmed
		// decision is what is logged.
		return d, true, nil
	}
	return d, err == nil, err
}

// elapsed is how long the write has taken so far.
func (p *pending) elapsed() time.Duration { return p.clock.Since(p.start) }

// shadow reports whether the writer's controller is in shadow mode.
func (p *pending) shadow() bool {
	return p.controller != nil && p.controller.Mode == annotations.ModeShadow
}

// controllerName is the configured name of the writer's controller.
func (p *pending) controllerName() string {
	if p.controller == nil {
		return ""
	}
	return p.controller.Name
}

// skip reports writes that turned out to need no decision.
func (p *pending) skip() bool {
	// Deleting what does not exist: the upstream answers 404 itself.
	return p.op == decision.Delete && p.old == nil
}
