package decision

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// MaxCollectionWarnings bounds the Warning headers of one answer: a
// header block has a size limit, and a thousand identical log-mode
// warnings say no more than ten.
const MaxCollectionWarnings = 10

// Collection combines, as they are decided, the decisions of the objects
// one deletecollection would delete, each as the DELETE of it: into one
// verdict, the warnings of the answer, and the refusal. It keeps no
// decision: its size does not grow with the collection's.
type Collection struct {
	// DryRun: the deletecollection is a dry run, whose answer says each
	// object's verdict.
	DryRun  bool
	Verdict CollectionVerdict
	// Decided counts the decisions added.
	Decided            int
	warnings, verdicts boundedWarnings
}

// Add combines the decision of the next object.
func (c *Collection) Add(d *Decision) {
	c.Verdict.Add(c.Decided, d)
	c.Decided++
	c.warnings.add(d.Warnings...)
	if c.DryRun {
		c.verdicts.add(fmt.Sprintf("kausality dry-run: %s (%s): %s: %s", d.Result, d.Category, d.Child, d.Reason))
	}
}

// Warnings are the Warning headers of the forwarded request's answer: the
// decisions' warnings and, for a dry run, each object's verdict, within
// MaxCollectionWarnings.
func (c *Collection) Warnings() []string {
	var all boundedWarnings
	all.add(c.warnings.kept...)
	all.add(c.verdicts.kept...)
	all.more += c.warnings.more + c.verdicts.more
	return all.lines()
}

// RefusalWarnings are the Warning headers of the refusal: the decisions'
// warnings, within MaxCollectionWarnings.
func (c *Collection) RefusalWarnings() []string { return c.warnings.lines() }

// Refusal is the 403 of a refused deletecollection of resource in
// namespace ("" cluster-scoped). blocked are the decisions of the objects
// verdict.Blocked names, in its order. It names at most MaxNamedChildren
// of them, and gives the first one's full denial (parent, reason, how to
// unblock); details.causes carry, for each named object, its own causes,
// each distinct cause once.
func (c *Collection) Refusal(resource schema.GroupResource, namespace string, verdict CollectionVerdict, blocked []*Decision) metav1.Status {
	where := ""
	if namespace != "" {
		where = " in namespace " + namespace
	}
	names := make([]string, 0, len(blocked))
	type causeKey struct{ typ, field, msg string }
	seen := map[causeKey]bool{}
	var causes []metav1.StatusCause
	for _, d := range blocked {
		names = append(names, d.Child.String()+" ("+string(d.Category)+")")
		for _, cause := range d.Causes {
			key := causeKey{string(cause.Type), cause.Field, cause.Message}
			if !seen[key] {
				seen[key] = true
				causes = append(causes, cause)
			}
		}
	}
	list := strings.Join(names, ", ")
	if more := verdict.Denied - len(names); more > 0 {
		list += ", and " + strconv.Itoa(more) + " more"
	}
	first := ""
	if len(blocked) > 0 {
		first = blocked[0].Message
	}
	return metav1.Status{
		Status: metav1.StatusFailure,
		Code:   403,
		Reason: metav1.StatusReasonForbidden,
		Message: fmt.Sprintf("kausality: deletecollection of %s%s denied, nothing was deleted: %d of the %d objects it would delete may not be deleted: %s. %s",
			resource, where, verdict.Denied, c.Decided, list, first),
		Details: &metav1.StatusDetails{Group: resource.Group, Kind: resource.Resource, Causes: causes},
	}
}

// DistinctSideWrites drops repeated parent writes: the children of one
// parent ask for the same pruning, and one write carries it out.
func DistinctSideWrites(writes []SideWrite) []SideWrite {
	seen := map[string]bool{}
	var out []SideWrite
	for _, sw := range writes {
		key, err := json.Marshal(struct {
			T ObjectRef
			C AnnotationChanges
			S map[string]string
		}{sw.Target, sw.AnnotationChanges, sw.Seen})
		if err != nil || !seen[string(key)] {
			seen[string(key)] = true
			out = append(out, sw)
		}
	}
	return out
}

// boundedWarnings keeps the first MaxCollectionWarnings distinct warnings
// and counts the others.
type boundedWarnings struct {
	kept []string
	more int
}

func (b *boundedWarnings) add(warnings ...string) {
	for _, warning := range warnings {
		switch {
		case slices.Contains(b.kept, warning):
		case len(b.kept) < MaxCollectionWarnings:
			b.kept = append(b.kept, warning)
		default:
			b.more++
		}
	}
}

// lines are the kept warnings, and one that says how many more there were.
func (b *boundedWarnings) lines() []string {
	if b.more == 0 {
		return b.kept
	}
	return append(slices.Clone(b.kept), "kausality: "+strconv.Itoa(b.more)+" more warnings about this deletecollection are in the proxy's decision log")
}
