package decision

import (
	"strconv"
	"strings"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// recordApprovalWriters adds the writer of the approvals an allowed write
// adds to the object's kausality.io/approvals-by, and reports whether the
// record changes. It is read from the copy the write was decided on, so a
// write that changes it lands on that copy's version: decided on a copy
// that missed an entry, it would give that entry to this writer.
func (x *decider) recordApprovalWriters() bool {
	in, d := x.in, x.d
	if in.Operation != Create && in.Operation != Update {
		return false
	}
	stored := x.storedAnnotations()[annotations.Approvals]
	before := x.oldAnn[annotations.Approvals]
	if stored == before {
		return false
	}
	was := x.oldAnn[annotations.ApprovalsBy]
	record := annotations.Attribute(was, before, stored, x.user.Long)
	if record == was {
		return false
	}
	d.ChildAnnotations = withRecord(d.ChildAnnotations, annotations.ApprovalsBy, record)
	return true
}

// setAsideOwnApprovals makes the approvals that only the parent's
// controller gave count for nothing: the writer of this drift, or a user
// the parent's kausality.io/controllers names. A controller's approvals
// edits are refused once its status writes name it; this covers the ones
// it made before, on a parent too new to have named it.
func (x *decider) setAsideOwnApprovals(entries []approval.Entry) {
	writers := annotations.ParseWriters(x.parAnn[annotations.ApprovalsBy])
	if len(writers) == 0 {
		return
	}
	var set []string
	for i := range entries {
		if entries[i].Valid && writers.OnlyBy(entries[i].Raw, x.heldByController) {
			entries[i].Valid = false
			set = append(set, strconv.Itoa(i))
		}
	}
	if len(set) == 0 {
		return
	}
	x.d.ApprovalsSetAside = len(set)
	x.d.Warnings = append(x.d.Warnings, "kausality: "+annotations.Approvals+" on parent "+x.parent.String()+": entry "+
		strings.Join(set, ", ")+" was given by the parent's own controller (before its status writes named it), and does not approve its drift; a person must")
}

// heldByController reports whether the user hash names whom the drift
// decision holds: the writer, when it is the parent's controller, or a
// user the parent's kausality.io/controllers names.
func (x *decider) heldByController(userHash string) bool {
	if userHash == x.user.Long && x.isController() {
		return true
	}
	return controllerid.ContainsHash(controllerid.ParseHashes(x.parAnn[annotations.Controllers]), userHash)
}

// storedAnnotations are the annotations the write would store: the
// request's, with the decision's changes.
func (x *decider) storedAnnotations() map[string]string {
	c := x.d.ChildAnnotations
	if c.Empty() {
		return x.newAnn
	}
	out := make(map[string]string, len(x.newAnn)+len(c.Set))
	for k, v := range x.newAnn {
		out[k] = v
	}
	for _, k := range c.Remove {
		delete(out, k)
	}
	for k, v := range c.Set {
		out[k] = v
	}
	return out
}

// recordModeSetters keeps the object's kausality.io/modes-by for an
// allowed write, and reports whether it changes, as recordApprovalWriters
// does.
func (x *decider) recordModeSetters() bool {
	in, d := x.in, x.d
	if in.Operation != Create && in.Operation != Update {
		return false
	}
	was := x.oldAnn[annotations.ModesBy]
	record := annotations.RecordModeSetters(was, x.oldAnn, x.storedAnnotations(), x.newAnn, x.user.Long)
	if record == was {
		return false
	}
	d.ChildAnnotations = withRecord(d.ChildAnnotations, annotations.ModesBy, record)
	return true
}

// modeAsPeopleSetIt is the value of the mode key that ann holds, unless a
// user held set it (or removed it) through the proxy: then the value
// before, since a controller's modes do not gate it. warning says so, for
// the object ann is on, and is "" when the value stands.
func modeAsPeopleSetIt(ann map[string]string, key string, held func(string) bool, object, decides string) (value string, set bool, warning string) {
	value, set = ann[key]
	s := annotations.ModeSetBy(ann, key)
	if s.User == "" || !held(s.User) || set && strings.EqualFold(strings.TrimSpace(value), "enforce") {
		// enforce is the strictest of every mode: set by the
		// controller, it holds it back all the same.
		return value, set, ""
	}
	what := key + "=" + value
	if !set {
		what = "the removal of " + key
	}
	warning = "kausality: " + what + " on " + object + " was made by the parent's own controller (before its status writes named it), " +
		"and does not decide " + decides
	if s.HadPrior {
		warning += "; the value before it, " + strconv.Quote(s.Prior) + ", does"
	} else {
		warning += "; ignored"
	}
	return s.Prior, s.HadPrior, warning
}

// withRecord returns c with key set to record, or removed for "".
func withRecord(c *AnnotationChanges, key, record string) *AnnotationChanges {
	if record == "" {
		return withRemoved(c, key)
	}
	return withSet(c, key, record)
}
