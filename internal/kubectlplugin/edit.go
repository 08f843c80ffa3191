package kubectlplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// Stamp is who made an edit and when; it goes into the entry, where the
// proxy ignores it and people read it.
type Stamp struct {
	User string
	At   time.Time
}

func (s Stamp) at() string { return s.At.UTC().Format(time.RFC3339) }

// Edit is a change of one parent's annotations: Set values (validated) and
// Remove keys. Computed from the parent as read, so that a retry after a
// conflict recomputes it from the new state.
type Edit struct {
	Set    map[string]string `json:"set,omitempty"`
	Remove []string          `json:"remove,omitempty"`
	// Unchanged: the annotations already say this; nothing is written.
	Unchanged bool   `json:"unchanged,omitempty"`
	Summary   string `json:"summary"`
}

// stampedApproval is an approvals entry with who added it and when.
type stampedApproval struct {
	annotations.Approval
	User string `json:"user,omitempty"`
	At   string `json:"at,omitempty"`
}

// AddApproval returns the approvals value with a appended. Every entry
// already there stays as written, those the proxy cannot read included. An
// equal valid entry makes it a no-op, so a retried command never admits
// two writes with one intent.
func AddApproval(current string, a annotations.Approval, st Stamp) (Edit, error) {
	entries, _, ok := annotations.ParseApprovalEntries(current)
	if !ok {
		return Edit{}, fmt.Errorf("the parent's %s is not a JSON array (the proxy reads it as no approvals); fix or remove it first: %q", annotations.Approvals, current)
	}
	for _, e := range entries {
		if e.Valid && sameApproval(e.Approval, a) {
			return Edit{Unchanged: true, Summary: "already approved: " + string(e.Raw)}, nil
		}
	}
	raw, err := json.Marshal(stampedApproval{Approval: a, User: st.User, At: st.at()})
	if err != nil {
		return Edit{}, err
	}
	value := annotations.EncodeApprovalEntries(append(entries, annotations.ApprovalEntry{Raw: raw, Approval: a, Valid: true}))
	if err := checkApprovals(value, a, len(entries)+1); err != nil {
		return Edit{}, err
	}
	return Edit{Set: map[string]string{annotations.Approvals: value}, Summary: "added approval " + string(raw)}, nil
}

// sameApproval compares as the proxy reads: no mode is once.
func sameApproval(x, y annotations.Approval) bool {
	x.Mode, y.Mode = x.EffectiveMode(), y.EffectiveMode()
	return x == y
}

// checkApprovals reads value as the proxy does: n entries, the last one a
// valid approval equal to want.
func checkApprovals(value string, want annotations.Approval, n int) error {
	entries, _, ok := annotations.ParseApprovalEntries(value)
	if !ok || len(entries) != n || !entries[n-1].Valid || entries[n-1].Approval != want {
		return fmt.Errorf("internal error: the proxy would not read %s=%s as intended", annotations.Approvals, value)
	}
	return nil
}

type stampedRejection struct {
	annotations.Rejection
	User string `json:"user,omitempty"`
	At   string `json:"at,omitempty"`
}

// AddRejection returns the rejections value with r appended, every entry
// already there as written.
func AddRejection(current string, r annotations.Rejection, st Stamp) (Edit, error) {
	if strings.TrimSpace(r.Reason) == "" {
		return Edit{}, errors.New("a rejection needs a reason (--reason): the proxy shows it in the denial")
	}
	var raws []json.RawMessage
	if strings.TrimSpace(current) != "" {
		if _, w := annotations.ParseRejections(current); w != nil {
			return Edit{}, fmt.Errorf("the parent's %s is malformed (the proxy rejects every child until it is fixed): %s", annotations.Rejections, w)
		}
		if err := json.Unmarshal([]byte(current), &raws); err != nil {
			return Edit{}, err
		}
	}
	existing, _ := annotations.ParseRejections(current)
	for i, e := range existing {
		if e == r {
			return Edit{Unchanged: true, Summary: "already rejected: " + string(raws[i])}, nil
		}
	}
	raw, err := json.Marshal(stampedRejection{Rejection: r, User: st.User, At: st.at()})
	if err != nil {
		return Edit{}, err
	}
	value := encodeRaws(append(raws, raw))
	list, w := annotations.ParseRejections(value)
	if w != nil || len(list) != len(raws)+1 || list[len(list)-1] != r {
		return Edit{}, fmt.Errorf("internal error: the proxy would not read %s=%s as intended", annotations.Rejections, value)
	}
	return Edit{Set: map[string]string{annotations.Rejections: value}, Summary: "added rejection " + string(raw)}, nil
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
		return Edit{}, errors.New("a freeze needs a reason (--reason): the proxy shows it in every denial")
	}
	raw, err := json.Marshal(annotations.FreezeInfo{User: st.User, Reason: reason, At: st.at()})
	if err != nil {
		return Edit{}, err
	}
	value := string(raw)
	if f, w := annotations.ParseFreeze(value); f == nil || w != nil || f.Malformed || f.Reason != reason {
		return Edit{}, fmt.Errorf("internal error: the proxy would not read %s=%s as intended", annotations.Freeze, value)
	}
	summary := "froze: " + value
	if old, _ := annotations.ParseFreeze(current); old != nil {
		summary += " (was " + old.String() + ")"
	}
	return Edit{Set: map[string]string{annotations.Freeze: value}, Summary: summary}, nil
}

// Unfreeze removes the freeze.
func Unfreeze(current string) Edit {
	if strings.TrimSpace(current) == "" {
		return Edit{Unchanged: true, Summary: "not frozen"}
	}
	return Edit{Remove: []string{annotations.Freeze}, Summary: "unfroze (was " + current + ")"}
}

// SetSnooze snoozes notifications for d: kausality.io/snooze-until, which
// the proxy reads first, and kausality.io/snooze with the same expiry,
// which has room for who snoozed and why.
func SetSnooze(d time.Duration, message string, st Stamp) (Edit, error) {
	if d <= 0 {
		return Edit{}, errors.New("--for must be positive")
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
	set := map[string]string{annotations.SnoozeUntil: untilText, annotations.Snooze: string(raw)}
	s, w := annotations.ParseSnooze(set)
	alone, w2 := annotations.ParseSnooze(map[string]string{annotations.Snooze: string(raw)})
	if s == nil || w != nil || !s.Until.Equal(until) || alone == nil || w2 != nil || !alone.Until.Equal(until) {
		return Edit{}, fmt.Errorf("internal error: the proxy would not read %s=%s as intended", annotations.SnoozeUntil, untilText)
	}
	return Edit{Set: set, Summary: "snoozed drift notifications until " + untilText}, nil
}

// Unsnooze removes both snooze annotations.
func Unsnooze(ann map[string]string) Edit {
	var rm []string
	for _, k := range []string{annotations.SnoozeUntil, annotations.Snooze} {
		if _, ok := ann[k]; ok {
			rm = append(rm, k)
		}
	}
	if len(rm) == 0 {
		return Edit{Unchanged: true, Summary: "not snoozed"}
	}
	return Edit{Remove: rm, Summary: "unsnoozed"}
}
