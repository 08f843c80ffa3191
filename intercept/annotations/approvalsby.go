package annotations

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
)

// Writers is what kausality.io/approvals-by records: for each entry of an
// object's approvals, by the digest of the entry, the hashes of the users
// whose writes through the proxy added it (an entry written twice, the
// same approval given by two people, has two).
//
// A parent's controller is known only once its status writes name it.
// Until then nothing tells it from a person, and it could approve its own
// drift in advance on a brand-new parent. The record lets the drift
// decision set aside the entries its own writer added, whenever that
// writer turns out to be the controller.
//
// Entries added around the proxy have no writer, and are honoured: a
// person who edits approvals directly at kube-apiserver is not held back
// by a record of an older value.
type Writers map[string][]string

// EntryDigest names an approvals entry by its content, whatever the order
// of its members and its white space: the proxy and the kubectl plugin
// rewrite the annotation, and an entry they keep must keep its writer. 80
// bits keep a controller from writing an entry that collides with one a
// person wrote.
func EntryDigest(raw json.RawMessage) string {
	var v any
	canonical := []byte(raw)
	if err := json.Unmarshal(raw, &v); err == nil {
		// Maps marshal with sorted keys.
		if b, err := json.Marshal(v); err == nil {
			canonical = b
		}
	}
	return Digest(canonical)
}

// ParseWriters reads a kausality.io/approvals-by value:
// "<user hash>:<digest>.<digest>,<user hash>:<digest>". Parts it cannot
// read are dropped: only the proxy writes the record.
func ParseWriters(v string) Writers {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	w := Writers{}
	for _, group := range strings.Split(v, ",") {
		user, digests, ok := strings.Cut(strings.TrimSpace(group), ":")
		if !ok || user == "" {
			continue
		}
		for _, d := range strings.Split(digests, ".") {
			if d != "" && !slices.Contains(w[d], user) {
				w[d] = append(w[d], user)
			}
		}
	}
	return w
}

// String renders the record, grouped by user, in a stable order.
func (w Writers) String() string {
	byUser := map[string][]string{}
	for d, us := range w {
		for _, u := range us {
			byUser[u] = append(byUser[u], d)
		}
	}
	users := make([]string, 0, len(byUser))
	for u := range byUser {
		users = append(users, u)
	}
	sort.Strings(users)
	var b strings.Builder
	for i, u := range users {
		if i > 0 {
			b.WriteByte(',')
		}
		ds := byUser[u]
		sort.Strings(ds)
		b.WriteString(u)
		b.WriteByte(':')
		b.WriteString(strings.Join(ds, "."))
	}
	return b.String()
}

// Attribute is the record after a write by user changed an object's
// approvals from oldValue to newValue. An entry keeps the writers it had
// (an entry the old value had without a record has none), and user joins
// them when the new value has the entry more often than the old one did:
// a person who gives the approval a controller gave in advance is then
// among its writers. The entries newValue no longer has leave the record.
// A value that is not a JSON array has no entries, and then no record;
// entries the proxy cannot read approve nothing and are not recorded.
func Attribute(record, oldValue, newValue, user string) string {
	entries := rawEntries(newValue)
	if len(entries) == 0 {
		return ""
	}
	before := map[string]int{}
	for _, raw := range rawEntries(oldValue) {
		before[EntryDigest(raw)]++
	}
	// Only entries that approve something are recorded: the record then
	// takes a third of their size at most (17 bytes for an entry of at
	// least 50).
	valid, _, _ := ParseApprovalEntries(newValue)
	after := map[string]int{}
	for _, e := range valid {
		if e.Valid {
			after[EntryDigest(e.Raw)]++
		}
	}
	known := ParseWriters(record)
	out := Writers{}
	for d, n := range after {
		var ws []string
		if before[d] > 0 {
			ws = append(ws, known[d]...)
		}
		if n > before[d] && !slices.Contains(ws, user) {
			ws = append(ws, user)
		}
		if len(ws) > 0 {
			out[d] = ws
		}
	}
	if len(out) == 0 {
		return ""
	}
	return out.String()
}

// OnlyBy reports whether every recorded writer of the entry raw is one of
// the users held reports, and there is at least one: an entry added
// around the proxy, or given by anybody else too, is not only theirs.
func (w Writers) OnlyBy(raw json.RawMessage, held func(user string) bool) bool {
	ws := w[EntryDigest(raw)]
	for _, u := range ws {
		if !held(u) {
			return false
		}
	}
	return len(ws) > 0
}

func rawEntries(v string) []json.RawMessage {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	var raws []json.RawMessage
	if json.Unmarshal([]byte(v), &raws) != nil {
		return nil
	}
	return raws
}
