package decision

import (
	"encoding/json"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

const (
	// maxMessageChanges is how many changed fields the message lists.
	maxMessageChanges = 10
	// maxCauseChanges is how many changed fields get a cause.
	maxCauseChanges = 50
)

// shownChanges are the changes messages and warnings may show. A Secret's
// values never are, whoever the caller and whatever built the changes:
// warnings reach the caller and the decision log, and the log is read by
// people who may not read Secrets.
func (x *decider) shownChanges() []desired.Change {
	if x.d.Child.APIVersion != "v1" || x.d.Child.Kind != "Secret" {
		return x.in.Changes
	}
	out := make([]desired.Change, len(x.in.Changes))
	for i, c := range x.in.Changes {
		out[i] = desired.Change{Path: c.Path}
	}
	return out
}

// describeWrite renders what the write does to the desired state.
func (x *decider) describeWrite() string {
	ch := x.shownChanges()
	if len(ch) == 0 {
		switch x.in.Operation {
		case Create:
			return "creates it"
		case Delete:
			return "deletes it"
		}
		return "changes its desired state"
	}
	var b strings.Builder
	switch x.in.Operation {
	case Create:
		b.WriteString("creates it with ")
	case Delete:
		b.WriteString("deletes it (")
	default:
		b.WriteString("changes ")
	}
	for i, c := range ch {
		if i == maxMessageChanges {
			b.WriteString(", and ")
			b.WriteString(strconv.Itoa(len(ch) - maxMessageChanges))
			b.WriteString(" more")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(changeText(c))
	}
	if x.in.Operation == Delete {
		b.WriteString(")")
	}
	return b.String()
}

// hiddenParentText stands for the parent in what a caller who may not
// read it is told.
const hiddenParentText = "its controller owner (which you may not read, so its name and annotations are not shown)"

// askOwnerText says what a caller who may not read the parent can do.
const askOwnerText = "ask someone who may read and edit this object's controller owner (metadata.ownerReferences)"

func (x *decider) parentText() string {
	if x.in.ParentHidden {
		return hiddenParentText
	}
	p := x.d.Parent
	s := x.parent.String() + " (generation " + itoa(p.Generation)
	if p.ObservedGenerationSource != "" {
		s += ", observedGeneration " + itoa(p.ObservedGeneration)
	}
	return s + ")"
}

func (x *decider) actorText() string {
	a := x.d.Actor
	if a.FieldManager != "" {
		return "field manager " + strconv.Quote(a.FieldManager) + " (user " + a.User + ")"
	}
	return "user " + a.User
}

// kubectlAnnotate renders "kubectl annotate -n ns kind.group/name".
func kubectlAnnotate(ref ObjectRef) string {
	res := strings.ToLower(ref.Kind)
	if i := strings.IndexByte(ref.APIVersion, '/'); i > 0 {
		res += "." + ref.APIVersion[:i]
	}
	s := "kubectl annotate "
	if ref.Namespace != "" {
		s += "-n " + ref.Namespace + " "
	}
	return s + res + "/" + ref.Name
}

func annotationField(key string) string { return "metadata.annotations[" + key + "]" }

// baseCauses lists parent, child, actor and changed fields.
func (x *decider) baseCauses() []metav1.StatusCause {
	d := x.d
	changes := x.shownChanges()
	causes := make([]metav1.StatusCause, 0, 4+len(changes))
	causes = append(causes,
		metav1.StatusCause{Type: CauseParent, Field: "metadata.ownerReferences", Message: x.parentText()},
		metav1.StatusCause{Type: CauseChild, Message: string(x.in.Operation) + " " + d.Child.String()},
		metav1.StatusCause{Type: CauseController, Message: x.actorText()},
	)
	for i, c := range changes {
		if i == maxCauseChanges {
			causes = append(causes, metav1.StatusCause{Type: CauseChangedField,
				Message: strconv.Itoa(len(changes)-maxCauseChanges) + " more changed fields"})
			break
		}
		msg := "changed"
		if c.Old != "" || c.New != "" {
			msg = orNone(c.Old) + " → " + orNone(c.New)
		}
		causes = append(causes, metav1.StatusCause{Type: CauseChangedField, Field: c.Path, Message: msg})
	}
	return causes
}

func (x *decider) frozenMessage(fz *annotations.FreezeInfo) {
	d := x.d
	if x.in.ParentHidden {
		d.Message = "kausality: " + string(x.in.Operation) + " of " + d.Child.String() + " denied: " + hiddenParentText +
			" is frozen. The write by " + x.actorText() + " " + x.describeWrite() + ". To unblock, " + askOwnerText + " to lift the freeze."
		d.Causes = append(x.baseCauses(),
			metav1.StatusCause{Type: CauseFrozen, Field: annotationField(annotations.Freeze), Message: "the controller owner is frozen"},
			metav1.StatusCause{Type: CauseUnblock, Field: annotationField(annotations.Freeze), Message: askOwnerText + " to lift the freeze"},
		)
		return
	}
	d.Message = "kausality: " + string(x.in.Operation) + " of " + d.Child.String() + " denied: its parent " +
		x.parentText() + " is " + fz.String() + ". The write by " + x.actorText() + " " + x.describeWrite() +
		". To unblock, remove the " + annotations.Freeze + " annotation from the parent: " +
		kubectlAnnotate(x.parent) + " " + annotations.Freeze + "-"
	d.Causes = append(x.baseCauses(),
		metav1.StatusCause{Type: CauseFrozen, Field: annotationField(annotations.Freeze), Message: fz.String()},
		metav1.StatusCause{Type: CauseUnblock, Field: annotationField(annotations.Freeze), Message: "remove the annotation from the parent"},
	)
}

func (x *decider) rejectedMessage(ev approval.Evaluation) {
	d := x.d
	if x.in.ParentHidden {
		d.Message = "kausality: " + string(x.in.Operation) + " of " + d.Child.String() + " denied: drift rejected by " +
			hiddenParentText + ". The write by the parent's controller, " + x.actorText() + ", " + x.describeWrite() +
			". To unblock, " + askOwnerText + " to lift the rejection."
		d.Causes = append(x.baseCauses(),
			metav1.StatusCause{Type: CauseRejected, Field: annotationField(annotations.Rejections), Message: "the controller owner rejects this drift"},
			metav1.StatusCause{Type: CauseUnblock, Field: annotationField(annotations.Rejections), Message: askOwnerText + " to lift the rejection"},
		)
		return
	}
	r := ev.Rejection
	var unblock string
	if ev.RejectionsMalformed {
		unblock = "fix the malformed " + annotations.Rejections + " annotation on the parent (see the warning)"
	} else {
		entry, _ := json.Marshal(r)
		unblock = "remove the entry " + string(entry) + " from the parent's " + annotations.Rejections + " annotation"
		if r.Generation != 0 {
			unblock += " (it applies only while the parent is at generation " + itoa(r.Generation) + ")"
		}
	}
	d.Message = "kausality: " + string(x.in.Operation) + " of " + d.Child.String() + " denied: drift rejected by its parent " +
		x.parentText() + ": " + r.Reason + ". The write by the parent's controller, " + x.actorText() + ", " +
		x.describeWrite() + " although the parent " + x.settledText() + "." + x.policyText(true) + " To unblock, " + unblock + "."
	d.Causes = append(x.baseCauses(),
		metav1.StatusCause{Type: CauseRejected, Field: annotationField(annotations.Rejections), Message: r.Reason},
		metav1.StatusCause{Type: CauseUnblock, Field: annotationField(annotations.Rejections), Message: unblock},
	)
	if d.Policy != nil {
		d.Causes = append(d.Causes, metav1.StatusCause{Type: CausePolicy, Message: d.Policy.String() + " matches; the rejection wins"})
	}
}

func (x *decider) approveHint(sugg approval.Approval, value string) string {
	entry, _ := json.Marshal(sugg)
	s := "add " + string(entry) + " to the parent's " + annotations.Approvals + " annotation: " +
		kubectlAnnotate(x.parent) + " --overwrite '" + annotations.Approvals + "=" + value + "'"
	return s
}

// settledText says why the parent counts as done with its spec.
func (x *decider) settledText() string {
	if x.in.Settle != nil {
		return "has settled at its current spec"
	}
	return "is reconciled"
}

func (x *decider) unapprovedMessage(sugg approval.Approval, value string, enforce bool) {
	d := x.d
	verdict := "denied"
	if !enforce {
		verdict = "would be denied in enforce mode (mode log from " + string(d.ModeSource) + ")"
	}
	if x.in.ParentHidden {
		d.Message = "kausality: " + string(x.in.Operation) + " of " + d.Child.String() + " " + verdict +
			": drift: the parent's controller, " + x.actorText() + ", " + x.describeWrite() + " while " +
			hiddenParentText + " " + x.settledText() + ". To allow it, " + askOwnerText + " to approve it."
		d.Causes = append(x.baseCauses(),
			metav1.StatusCause{Type: CauseUnapproved, Field: annotationField(annotations.Approvals), Message: "no approval for this child"},
			metav1.StatusCause{Type: CauseUnblock, Field: annotationField(annotations.Approvals), Message: askOwnerText + " to approve it"},
		)
		return
	}
	d.Message = "kausality: " + string(x.in.Operation) + " of " + d.Child.String() + " " + verdict +
		": drift: the parent's controller, " + x.actorText() + ", " + x.describeWrite() +
		" while its parent " + x.parentText() + " " + x.settledText() + "." + x.policyText(false) +
		" To allow it once, " + x.approveHint(sugg, value) + "."
	d.Causes = append(x.baseCauses(),
		metav1.StatusCause{Type: CauseUnapproved, Field: annotationField(annotations.Approvals),
			Message: "no approval for this child at parent generation " + itoa(d.Parent.Generation)},
		metav1.StatusCause{Type: CausePolicy, Message: x.noPolicyText()},
		metav1.StatusCause{Type: CauseUnblock, Field: annotationField(annotations.Approvals), Message: value},
	)
}

// logModeWarning is the Warning: 299 text for drift allowed in log mode.
func (x *decider) logModeWarning(sugg approval.Approval) string {
	if x.in.ParentHidden {
		return "kausality: drift allowed in log mode: " + string(x.in.Operation) + " of " + x.d.Child.String() +
			" by the parent's controller " + x.actorText() + " " + x.describeWrite() + " while " + hiddenParentText +
			" " + x.settledText() + "; to approve it, " + askOwnerText
	}
	entry, _ := json.Marshal(sugg)
	return "kausality: drift allowed in log mode: " + string(x.in.Operation) + " of " + x.d.Child.String() +
		" by the parent's controller " + x.actorText() + " " + x.describeWrite() + " while its parent " +
		x.parentText() + " " + x.settledText() + "; approve with " + annotations.Approvals + " entry " + string(entry)
}

// policyText is the sentence about approval policies in a drift message:
// which rule matched (and lost to a rejection), or that none did.
func (x *decider) policyText(rejected bool) string {
	if rejected {
		if p := x.d.Policy; p != nil {
			return " " + p.String() + " matches this write, but a rejection wins over approval policies."
		}
		return ""
	}
	return " " + upperFirst(x.noPolicyText()) + "."
}

func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
