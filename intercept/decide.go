// Deciding on a facts value: the pure decision package's input built from
// it, under the parent the write ends up with and under the one it moves
// the child away from, and the loop that fetches what the decision still
// asks for (decision.Needs) into a new facts value and decides again.

package intercept

import (
	"context"
	"net/http"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
)

// maxFetchRounds bounds the fetches of one decision; decision.Needs asks
// for each fact at most once, so it is never reached in practice.
const maxFetchRounds = 4

// decideOnFacts decides f, fetching what the decision still needs into a
// new facts value and deciding again until it needs nothing more.
func (i *Interceptor) decideOnFacts(r *http.Request, f facts, up upstream.Port) (facts, decision.Decision, error) {
	for fetches := 0; ; fetches++ {
		d := i.decide(&f)
		need := decision.Needs(&d, f.held())
		if need.None() || fetches == maxFetchRounds {
			return f, d, nil
		}
		next, err := i.refetch(r, f, need, up)
		if err != nil {
			return f, d, err
		}
		f = next
	}
}

// decide decides f. It reads nothing: every fact it uses is in f.
func (i *Interceptor) decide(f *facts) decision.Decision {
	in := i.input(f, &f.parent)
	d := decision.Decide(in)
	if f.formerParent.obj != nil {
		d = decision.UnderBoth(d, decision.Decide(i.input(f, &f.formerParent)))
	}
	d = decision.DecideAllowances(f.req.context(), d, in, i.allowanceInputs(f))
	if len(f.warnings) > 0 {
		d.Warnings = append(append([]string(nil), f.warnings...), d.Warnings...)
	}
	return d
}

// input is the decision's input for the write under parent.
func (i *Interceptor) input(f *facts, parent *parentFacts) decision.Input {
	rq := f.req
	in := decision.Input{
		Operation:         f.op,
		OldObject:         f.old,
		NewObject:         f.new,
		DesiredChanged:    f.changed,
		Changes:           f.shownChanges(),
		StatusWrite:       rq.w.sub == statusSubresource,
		ScaleWrite:        rq.w.sub == scaleSubresource,
		Parent:            parent.obj,
		User:              rq.user,
		FieldManager:      rq.w.fieldManager,
		Mode:              decision.ModeInputs{Namespace: f.nsMode, Default: i.cfg.DefaultMode},
		DryRun:            f.dryRun,
		Confirmed:         f.confirmed,
		NoChangeIsCertain: f.noChangeIsCertain(),
		StaleUpdate:       f.staleUpdate(),
		Now:               i.cfg.Clock.Now(),
		Lifecycle:         rq.settings.Lifecycle,
		UngatedKinds:      rq.settings.UngatedChildKinds,
		ParentHidden:      parent.obj != nil && parent.hidden,
		OwnedRevisions:    parent.revisions,
		Settle:            parent.settle,
	}
	if parent.obj != nil {
		in.Policies = rq.policies
	}
	in.WrittenPaths, in.WrittenCoarse = i.writtenPaths(f)
	if rq.controller != nil && rq.controller.Mode != annotations.ModeShadow {
		in.Mode.Controller = string(rq.controller.Mode)
	}
	in.Child = decision.ObjectRef{APIVersion: f.kind.GroupVersion().String(), Kind: f.kind.Kind, Namespace: f.namespace, Name: rq.w.info.Name}
	if in.Child.Name == "" && f.new != nil {
		in.Child.Name = f.new.GetName()
		if in.Child.Name == "" {
			in.Child.Name = f.new.GetGenerateName()
		}
	}
	return in
}

// shownChanges are the changes messages may show: with their stored and
// new values only to a caller who may read the object, and never for a
// Secret.
func (f *facts) shownChanges() []desired.Change {
	if !f.childAccessKnown || f.mayReadChild && f.kind.GroupKind() != (schema.GroupKind{Kind: "Secret"}) {
		return f.changes
	}
	out := make([]desired.Change, len(f.changes))
	for i, c := range f.changes {
		out[i] = desired.Change{Path: c.Path}
	}
	return out
}

// held says which of f's facts are first-hand, for decision.Needs.
func (f *facts) held() decision.Held {
	sub := f.req.w.sub
	return decision.Held{
		Confirmable:       (sub == mainResource || sub == scaleSubresource) && !f.confirmed,
		MainResource:      sub == mainResource,
		ChildLive:         f.childLive,
		ParentFromCache:   f.parent.source == "cache",
		ChildAccessKnown:  f.childAccessKnown,
		ParentAccessKnown: f.parentAccessKnown,
		HasChanges:        len(f.changes) > 0,
		ChildMetadataOnly: f.oldIsMetadata,
		Operation:         f.op,
	}
}

// noChangeIsCertain: a stale stored object cannot hide a desired-state
// change of this write (see decision.Input.NoChangeIsCertain).
func (f *facts) noChangeIsCertain() bool {
	wr := f.req.w
	switch {
	case wr.verb == "patch" && wr.sub == mainResource:
		return patch.OnlyMetadata(f.patchType, f.data)
	case wr.verb == "update" && wr.sub == mainResource && f.sent != nil && f.old != nil:
		return f.sent.GetResourceVersion() != "" && f.sent.GetResourceVersion() == f.old.GetResourceVersion()
	}
	return false
}

// staleUpdate: a PUT of a copy older than the stored object, which
// kube-apiserver refuses with a conflict. The stored object was read live
// when the cache did not have the version the PUT names (storedObject).
func (f *facts) staleUpdate() bool {
	wr := f.req.w
	if wr.verb != "update" || wr.sub != mainResource || f.sent == nil || f.old == nil {
		return false
	}
	rv := f.sent.GetResourceVersion()
	return rv != "" && rv != f.old.GetResourceVersion()
}

// allowanceInputs are the facts of f the allowance check needs.
func (i *Interceptor) allowanceInputs(f *facts) decision.AllowanceInputs {
	var a decision.AllowanceInputs
	if f.nsAllowanceMode != "" {
		a.NamespaceAnnotations = map[string]string{annotations.AllowanceMode: f.nsAllowanceMode}
	}
	if i.cfg.AllowancePolicies != nil && allowancesChecked(f, a.NamespaceAnnotations) {
		a.Policies = i.cfg.AllowancePolicies.All()
	}
	if f.old != nil && f.old.GetAnnotations()[annotations.Allowances] != "" {
		if _, r, ok := i.settled.Record(f.old.GetUID()); ok {
			a.ObjectSettledGeneration = r.SettledAt
		}
	}
	return a
}

// allowancesChecked reports whether an allowance mode is on where the
// allowance check looks for it: the stored object's (allowances it
// initiates or prunes) or the parent's (allowances its children use),
// else the namespace's. With every mode off the policies are not read.
func allowancesChecked(f *facts, namespace map[string]string) bool {
	for _, obj := range []*unstructured.Unstructured{f.old, f.parent.obj} {
		var ann map[string]string
		if obj != nil {
			ann = obj.GetAnnotations()
		}
		if mode, _ := allowance.ModeOf(ann, namespace); mode != allowance.ModeOff {
			return true
		}
	}
	return false
}

// context is the request's context, or the background for steps made
// without one.
func (rq *writeRequest) context() context.Context {
	if rq.ctx == nil {
		return context.Background()
	}
	return rq.ctx
}

// writtenPaths are the desired-state paths a merge patch of a child known
// only by its metadata can change, for the allowance check (nil: the
// check reads them from the stored and the new object).
func (i *Interceptor) writtenPaths(f *facts) ([]string, bool) {
	wr := f.req.w
	if !f.oldIsMetadata || f.childLive || wr.verb != "patch" || wr.sub != mainResource || f.op != decision.Update ||
		f.patchType != types.MergePatchType && f.patchType != types.StrategicMergePatchType || i.cfg.AllowancePolicies == nil {
		return nil, false
	}
	var ns map[string]string
	if f.nsAllowanceMode != "" {
		ns = map[string]string{annotations.AllowanceMode: f.nsAllowanceMode}
	}
	if !allowancesChecked(f, ns) {
		return nil, false
	}
	paths, coarse, ok := allowance.WrittenPaths(f.data, f.patchType == types.StrategicMergePatchType)
	if !ok {
		return nil, false
	}
	if paths == nil {
		paths = []string{}
	}
	return paths, coarse
}
