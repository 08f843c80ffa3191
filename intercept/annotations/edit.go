package annotations

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Stamp is who made an edit and when; it goes into the entry, where the
// proxy ignores it and people read it.
type Stamp struct {
	User string
	At   time.Time
}

func (s Stamp) at() string { return s.At.UTC().Format(time.RFC3339) }

// Edit is a change of one parent's annotations: Set values (validated) and
// Remove keys. It is computed from the parent as read, so that a retry
// after a conflict recomputes it from the new state. Every tool that
// answers drift (the kubectl plugin, chat buttons) computes its edits here,
// so that all of them write the formats the proxy reads.
type Edit struct {
	Set    map[string]string `json:"set,omitempty"`
	Remove []string          `json:"remove,omitempty"`
	// Unchanged: the annotations already say this; nothing is written.
	Unchanged bool   `json:"unchanged,omitempty"`
	Summary   string `json:"summary"`
}

// Apply returns a copy of ann with the edit applied; ann is not changed.
// An unchanged edit returns ann itself.
func (e Edit) Apply(ann map[string]string) map[string]string {
	if e.Unchanged {
		return ann
	}
	out := maps.Clone(ann)
	if out == nil {
		out = make(map[string]string, len(e.Set))
	}
	maps.Copy(out, e.Set)
	for _, k := range e.Remove {
		delete(out, k)
	}
	return out
}

// entryStamp is who added an approvals or rejections entry and when,
// written after the entry's own fields.
type entryStamp struct {
	User string `json:"user,omitempty"`
	At   string `json:"at,omitempty"`
}

func (s Stamp) entry() entryStamp { return entryStamp{User: s.User, At: s.at()} }

type stampedApproval struct {
	Approval
	entryStamp
}

// AddApproval returns the approvals value with a appended. Every entry
// already there stays as written, those the proxy cannot read included. An
// equal valid entry makes it a no-op, so a retried command never admits
// two writes with one intent.
func AddApproval(current string, a Approval, st Stamp) (Edit, error) {
	return AddApprovalTo(map[string]string{Approvals: current}, a, st)
}

// AddApprovalTo is AddApproval on a parent's annotations ann: an equal
// entry that only the parent's controller gave (ApprovalsBy) approves
// none of its drift, so it does not make the edit a no-op. While no
// Controllers record names the controller, an entry with any recorded
// writer may be its own.
func AddApprovalTo(ann map[string]string, a Approval, st Stamp) (Edit, error) {
	current := ann[Approvals]
	entries, _, ok := ParseApprovalEntries(current)
	if !ok {
		return Edit{}, fmt.Errorf("the parent's %s is not a JSON array (the proxy reads it as no approvals); fix or remove it first: %q", Approvals, current)
	}
	writers := ParseWriters(ann[ApprovalsBy])
	var controllers []string
	for _, h := range strings.Split(ann[Controllers], ",") {
		if h = strings.TrimSpace(h); h != "" {
			controllers = append(controllers, h)
		}
	}
	mayBeTheControllers := func(u string) bool { return len(controllers) == 0 || slices.Contains(controllers, u) }
	for _, e := range entries {
		if e.Valid && sameApproval(e.Approval, a) && !writers.OnlyBy(e.Raw, mayBeTheControllers) {
			return Edit{Unchanged: true, Summary: "already approved: " + string(e.Raw)}, nil
		}
	}
	raw, err := json.Marshal(stampedApproval{Approval: a, entryStamp: st.entry()})
	if err != nil {
		return Edit{}, err
	}
	value := EncodeApprovalEntries(append(entries, ApprovalEntry{Raw: raw, Approval: a, Valid: true}))
	if err := checkApprovals(value, a, len(entries)+1); err != nil {
		return Edit{}, err
	}
	return Edit{Set: map[string]string{Approvals: value}, Summary: "added approval " + string(raw)}, nil
}

// sameApproval compares as the proxy reads: no mode is once.
func sameApproval(x, y Approval) bool {
	x.Mode, y.Mode = x.EffectiveMode(), y.EffectiveMode()
	return x == y
}

// checkApprovals reads value as the proxy does: n entries, the last one a
// valid approval equal to want.
func checkApprovals(value string, want Approval, n int) error {
	entries, _, ok := ParseApprovalEntries(value)
	if !ok || len(entries) != n || !entries[n-1].Valid || entries[n-1].Approval != want {
		return fmt.Errorf("internal error: the proxy would not read %s=%s as intended", Approvals, value)
	}
	return nil
}

type stampedRejection struct {
	Rejection
	entryStamp
}

// AddRejection returns the rejections value with r appended, every entry
// already there as written.
func AddRejection(current string, r Rejection, st Stamp) (Edit, error) {
	if strings.TrimSpace(r.Reason) == "" {
		return Edit{}, errors.New("a rejection needs a reason: the proxy shows it in the denial")
	}
	var raws []json.RawMessage
	if strings.TrimSpace(current) != "" {
		if _, w := ParseRejections(current); w != nil {
			return Edit{}, fmt.Errorf("the parent's %s is malformed (the proxy rejects every child until it is fixed): %s", Rejections, w)
		}
		if err := json.Unmarshal([]byte(current), &raws); err != nil {
			return Edit{}, err
		}
	}
	existing, _ := ParseRejections(current)
	for i, e := range existing {
		if e == r {
			return Edit{Unchanged: true, Summary: "already rejected: " + string(raws[i])}, nil
		}
	}
	raw, err := json.Marshal(stampedRejection{Rejection: r, entryStamp: st.entry()})
	if err != nil {
		return Edit{}, err
	}
	value := encodeRaws(append(raws, raw))
	list, w := ParseRejections(value)
	if w != nil || len(list) != len(raws)+1 || list[len(list)-1] != r {
		return Edit{}, fmt.Errorf("internal error: the proxy would not read %s=%s as intended", Rejections, value)
	}
	return Edit{Set: map[string]string{Rejections: value}, Summary: "added rejection " + string(raw)}, nil
}

func encodeRaws(raws []json.RawMessage) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, r := range raws {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(r)
	}
	b.WriteByte(']')
	return b.String()
}

// SetFreeze returns the freeze value {"user","reason","at"}.
func SetFreeze(current, reason string, st Stamp) (Edit, error) {
	if strings.TrimSpace(reason) == "" {
		return Edit{}, errors.New("a freeze needs a reason: the proxy shows it in every denial")
	}
	raw, err := json.Marshal(FreezeInfo{User: st.User, Reason: reason, At: st.at()})
	if err != nil {
		return Edit{}, err
	}
	value := string(raw)
	if f, w := ParseFreeze(value); f == nil || w != nil || f.Malformed || f.Reason != reason {
		return Edit{}, fmt.Errorf("internal error: the proxy would not read %s=%s as intended", Freeze, value)
	}
	summary := "froze: " + value
	if old, _ := ParseFreeze(current); old != nil {
		summary += " (was " + old.String() + ")"
	}
	return Edit{Set: map[string]string{Freeze: value}, Summary: summary}, nil
}

// Unfreeze removes the freeze.
func Unfreeze(current string) Edit {
	if strings.TrimSpace(current) == "" {
		return Edit{Unchanged: true, Summary: "not frozen"}
	}
	return Edit{Remove: []string{Freeze}, Summary: "unfroze (was " + current + ")"}
}

// SetSnooze snoozes notifications for d from st.At:
// kausality.io/snooze-until, which the proxy reads first, and
// kausality.io/snooze with the same expiry, which has room for who snoozed
// and why.
func SetSnooze(d time.Duration, message string, st Stamp) (Edit, error) {
	if d <= 0 {
		return Edit{}, fmt.Errorf("a snooze must last a positive duration, not %s", d)
	}
	until := st.At.Add(d).UTC().Truncate(time.Second)
	untilText := until.Format(time.RFC3339)
	raw, err := json.Marshal(struct {
		Expiry  string `json:"expiry"`
		User    string `json:"user,omitempty"`
		Message string `json:"message,omitempty"`
	}{untilText, st.User, message})
	if err != nil {
		return Edit{}, err
	}
	set := map[string]string{SnoozeUntil: untilText, Snooze: string(raw)}
	s, w := ParseSnooze(set)
	alone, w2 := ParseSnooze(map[string]string{Snooze: string(raw)})
	if s == nil || w != nil || !s.Until.Equal(until) || alone == nil || w2 != nil || !alone.Until.Equal(until) {
		return Edit{}, fmt.Errorf("internal error: the proxy would not read %s=%s as intended", SnoozeUntil, untilText)
	}
	return Edit{Set: set, Summary: "snoozed drift notifications until " + untilText}, nil
}

// Unsnooze removes both snooze annotations.
func Unsnooze(ann map[string]string) Edit {
	var rm []string
	for _, k := range []string{SnoozeUntil, Snooze} {
		if _, ok := ann[k]; ok {
			rm = append(rm, k)
		}
	}
	if len(rm) == 0 {
		return Edit{Unchanged: true, Summary: "not snoozed"}
	}
	return Edit{Remove: rm, Summary: "unsnoozed"}
}

// ResetControllers empties a parent's controllers record. The empty value,
// not a removal, is the request: a write that merely omits a system
// annotation (a replace from a manifest) must not reset it, so the proxy
// keeps an omitted one and honours an emptied one from a person (see
// decision.ResetsControllers).
func ResetControllers(current string) Edit {
	if strings.TrimSpace(current) == "" {
		return Edit{Unchanged: true, Summary: "no controller recorded"}
	}
	return Edit{Set: map[string]string{Controllers: ""}, Summary: "forgot the recorded controllers (were " + current + ")"}
}
