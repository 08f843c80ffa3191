// The orchestration of intercepted writes, in one direction, each file
// entered once: classify (classify.go, final) → authorize (package access)
// → decide (decide.go: the facts gathered by facts.go into one value, the
// pure decision package, and the loop that fetches what the decision
// still needs into a new facts value) → act (act.go, with the port to
// kube-apiserver in package upstream and the proxy's own writes in package
// sidewrites) → record (log.go). A write whose state moved under it (a
// reservation conflict, the proxy's own precondition failing) goes round
// again on fresh state, at most decision.MaxRounds times. A
// deletecollection is the same steps for each object it would delete:
// facts.go gathers the request's own facts, collection.go lists the
// objects and has decide.go decide each once, their verdicts combined by
// the pure decision.Collection, and act.go acts on the request once.

package intercept

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/access"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
	"github.com/kausality-io/kausality-proxy/internal/httpx"
)

// writeRequest is one intercepted request as it arrived: who sent it,
// the settings in force, and its classification. It never changes.
type writeRequest struct {
	w          *write
	user       user.Info
	settings   *config.Config
	controller *config.Controller
	// shadow: the writer's controller is in shadow mode; controllerName
	// is its configured name.
	shadow         bool
	controllerName string
	start          time.Time
	contentType    string
	// policies matches the write against the writer's approval policies:
	// one per request, so that deciding again reuses what it found, and
	// one evaluation budget covers the request.
	policies *policy.Matcher
	// ctx bounds the CEL evaluations of the allowance policies to the
	// request.
	ctx context.Context
	// userHashes are the user's hashes, for every decision of the request.
	userHashes *controllerid.User
	// writer is the user's long hash ("" without a user): who the records
	// of approvals and modes name.
	writer string
}

func (i *Interceptor) newWriteRequest(r *http.Request, wr *write) *writeRequest {
	u, _ := request.UserFrom(r.Context())
	settings := i.cfg.Settings()
	rq := &writeRequest{w: wr, user: u, settings: settings, controller: settings.ControllerFor(u, wr.fieldManager),
		start: i.cfg.Clock.Now(), contentType: r.Header.Get("Content-Type")}
	if rq.controller != nil {
		rq.shadow, rq.controllerName = rq.controller.Mode == annotations.ModeShadow, rq.controller.Name
	}
	if u != nil {
		hashes := controllerid.UserOf(controllerid.UserIdentifier(u.GetName(), u.GetUID()))
		rq.userHashes, rq.writer = &hashes, hashes.Long
	}
	if i.cfg.Policies != nil && u != nil {
		rq.policies = policy.NewMatcher(r.Context(), i.cfg.Policies.For(u.GetName())...)
	}
	// All of one request's allowance CEL evaluations, every round and every
	// object of a collection, draw on one budget.
	rq.ctx = allowance.WithBudget(r.Context(), allowance.NewBudget())
	return rq
}

// maxPreflightAnswer bounds what is kept of a dry run's answer; only a
// refusal is relayed, and refusals are small Status objects.
const maxPreflightAnswer = 1 << 20

// exchange is the client's side of one intercepted request: the answer
// goes to w, errors as a Status through writeError.
type exchange struct {
	w          http.ResponseWriter
	r          *http.Request
	up         upstream.Port
	writeError ErrorWriter
}

func (i *Interceptor) serveWrite(w http.ResponseWriter, r *http.Request, wr *write, next http.Handler, writeError ErrorWriter) {
	rq := i.newWriteRequest(r, wr)
	x := exchange{w: w, r: r, up: upstream.Forwarder{Next: next}, writeError: writeError}
	// Nothing is read, decoded or written for a caller who may not write.
	if err := i.access.Write(r.Context(), access.Attributes(rq.user, wr.info, wr.info.Verb), wr.info.Name); err != nil {
		i.refuseUnauthorized(x, rq, err)
		return
	}
	switch {
	case rq.shadow:
		i.serveShadow(x, rq)
	case wr.collection:
		i.serveCollection(x, rq)
	default:
		i.serveOne(x, rq)
	}
}

// refuseUnauthorized answers a write whose caller is not known to be
// allowed to make it.
func (i *Interceptor) refuseUnauthorized(x exchange, rq *writeRequest, err error) {
	f := &facts{req: rq, op: rq.w.op, namespace: rq.w.namespace, dryRun: rq.w.dryRun}
	var unavailable *access.UnavailableError
	switch {
	case rq.shadow:
		// Shadow changes nothing: kube-apiserver answers as it would
		// without the proxy.
		x.up.Send(x.w, x.r)
	case errors.As(err, &unavailable) && decision.OnFailure(i.cfg.FailurePolicy, decision.Unreachable).Forward:
		i.logError(f, "ignored-failure", err)
		x.w.Header().Add("Warning", formatWarning("kausality: no drift decision was made (--failure-policy=Ignore): "+err.Error()))
		x.up.Send(x.w, x.r)
	case errors.As(err, &unavailable):
		i.logError(f, "error", err)
		x.writeError(x.w, unavailable.Status())
	default:
		x.writeError(x.w, err)
	}
}

// serveOne serves a write of one object: decided (decide.go) and acted on
// (act.go); when its state moved under it, decided again on fresh state.
func (i *Interceptor) serveOne(x exchange, rq *writeRequest) {
	f, d, err := i.decideOne(x, rq)
	if err == nil && f.op == decision.Delete && f.old == nil {
		// Deleting what does not exist: kube-apiserver answers 404 itself.
		x.up.Send(x.w, x.r)
		return
	}
	preflighted := false
	for round := 1; ; round++ {
		var (
			refused *upstream.RefusedError
			older   *olderVersionError
		)
		switch {
		case errors.As(err, &refused):
			// The write itself would be refused the same way; nothing
			// was changed anywhere.
			refused.Answer.Replay(x.w, x.writeError)
			i.recordDecision(f, &d, "dry-run-refused")
			return
		case errors.As(err, &older):
			x.writeError(x.w, older.status)
			i.recordDecision(f, &d, "conflict")
			return
		case err != nil:
			i.fail(x, f, err)
			return
		}
		var what moved
		if what, err = i.act(x, f, &d, round, &preflighted); err != nil {
			i.fail(x, f, err)
			return
		}
		if what == nothingMoved {
			return
		}
		f, d, err = i.decideAgain(x.r, f, what, x.up)
	}
}

// serveShadow handles a write of a controller in shadow mode: the full
// decision is computed and logged, and the request goes upstream as it
// came, but for the system annotations it would change, which are kept as
// stored: no approval consumed, no denial, no warning, no side write. Whatever goes wrong while deciding is logged, never returned.
func (i *Interceptor) serveShadow(x exchange, rq *writeRequest) {
	f := facts{req: rq, op: rq.w.op, namespace: rq.w.namespace, dryRun: rq.w.dryRun}
	data, err := i.readShadowBody(x.w, x.r)
	if err != nil {
		// A body that cannot be read whole is not decided: the request
		// goes upstream as it came.
		i.logError(&f, "shadow", err)
		x.up.Send(x.w, x.r)
		return
	}
	decided, decideErr := i.shadowDecisions(x, rq, data)
	rec := httpx.NewCodeRecorder(x.w)
	if decideErr == nil && len(decided) == 1 {
		i.sendShadow(x, rec, decided[0].f, &decided[0].d, data)
	} else {
		upstream.RestoreBody(x.r, data)
		x.up.Send(rec, x.r)
	}
	outcome := "shadow:" + strconv.Itoa(rec.Code())
	if decideErr != nil {
		i.logError(&f, outcome, decideErr)
		return
	}
	for _, m := range decided {
		i.recordDecision(&m.f, &m.d, outcome)
	}
}

// keepingSystemAnnotations is r, a shadow write of the object f decided,
// with the system annotations it would change kept as stored: what only
// the proxy writes (allowances, the records of controllers and
// reservations, the trace), on which the decisions of other writes rest.
// r as it came when it changes none, or cannot be rewritten.
func (i *Interceptor) keepingSystemAnnotations(r *http.Request, f *facts, d *decision.Decision, pin bool) forwarded {
	keep := decision.KeepShadowAnnotations(f.old, f.new, d, f.req.writer)
	if keep.Empty() || f.op == decision.Delete {
		return forwarded{req: r}
	}
	// The stored values put back must be those of the version the write
	// lands on: unless the caller named a version, the write is pinned
	// to the one they come from.
	unpinned := *f
	unpinned.precondition = ""
	out, err := prepare(r, &unpinned, &decision.Decision{ChildAnnotations: keep, OnStoredVersion: pin})
	if err != nil {
		i.logError(f, "shadow", fmt.Errorf("keeping the system annotations as stored: %w", err))
		return forwarded{req: r}
	}
	return out
}

// sendShadow forwards a shadow write of one object, decided on f, whose
// body is data: with the system annotations it would change kept as
// stored. A 409 for the proxy's own precondition (its copy of the object
// lagged behind) never reaches the client: the object is read live and
// the write sent again, and after decision.MaxRounds of them without the
// precondition, since a shadow write is never made to fail.
func (i *Interceptor) sendShadow(x exchange, rec *httpx.CodeRecorder, f facts, d *decision.Decision, data []byte) {
	if f.namesOtherVersion() && !f.childLive && !decision.KeepShadowAnnotations(f.old, f.new, d, f.req.writer).Empty() {
		// The write lands on the version it names, whose values the
		// cache may not hold yet.
		if live, err := i.liveChild(x.r.Context(), &f); err == nil && live != nil {
			if next, err := withLiveChild(f, live); err == nil {
				f = next
			}
		}
	}
	for round := 1; ; round++ {
		upstream.RestoreBody(x.r, data)
		out := i.keepingSystemAnnotations(x.r, &f, d, round < decision.MaxRounds)
		answer := upstream.NewConflictCatcher(rec, out.preconditionAdded)
		x.up.Send(answer, out.req)
		if !answer.Done() {
			return
		}
		live, err := i.liveChild(x.r.Context(), &f)
		if err == nil && live != nil {
			f, err = withLiveChild(f, live)
		}
		if err != nil || live == nil {
			// Nothing better to put back: sent without the precondition.
			if err != nil {
				i.logError(&f, "shadow", fmt.Errorf("reading the object again after the proxy's own precondition failed: %w", err))
			}
			round = decision.MaxRounds - 1
		}
	}
}

// shadowDecisions decides a shadow write, or each object of a shadow
// deletecollection. Nothing that goes wrong here, a panic included, may
// keep the request from being forwarded.
func (i *Interceptor) shadowDecisions(x exchange, rq *writeRequest, data []byte) (decided []member, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			i.cfg.Log.Error("panic while deciding a shadow write", zap.Any("panic", rec), zap.Stack("stack"))
			decided, err = nil, fmt.Errorf("panic while deciding: %v", rec)
		}
	}()
	// A write kube-apiserver refuses itself is logged with its unconfirmed
	// decision.
	logged := func(f *facts, d decision.Decision, err error) (member, error) {
		var refused *upstream.RefusedError
		if errors.As(err, &refused) {
			err = nil
		}
		return member{f: *f, d: d}, err
	}
	if rq.w.collection {
		f, err := i.gatherCollection(x.r, rq, data)
		if err != nil {
			return nil, err
		}
		c, err := i.decideCollection(x.r, f, x.up, true)
		if err != nil || c.cleanup {
			return nil, err
		}
		return c.members, nil
	}
	bodyDryRun, err := deleteDryRun(x.r, rq.w, data)
	if err != nil {
		return nil, err
	}
	f, err := i.gather(x.r.Context(), rq, data, rq.w.dryRun || bodyDryRun)
	if err == nil && f.op == decision.Delete {
		f.deleteOptions, err = deleteOptionsOf(x.r, rq.w, data)
	}
	if err != nil {
		return nil, err
	}
	m, err := logged(i.decideGathered(x.r, f, x.up))
	if err != nil || m.f.op == decision.Delete && m.f.old == nil {
		return nil, err
	}
	return []member{m}, nil
}

// serveCollection serves a deletecollection: its own facts gathered
// (facts.go), each object it would delete decided as the DELETE of it,
// with the same steps as one write, the verdicts combined (collection.go),
// and the request acted on (act.go). An object whose parent moved under
// its once approval's reservation is decided again on fresh state, as one
// write is, and acted on from there.
func (i *Interceptor) serveCollection(x exchange, rq *writeRequest) {
	f, err := i.gatherCollectionOne(x.w, x.r, rq)
	if err != nil {
		i.fail(x, &f, err)
		return
	}
	c, err := i.decideCollection(x.r, f, x.up, false)
	if err != nil {
		i.fail(x, &f, err)
		return
	}
	if c.cleanup {
		x.up.Send(x.w, x.r)
		return
	}
	var acts collectionActs
	for {
		moved := i.actOnCollection(x, f, c, &acts)
		if moved < 0 {
			return
		}
		m := &c.members[moved]
		var again *facts
		again, m.d, acts.redecided = i.decideAgain(x.r, &m.f, parentMoved, x.up)
		m.f = *again
	}
}
