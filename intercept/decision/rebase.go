package decision

import (
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// Rebase returns the changes that carry out sw on a target whose
// annotations are now fresh. The proxy writes parents with a
// resourceVersion precondition and rebases on every conflict, so a
// person's edit made since the decision is never overwritten:
//   - a key nobody touched since the decision gets the decided value;
//   - approvals lose only the entries the decision pruned or consumed, and
//     are left alone while a person's edit makes them unparsable;
//   - controllers get the decided writer put first on the fresh record;
//   - other keys (phase, observed generation) get the decided value.
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
				if first := controllerid.ParseHashes(value); len(first) > 0 {
					value, _ = controllerid.RecordController(now, first[0])
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

// withoutDropped removes from the approvals now the entries that the
// decision dropped going from seen to decided. ok is false when now cannot
// be parsed: then nothing is written.
func withoutDropped(now, seen, decided string) (string, bool) {
	current, warnings := annotations.ParseApprovals(now)
	if len(warnings) > 0 {
		return now, false
	}
	before, _ := annotations.ParseApprovals(seen)
	after, _ := annotations.ParseApprovals(decided)
	dropped := map[annotations.Approval]int{}
	for _, a := range before {
		dropped[a]++
	}
	for _, a := range after {
		if dropped[a] > 0 {
			dropped[a]--
		}
	}
	kept := make([]annotations.Approval, 0, len(current))
	for _, a := range current {
		if dropped[a] > 0 {
			dropped[a]--
			continue
		}
		kept = append(kept, a)
	}
	if len(kept) == len(current) {
		return now, true
	}
	return annotations.EncodeApprovals(kept), true
}
