package decision

import (
	"slices"
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
	stored := x.newAnn[annotations.Approvals]
	if d.ChildAnnotations != nil {
		if v, ok := d.ChildAnnotations.Set[annotations.Approvals]; ok {
			stored = v
		} else if slices.Contains(d.ChildAnnotations.Remove, annotations.Approvals) {
			stored = ""
		}
	}
	before := x.oldAnn[annotations.Approvals]
	if stored == before {
		return false
	}
	was := x.oldAnn[annotations.ApprovalsBy]
	record := approval.Attribute(was, before, stored, x.user.Long)
	if record == was {
		return false
	}
	if record == "" {
		d.ChildAnnotations = withRemoved(d.ChildAnnotations, annotations.ApprovalsBy)
	} else {
		d.ChildAnnotations = withSet(d.ChildAnnotations, annotations.ApprovalsBy, record)
	}
	return true
}

// setAsideOwnApprovals makes the approvals that only the parent's
// controller gave count for nothing: the writer of this drift, or a user
// the parent's kausality.io/controllers names. A controller's approvals
// edits are refused once its status writes name it; this covers the ones
// it made before, on a parent too new to have named it.
func (x *decider) setAsideOwnApprovals(entries []approval.Entry) {
	writers := approval.ParseWriters(x.parAnn[annotations.ApprovalsBy])
	if len(writers) == 0 {
		return
	}
	controllers := controllerid.ParseHashes(x.parAnn[annotations.Controllers])
	held := func(u string) bool { return u == x.user.Long || controllerid.ContainsHash(controllers, u) }
	var set []string
	for i := range entries {
		if entries[i].Valid && writers.OnlyBy(entries[i].Raw, held) {
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
