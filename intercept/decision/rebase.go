package decision

import (
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// Rebase returns the changes that carry out sw on a target whose
// annotations are now fresh. The proxy writes parents with a
// resourceVersion precondition and rebases on every conflict, so a
// person's edit made since the decision is never overwritten:
//   - a key nobody touched since the decision gets the decided value;
//   - approvals lose only the entries the decision pruned or consumed;
//     every other entry stays as written, and a value a person's edit left
//     unparsable as a whole is left alone;
//   - controllers get the decided writer recorded on the fresh record, by
//     the same rules as at the decision (controllerid.RecordController);
//   - the observed generation gets the decided value unless a later one
//     is recorded already;
//   - other keys (phase) get the decided value.
func (sw SideWrite) Rebase(fresh map[string]string) AnnotationChanges {
	out := AnnotationChanges{}
	want := make(map[string]string, len(sw.Set)+len(sw.Remove))
	for k, v := range sw.Set {
		want[k] = v
	}
	for _, k := range sw.Remove {
		want[k] = ""
	}
	for key, value := range want {
		now, seen := fresh[key], sw.Seen[key]
		if now != seen {
			switch key {
			case annotations.Approvals:
				var ok bool
				if value, ok = withoutDropped(now, seen, value); !ok {
					continue
				}
			case annotations.Controllers:
				if sw.Controller != nil {
					value, _, _ = controllerid.RecordController(now, sw.Controller.User)
				}
			case annotations.ObservedGeneration:
				// Another status write recorded a generation since: a
				// record only moves forward.
				if !generationBefore(now, value) {
					continue
				}
			}
		}
		if value == now {
			continue
		}
		if value == "" {
			out.Remove = append(out.Remove, key)
			continue
		}
		if out.Set == nil {
			out.Set = map[string]string{}
		}
		out.Set[key] = value
	}
	return out
}

// RebaseOn is Rebase on the target as kube-apiserver stores it now. A
// controller is recorded only when the target's generation has reached the
// observedGeneration its status write reported.
func (sw SideWrite) RebaseOn(fresh metav1.Object) AnnotationChanges {
	if sw.Controller != nil && fresh.GetGeneration() < sw.Controller.ObservedGeneration {
		sw.Set = withoutKey(sw.Set, annotations.Controllers)
	}
	return sw.Rebase(fresh.GetAnnotations())
}

// generationBefore reports whether the recorded generation now is behind
// value: an unreadable or missing record is.
func generationBefore(now, value string) bool {
	n, err := strconv.ParseInt(strings.TrimSpace(now), 10, 64)
	if err != nil {
		return true
	}
	v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
	return err == nil && n < v
}

func withoutKey(m map[string]string, key string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// withoutDropped removes from the approvals now the entries that the
// decision dropped going from seen to decided, matched as written; every
// other entry, a person's new one or one the proxy cannot read, stays as
// written. ok is false when now is not a JSON array: then nothing is
// written.
func withoutDropped(now, seen, decided string) (string, bool) {
	current, _, ok := annotations.ParseApprovalEntries(now)
	if !ok {
		return now, false
	}
	before, _, _ := annotations.ParseApprovalEntries(seen)
	after, _, _ := annotations.ParseApprovalEntries(decided)
	dropped := map[string]int{}
	for _, e := range before {
		dropped[string(e.Raw)]++
	}
	for _, e := range after {
		if dropped[string(e.Raw)] > 0 {
			dropped[string(e.Raw)]--
		}
	}
	kept := make([]annotations.ApprovalEntry, 0, len(current))
	for _, e := range current {
		if dropped[string(e.Raw)] > 0 {
			dropped[string(e.Raw)]--
			continue
		}
		kept = append(kept, e)
	}
	if len(kept) == len(current) {
		return now, true
	}
	return annotations.EncodeApprovalEntries(kept), true
}
