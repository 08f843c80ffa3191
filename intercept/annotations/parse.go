package annotations

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Warning reports a malformed annotation and what the proxy did instead.
type Warning struct {
	// Annotation is the annotation key.
	Annotation string
	// Object names the object carrying it ("parent apps/v1 Deployment
	// ns/name", "namespace ns"); optional, set by the caller.
	Object string
	// Err is the parse error (the JSON error for JSON values).
	Err error
	// Effect says how the value was treated ("treated as no approvals").
	Effect string
}

// String renders the warning for a Warning header or a log line.
func (w Warning) String() string {
	var b strings.Builder
	b.WriteString("kausality: malformed annotation ")
	b.WriteString(w.Annotation)
	if w.Object != "" {
		b.WriteString(" on ")
		b.WriteString(w.Object)
	}
	if w.Err != nil {
		b.WriteString(": ")
		b.WriteString(w.Err.Error())
	}
	if w.Effect != "" {
		b.WriteString("; ")
		b.WriteString(w.Effect)
	}
	return b.String()
}

// ApprovalMode says how long an approval lasts.
type ApprovalMode string

// Approval modes.
const (
	// ApprovalOnce is consumed by the first allowed write. Default.
	ApprovalOnce ApprovalMode = "once"
	// ApprovalGeneration is valid while parent.generation == approval.generation.
	ApprovalGeneration ApprovalMode = "generation"
	// ApprovalAlways is permanent and never pruned.
	ApprovalAlways ApprovalMode = "always"
)

// Approval approves drift of one child (entry of kausality.io/approvals on
// the parent). The namespace is implicit: the parent's. "*" in apiVersion,
// kind or name matches anything (as in the reference).
type Approval struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	// Namespace of the child, for a namespaced child of a cluster-scoped
	// parent, whose children may be in any namespace; empty matches any
	// (a namespaced parent's children are in its own namespace).
	Namespace string `json:"namespace,omitempty"`
	// Generation of the parent the approval is for. Required for once and
	// generation, ignored for always.
	Generation int64 `json:"generation,omitempty"`
	// Mode defaults to once.
	Mode ApprovalMode `json:"mode,omitempty"`
}

// EffectiveMode returns Mode, defaulting to once.
func (a Approval) EffectiveMode() ApprovalMode {
	if a.Mode == "" {
		return ApprovalOnce
	}
	return a.Mode
}

// Rejection blocks drift of one child (entry of kausality.io/rejections).
type Rejection struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	// Namespace as for Approval: empty matches any.
	Namespace string `json:"namespace,omitempty"`
	// Generation of the parent the rejection applies to; 0 means always.
	Generation int64 `json:"generation,omitempty"`
	// Reason is shown in the denial.
	Reason string `json:"reason"`
}

// FreezeInfo is a parsed kausality.io/freeze value. Format:
//
//	kausality.io/freeze: "true"
//	kausality.io/freeze: '{"user":"alice@example.com","reason":"incident 42","at":"2026-01-24T10:30:00Z"}'
//
// "message" is accepted as an alias of "reason" (reference format).
type FreezeInfo struct {
	User   string `json:"user,omitempty"`
	Reason string `json:"reason,omitempty"`
	// At is when the freeze was applied (RFC 3339 recommended; kept as given).
	At string `json:"at,omitempty"`
	// Message is the reference's name for Reason; read only.
	Message string `json:"message,omitempty"`
	// Malformed is set when the value could not be parsed; the parent is
	// still frozen (fail safe).
	Malformed bool `json:"-"`
}

// Why returns Reason, or Message when Reason is empty.
func (f FreezeInfo) Why() string {
	if f.Reason != "" {
		return f.Reason
	}
	return f.Message
}

// String describes the freeze: "frozen by alice at 2026-..: incident 42".
func (f FreezeInfo) String() string {
	var b strings.Builder
	b.WriteString("frozen")
	if f.User != "" {
		b.WriteString(" by ")
		b.WriteString(f.User)
	}
	if f.At != "" {
		b.WriteString(" at ")
		b.WriteString(f.At)
	}
	if why := f.Why(); why != "" {
		b.WriteString(": ")
		b.WriteString(why)
	} else if f.Malformed {
		b.WriteString(" (malformed kausality.io/freeze annotation; treated as frozen)")
	} else if f.User == "" {
		b.WriteString(" (no user or reason given)")
	}
	return b.String()
}

// SnoozeInfo is a parsed snooze.
type SnoozeInfo struct {
	Until   time.Time
	User    string
	Message string
	// Annotation is the key it came from.
	Annotation string
}

// ActiveAt reports whether the snooze suppresses notifications at now.
func (s *SnoozeInfo) ActiveAt(now time.Time) bool {
	return s != nil && now.Before(s.Until)
}

// DriftMode is how drift is treated: logged with a warning, or denied. The
// kausality.io/mode annotation of an object or namespace holds log or
// enforce; a controller's setting in the proxy's configuration may also be
// shadow.
type DriftMode string

// Drift modes.
const (
	// ModeLog: drift is allowed with a warning.
	ModeLog DriftMode = "log"
	// ModeEnforce: drift without approval is denied.
	ModeEnforce DriftMode = "enforce"
	// ModeShadow, per controller only: decide and log what would happen,
	// forward the request byte for byte, change nothing.
	ModeShadow DriftMode = "shadow"
)

// ApprovalEntry is one entry of kausality.io/approvals as written on the
// parent. People write these by hand and tools add fields of their own, so
// the proxy, which rewrites the annotation when it consumes or prunes
// approvals, writes every entry it keeps back as Raw: an entry it cannot
// read is not its to delete, and a field it does not know is not its to
// drop.
type ApprovalEntry struct {
	// Raw is the entry's JSON exactly as written.
	Raw json.RawMessage
	// Approval is the decoded entry; meaningful only when Valid.
	Approval Approval
	// Valid: the entry decoded, names apiVersion, kind and name, and has a
	// known mode. Only valid entries approve, are pruned or are consumed.
	Valid bool
}

// NewApprovalEntry is the entry of an approval the proxy writes itself.
func NewApprovalEntry(a Approval) ApprovalEntry {
	raw, _ := json.Marshal(a) // cannot fail: strings and an integer
	return ApprovalEntry{Raw: raw, Approval: a, Valid: true}
}

// ParseApprovalEntries parses kausality.io/approvals entry by entry. An
// entry that cannot be decoded, lacks apiVersion, kind or name, or has an
// unknown mode is returned invalid with its raw form, plus a warning.
// ok is false when the value as a whole is not a JSON array (broken JSON,
// an object): then it holds no approvals, and since nobody can tell its
// entries apart, it must never be rewritten. An empty value is no entries.
func ParseApprovalEntries(v string) (entries []ApprovalEntry, warnings []Warning, ok bool) {
	if strings.TrimSpace(v) == "" {
		return nil, nil, true
	}
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raws); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			err = fmt.Errorf("want a JSON array of approvals, got %s", typeErr.Value)
		}
		return nil, []Warning{{Annotation: Approvals, Err: err, Effect: "treated as no approvals"}}, false
	}
	entries = make([]ApprovalEntry, len(raws))
	for i, raw := range raws {
		e := ApprovalEntry{Raw: raw}
		err := json.Unmarshal(raw, &e.Approval)
		a := e.Approval
		switch {
		case err != nil:
			err = fmt.Errorf("entry %d: %w", i, err)
		case a.APIVersion == "" || a.Kind == "" || a.Name == "":
			err = fmt.Errorf("entry %d: apiVersion, kind and name are required", i)
		case a.Mode != "" && a.Mode != ApprovalOnce && a.Mode != ApprovalGeneration && a.Mode != ApprovalAlways:
			err = fmt.Errorf("entry %d: unknown mode %q (want once, generation or always)", i, a.Mode)
		}
		if err != nil {
			e.Approval = Approval{}
			warnings = append(warnings, Warning{Annotation: Approvals, Err: err, Effect: "entry ignored (kept as written)"})
		} else {
			e.Valid = true
		}
		entries[i] = e
	}
	return entries, warnings, true
}

// ParseApprovals returns the valid approvals of kausality.io/approvals,
// with the warnings of ParseApprovalEntries. Code that rewrites the
// annotation must use ParseApprovalEntries, which keeps the others.
func ParseApprovals(v string) ([]Approval, []Warning) {
	entries, warnings, _ := ParseApprovalEntries(v)
	var out []Approval
	for _, e := range entries {
		if e.Valid {
			out = append(out, e.Approval)
		}
	}
	return out, warnings
}

// EncodeApprovalEntries renders entries as a JSON array, each entry as
// written. An empty list renders as "" (remove the annotation).
func EncodeApprovalEntries(list []ApprovalEntry) string {
	if len(list) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, e := range list {
		if i > 0 {
			b.WriteByte(',')
		}
		if len(e.Raw) == 0 {
			e = NewApprovalEntry(e.Approval)
		}
		b.Write(e.Raw)
	}
	b.WriteByte(']')
	return b.String()
}

// ParseRejections parses kausality.io/rejections. A value that is not a
// JSON array of rejections, and an entry that would match nothing its
// author meant it to (no object, no apiVersion, kind or name, a pattern
// other than "*" such as "web-*", a negative generation), return a
// warning; the caller must then treat every child as rejected. A
// rejection is a person holding something back: one that silently
// matched nothing would let through what it was written to stop.
func ParseRejections(v string) ([]Rejection, *Warning) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raws); err != nil {
		return nil, &Warning{Annotation: Rejections, Err: err, Effect: "treated as rejected"}
	}
	list := make([]Rejection, len(raws))
	for i, raw := range raws {
		var fields map[string]json.RawMessage
		err := json.Unmarshal(raw, &fields)
		if err == nil && fields == nil {
			err = errors.New("not an object")
		}
		if err == nil {
			err = json.Unmarshal(raw, &list[i])
		}
		if err == nil {
			err = rejectionProblem(list[i])
		}
		if err != nil {
			return nil, &Warning{Annotation: Rejections, Err: fmt.Errorf("entry %d: %w", i, err), Effect: "treated as rejected"}
		}
	}
	return list, nil
}

// rejectionProblem says why r would match nothing its author meant.
func rejectionProblem(r Rejection) error {
	switch {
	case r.APIVersion == "" || r.Kind == "" || r.Name == "":
		return errors.New(`apiVersion, kind and name are required ("*" matches any)`)
	case r.Generation < 0:
		return fmt.Errorf("generation %d is negative (0 means every generation)", r.Generation)
	}
	for _, f := range []string{r.APIVersion, r.Kind, r.Name, r.Namespace} {
		if f != "*" && strings.Contains(f, "*") {
			return fmt.Errorf(`%q is no pattern: a field is a value or "*", which matches any`, f)
		}
	}
	return nil
}

// ParseFreeze parses kausality.io/freeze. It returns nil when not frozen:
// the value is empty or "false". "true" is frozen without details. A JSON
// object is frozen with details. Anything else is frozen (Malformed) plus a
// warning.
func ParseFreeze(v string) (*FreezeInfo, *Warning) {
	t := strings.TrimSpace(v)
	switch t {
	case "", "false":
		return nil, nil
	case "true":
		return &FreezeInfo{}, nil
	}
	var f FreezeInfo
	err := json.Unmarshal([]byte(t), &f)
	if err == nil && !strings.HasPrefix(t, "{") {
		err = errors.New(`want "true" or a JSON object {"user":..,"reason":..,"at":..}`)
	}
	if err != nil {
		return &FreezeInfo{Malformed: true}, &Warning{Annotation: Freeze, Err: err, Effect: "treated as frozen"}
	}
	return &f, nil
}

// ParseSnooze reads kausality.io/snooze-until (RFC 3339) and, if absent,
// kausality.io/snooze (JSON {"expiry","user","message"} or RFC 3339). It
// returns nil when not set. A malformed value returns nil (not snoozed:
// notifications keep flowing) plus a warning.
func ParseSnooze(annotations map[string]string) (*SnoozeInfo, *Warning) {
	if v := strings.TrimSpace(annotations[SnoozeUntil]); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, &Warning{Annotation: SnoozeUntil, Err: err, Effect: "treated as not snoozed"}
		}
		return &SnoozeInfo{Until: t, Annotation: SnoozeUntil}, nil
	}
	v := strings.TrimSpace(annotations[Snooze])
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return &SnoozeInfo{Until: t, Annotation: Snooze}, nil
	}
	var s struct {
		Expiry  time.Time `json:"expiry"`
		User    string    `json:"user"`
		Message string    `json:"message"`
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, &Warning{Annotation: Snooze, Err: err, Effect: "treated as not snoozed"}
	}
	return &SnoozeInfo{Until: s.Expiry, User: s.User, Message: s.Message, Annotation: Snooze}, nil
}

// ParseMode parses a kausality.io/mode value. Empty means unset (ok=false,
// no warning). "log" and "enforce" (case-insensitive) are valid. Anything
// else is enforce (fail safe) plus a warning.
func ParseMode(v string) (mode DriftMode, set bool, w *Warning) {
	t := strings.ToLower(strings.TrimSpace(v))
	switch t {
	case "":
		return "", false, nil
	case string(ModeLog):
		return ModeLog, true, nil
	case string(ModeEnforce):
		return ModeEnforce, true, nil
	}
	return ModeEnforce, true, &Warning{Annotation: Mode,
		Err:    fmt.Errorf("unknown mode %q (want log or enforce)", v),
		Effect: "treated as enforce"}
}
