package settle

import (
	"encoding/json"
	"fmt"
)

// Record is what the cluster keeps of one parent's settledness, so that
// every replica, and one restarted a moment ago, decides a write under the
// parent as the replica that watched it settle would.
type Record struct {
	// Settled is the spec hash the parent last settled at, at generation
	// SettledAt.
	Settled   string `json:"s"`
	SettledAt int64  `json:"sg"`
	// Current is the parent's newest spec hash known, first seen at
	// generation Since: the start of the window a generation approval
	// names.
	Current string `json:"c"`
	Since   int64  `json:"cg"`
	// Changed is when what is known last changed (Unix seconds): the
	// oldest records give way first when a namespace's are full.
	Changed int64 `json:"t,omitempty"`
}

// Moved reports whether the parent's spec moved after it last settled: a
// spec seen first after the settlement, even one equal to the settled
// spec (a rollback), is being carried out.
func (r Record) Moved() bool {
	return r.Settled != "" && r.SettledAt < r.Since
}

// Merge combines two replicas' records of the same parent. It is
// commutative and idempotent, so replicas that learn the same things in
// any order converge on one record instead of overwriting each other: the
// later settlement wins, the later spec wins, the same spec keeps the
// earliest generation it was seen at (unless one record knows the spec
// left it and came back after that generation: a rollback being carried
// out, which the other missed), and equal generations with unequal
// hashes (which only a stale or forged record produces) are broken by the
// hash so every replica picks the same one.
func Merge(a, b Record) Record {
	out := a
	switch {
	case b.SettledAt > a.SettledAt, b.SettledAt == a.SettledAt && b.Settled > a.Settled:
		out.Settled, out.SettledAt = b.Settled, b.SettledAt
	}
	switch {
	case b.Current == a.Current && movedAfter(a, b) && out.SettledAt < a.Since:
		out.Since = a.Since
	case b.Current == a.Current && movedAfter(b, a) && out.SettledAt < b.Since:
		out.Since = b.Since
	case b.Current == a.Current:
		out.Since = min(a.Since, b.Since)
	case b.Since > a.Since, b.Since == a.Since && b.Current > a.Current:
		out.Current, out.Since = b.Current, b.Since
	}
	out.Changed = max(a.Changed, b.Changed)
	return out
}

// movedAfter reports whether a knows that the parent left its spec after
// the generation b has it since, and came back to it at a.Since: a settled
// at or after b.Since and saw the spec first after that. b, which missed
// the move (a replica that read the parent before and after it, or a
// record written before it), must not pull a.Since back to its own, which
// would forget the rollback being carried out. At most one of
// movedAfter(a, b) and movedAfter(b, a) holds, so Merge stays commutative.
// Merge keeps a.Since only while the merged settlement is before it: once
// the rollback settled, nothing in the merged record says it moved, and
// merging either record into it again must not change it, so it keeps the
// earliest generation, as for any settled spec.
func movedAfter(a, b Record) bool {
	return a.Moved() && a.SettledAt >= b.Since && a.Since > b.Since
}

// Encode is the record as stored.
func (r Record) Encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// DecodeRecord reads a stored record.
func DecodeRecord(s string) (Record, error) {
	var r Record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return Record{}, fmt.Errorf("settledness record: %w", err)
	}
	if r.Current == "" || r.Since < 0 || r.SettledAt < 0 {
		return Record{}, fmt.Errorf("settledness record: no current spec")
	}
	return r, nil
}
