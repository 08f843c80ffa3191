// Package annotations defines the kausality.io/* annotation keys, which of
// them are system-owned and which are user-editable, and typed parsing of
// their values with fail-safe semantics.
//
// The formats are compatible with Kausality (the admission-webhook
// reference): approvals and rejections are compact JSON arrays, freeze is
// "true" or a JSON object, snooze-until is an RFC 3339 timestamp, the hash
// lists are comma-separated.
//
// Malformed annotations fail safe, and the warning says which one and why:
//   - broken approvals JSON counts as no approvals;
//   - broken rejections JSON counts as rejected;
//   - broken freeze counts as frozen;
//   - a broken snooze counts as not snoozed (notifications are sent);
//   - an unknown mode value counts as enforce.
//
// Each case yields a Warning that names the annotation and the error.
package annotations

import (
	"strings"
)

// LastApplied is kubectl's last-applied-configuration, from which kubectl
// apply computes what to remove: the controls it names are guarded as the
// controls themselves.
const LastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Prefix is the common prefix of every kausality annotation.
const Prefix = "kausality.io/"

// User annotations: people (and tools acting for them) edit these freely.
// RBAC on the object governs who may. Controllers never overwrite them: on a
// controller write they are taken from the stored object.
const (
	// Approvals on a parent: JSON array of Approval.
	Approvals = "kausality.io/approvals"
	// Rejections on a parent: JSON array of Rejection.
	Rejections = "kausality.io/rejections"
	// Freeze on a parent: "true" or a JSON Freeze object. Blocks every
	// desired-state change of its children, expected ones included.
	Freeze = "kausality.io/freeze"
	// SnoozeUntil on a parent: RFC 3339 timestamp. Suppresses drift
	// notifications (not decisions) until then.
	SnoozeUntil = "kausality.io/snooze-until"
	// Snooze is the newer reference spelling: a JSON object
	// {"expiry":..,"user":..,"message":..} or an RFC 3339 timestamp. It is
	// read (after SnoozeUntil) for compatibility.
	Snooze = "kausality.io/snooze"
	// Mode on an object or a namespace: "log" or "enforce".
	Mode = "kausality.io/mode"
	// AllowanceMode on an object or a namespace: "shadow", "log" or
	// "enforce" turns allowances on (see intercept/allowance); unset is
	// off. Like Mode, it holds back the object's controller.
	AllowanceMode = "kausality.io/allowance-mode"
	// TraceLabelPrefix: kausality.io/trace-<label> annotations on an object
	// become labels[<label>] of that object's trace hop.
	TraceLabelPrefix = "kausality.io/trace-"
)

// System annotations: computed by kausality. They are never taken from a
// request: the proxy computes trace and updaters, and keeps the rest as
// stored (it writes them itself with side writes).
const (
	// Trace: JSON array of hops, the causal chain of the object.
	Trace = "kausality.io/trace"
	// Updaters on a child: comma-separated 5-char base36 hashes of users
	// that changed the desired state (max 5, most recent last).
	Updaters = "kausality.io/updaters"
	// Controllers on a parent: comma-separated hashes of users whose
	// status writes advanced its observedGeneration (max 5, most recent
	// first; 16 characters, or Kausality's 5; see controllerid).
	Controllers = "kausality.io/controllers"
	// Phase on a parent: "initializing" | "initialized" (high-water mark).
	Phase = "kausality.io/phase"
	// ObservedGeneration on a parent without status.observedGeneration: the
	// generation seen by the last status write.
	ObservedGeneration = "kausality.io/observedGeneration"
	// Reservations on a parent: comma-separated entries <record>=<digest>
	// for the once approvals the proxy has taken off it for writes not yet
	// settled: the name of each reservation record, and the digest of the
	// record's content as the proxy wrote it. A record is honoured only
	// while its parent names it with the digest of exactly what it holds,
	// so whoever may write records but not the parent can neither invent
	// one nor rewrite one.
	Reservations = "kausality.io/reservations"
	// ApprovalsBy on any object: who added each entry of its
	// kausality.io/approvals through the proxy, "<user hash>:<digest>.<digest>"
	// groups (see Writers). The drift decision sets aside an
	// approval only the parent's controller gave.
	ApprovalsBy = "kausality.io/approvals-by"
	// ModesBy on any object or namespace: who set its kausality.io/mode
	// and kausality.io/allowance-mode through the proxy,
	// "mode=<user hash>:<digest of the value>,allowance-mode=…". A mode
	// set by the controller it would gate does not gate it.
	ModesBy = "kausality.io/modes-by"
	// Allowances on any object: JSON array of the mutations its controller
	// may make to its children, and why (see intercept/allowance). It has
	// the Kausal design's name, outside the kausality.io/ prefix, and is
	// one of kausality's annotations all the same.
	Allowances = "kausal.io/allowances"
	// LegacyInitialized is the first design's high-water mark
	// (`kausality.io/initialized: "true"`). It is honoured when read and
	// treated as a system annotation; it is never written.
	LegacyInitialized = "kausality.io/initialized"
)

// Phase annotation values.
const (
	PhaseInitializing = "initializing"
	PhaseInitialized  = "initialized"
)

// IsKausality reports whether key is one of kausality's annotations: a
// kausality.io/* one, or Allowances.
func IsKausality(key string) bool { return strings.HasPrefix(key, Prefix) || key == Allowances }

// IsSystem reports whether key is a system annotation (protected: never
// taken from a write request).
func IsSystem(key string) bool {
	switch key {
	case Trace, Updaters, Controllers, Phase, ObservedGeneration, LegacyInitialized, Reservations, ApprovalsBy, ModesBy, Allowances:
		return true
	}
	return false
}

// IsControl reports whether key is one of the controls people hold over
// the decisions about an object's children: approvals, rejections, freeze,
// snooze and mode. The controller those decisions judge must not hold them,
// or it could approve its own drift.
func IsControl(key string) bool {
	switch key {
	case Approvals, Rejections, Freeze, SnoozeUntil, Snooze, Mode, AllowanceMode:
		return true
	}
	return false
}

// ControlKeys lists the keys IsControl reports.
func ControlKeys() []string {
	return []string{Approvals, Rejections, Freeze, SnoozeUntil, Snooze, Mode, AllowanceMode}
}

// TraceLabel returns the label name of a kausality.io/trace-<label>
// annotation key, or "" if key is not one.
func TraceLabel(key string) string {
	if len(key) > len(TraceLabelPrefix) && strings.HasPrefix(key, TraceLabelPrefix) {
		return key[len(TraceLabelPrefix):]
	}
	return ""
}

// AddReservation returns the Reservations value with the record id added,
// vouching for the record's content by its digest.
func AddReservation(value, id, digest string) string {
	if HasReservation(value, id) {
		return value
	}
	entry := id + "=" + digest
	if value == "" {
		return entry
	}
	return value + "," + entry
}

// HasReservation reports whether the Reservations value names id.
func HasReservation(value, id string) bool {
	_, named := ReservationDigest(value, id)
	return named
}

// ReservationDigest returns the digest the Reservations value vouches for
// the record id with, and whether it names id at all. A name without a
// digest vouches for no content: its digest is "".
func ReservationDigest(value, id string) (digest string, named bool) {
	if id == "" {
		return "", false
	}
	for _, v := range strings.Split(value, ",") {
		if name, d := splitReservation(v); name == id {
			return d, true
		}
	}
	return "", false
}

// RemoveReservation returns the Reservations value without id, and
// whether it named id.
func RemoveReservation(value, id string) (string, bool) {
	var keep []string
	found := false
	for _, v := range strings.Split(value, ",") {
		v = strings.TrimSpace(v)
		switch name, _ := splitReservation(v); {
		case v == "":
		case name == id:
			found = true
		default:
			keep = append(keep, v)
		}
	}
	return strings.Join(keep, ","), found
}

func splitReservation(entry string) (id, digest string) {
	id, digest, _ = strings.Cut(strings.TrimSpace(entry), "=")
	return strings.TrimSpace(id), strings.TrimSpace(digest)
}
