// Package controllerid decides whether a write comes from the controller of
// the written object's parent.
//
// The controller is an authenticated user, not a field-manager string:
// about thirty controllers share "kube-controller-manager", every
// controller-runtime binary defaults to "manager", a renamed binary renames
// its manager, and anybody can send any manager string.
//
// Primary method (statusWriters): the parent's kausality.io/controllers
// lists hashes of the users whose status writes advanced its
// status.observedGeneration up to (never beyond) its generation, as the
// proxy forwarded them. When that record exists, the caller is the
// controller iff its user is in it, whatever field manager it sends.
//
// Fallback (managedFields, the Kausality design's admission design), when
// there is no record yet (the proxy was installed late, or the status was
// written around it): the field manager that owns
// f:status.f:observedGeneration in the parent's managedFields, compared
// with the request's effective field manager. FieldsV1 is parsed with
// structured-merge-diff.
//
// The record holds at most 5 users, most recent first, and a newcomer never
// pushes a recorded user out: a full record takes no newcomer until a
// person resets it. Anyone who may write a parent's status could otherwise
// evict its real controller, whose drift would then pass as a new origin.
//
// The proxy records 16-character hashes (base36 of 80 bits of
// sha256(username or UID)): finding a user name that matches one is out of
// reach. Kausality's 5-character hashes are still read, since a record may
// come from it, but a name matching one is found in milliseconds, so they
// count only while the record holds no long hash. The first status write
// of a user a short-only record names upgrades it to the long form, and
// the record then matches long hashes only. A child's
// kausality.io/updaters records who changed it with short hashes, and never
// decides who the parent's controller is.
package controllerid

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// MaxHashes is the maximum number of hashes kept in controllers/updaters.
const MaxHashes = 5

// UserIdentifier is what gets hashed: the username, or the UID when the
// username is empty.
func UserIdentifier(username, uid string) string {
	if username != "" {
		return username
	}
	return uid
}

// Lengths of the two hash forms.
const (
	ShortHashLen = 5
	LongHashLen  = 16
)

// Hash returns the 5-character base36 hash of a user identifier (first 4
// bytes of sha256 as a big-endian uint32, base36, zero-padded, first 5
// characters). Compatible with Kausality's HashUsername. It is short
// enough to be matched by a chosen name: it never decides who a controller
// is once a record holds a long hash.
func Hash(id string) string {
	sum := sha256.Sum256([]byte(id))
	s := strconv.FormatUint(uint64(binary.BigEndian.Uint32(sum[:4])), 36)
	for len(s) < 5 {
		s = "0" + s
	}
	return s[:5]
}

// LongHash returns the 16-character base36 hash of a user identifier: the
// first 10 bytes of sha256 as a big-endian number, base36, zero-padded. 80
// bits keep a chosen name from matching it.
func LongHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	s := new(big.Int).SetBytes(sum[:10]).Text(36)
	return strings.Repeat("0", LongHashLen-len(s)) + s
}

// User is a user's hashes in both forms.
type User struct {
	Long, Short string
}

// UserOf hashes a user identifier (see UserIdentifier).
func UserOf(id string) User {
	return User{Long: LongHash(id), Short: Hash(id)}
}

// isLong tells the proxy's hashes from Kausality's short ones.
func isLong(h string) bool { return len(h) == LongHashLen }

// hasLong reports whether a record holds a long hash: its short entries
// then match nobody.
func hasLong(recorded []string) bool {
	for _, h := range recorded {
		if isLong(h) {
			return true
		}
	}
	return false
}

func hasShort(recorded []string) bool {
	for _, h := range recorded {
		if len(h) == ShortHashLen {
			return true
		}
	}
	return false
}

// In reports whether a controllers record names u: by its long hash, or by
// its short hash while the record holds no long hash.
func (u User) In(recorded []string) bool {
	if ContainsHash(recorded, u.Long) {
		return true
	}
	return !hasLong(recorded) && ContainsHash(recorded, u.Short)
}

// ParseHashes splits a comma-separated hash list, dropping empty entries.
func ParseHashes(s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ContainsHash reports whether h is in hashes.
func ContainsHash(hashes []string, h string) bool {
	for _, x := range hashes {
		if x == h {
			return true
		}
	}
	return false
}

// AddHash appends h unless present and keeps the MaxHashes most recent.
// The input slice is not modified.
func AddHash(hashes []string, h string) []string {
	if ContainsHash(hashes, h) {
		return hashes
	}
	out := append(append(make([]string, 0, len(hashes)+1), hashes...), h)
	if len(out) > MaxHashes {
		out = out[len(out)-MaxHashes:]
	}
	return out
}

// AddHashValue adds h to a comma-separated annotation value. changed is
// false when h was already present.
func AddHashValue(value, h string) (newValue string, changed bool) {
	hashes := ParseHashes(value)
	if ContainsHash(hashes, h) {
		return value, false
	}
	return strings.Join(AddHash(hashes, h), ","), true
}

var observedGenerationPath = fieldpath.MakePathOrDie("status", "observedGeneration")

// ownsObservedGenerationAlone reports whether the f:status subtree of a
// managedFields entry is exactly {"f:observedGeneration":{}}: the whole of
// it in the parents the proxy caches, which keep no other entry. The
// parser reads that subtree the same way, at the cost of serializing it
// first, on every write decided under a parent.
func ownsObservedGenerationAlone(status interface{}) bool {
	st, _ := status.(map[string]interface{})
	if len(st) != 1 {
		return false
	}
	og, ok := st["f:observedGeneration"].(map[string]interface{})
	return ok && len(og) == 0
}

// ObservedGenerationManagers returns the managers whose managedFields entry
// owns status.observedGeneration (usually one; shared ownership under
// server-side apply can give more).
func ObservedGenerationManagers(obj *unstructured.Unstructured) ([]string, error) {
	if obj == nil {
		return nil, nil
	}
	meta, _ := obj.Object["metadata"].(map[string]interface{})
	entries, _ := meta["managedFields"].([]interface{})
	var managers []string
	var errs []string
	for i, e := range entries {
		m, _ := e.(map[string]interface{})
		if m == nil {
			continue
		}
		fields, _ := m["fieldsV1"].(map[string]interface{})
		// Only the status subtree matters; serialize just that for the parser.
		st, ok := fields["f:status"]
		if !ok {
			continue
		}
		if ownsObservedGenerationAlone(st) {
			mgr, _ := m["manager"].(string)
			if !ContainsHash(managers, mgr) {
				managers = append(managers, mgr)
			}
			continue
		}
		raw, err := json.Marshal(map[string]interface{}{"f:status": st})
		if err != nil {
			errs = append(errs, fmt.Sprintf("managedFields[%d]: %v", i, err))
			continue
		}
		var set fieldpath.Set
		if err := set.FromJSON(bytes.NewReader(raw)); err != nil {
			errs = append(errs, fmt.Sprintf("managedFields[%d]: %v", i, err))
			continue
		}
		if set.Has(observedGenerationPath) {
			mgr, _ := m["manager"].(string)
			if !ContainsHash(managers, mgr) {
				managers = append(managers, mgr)
			}
		}
	}
	if len(errs) > 0 {
		return managers, fmt.Errorf("parsing managedFields: %s", strings.Join(errs, "; "))
	}
	return managers, nil
}

// Method says how the controller was identified.
type Method string

// Methods.
const (
	// MethodStatusWriters: the parent's kausality.io/controllers record.
	MethodStatusWriters Method = "statusWriters"
	// MethodManagedFields: the managedFields owner of
	// status.observedGeneration, compared with the field manager.
	MethodManagedFields Method = "managedFields"
)

// Identity is the result of Identify.
type Identity struct {
	Method Method
	// Determined is false when nothing tells who the controller is: the
	// parent has reported no status through the proxy and has no
	// managedFields owner of status.observedGeneration (a new parent), or
	// the request has no field manager to compare.
	Determined bool
	// IsController: the write comes from the parent's controller.
	IsController bool
	// Managers owning status.observedGeneration (managedFields method).
	Managers []string
	// ControllerHashes is the parent's record (statusWriters method).
	ControllerHashes []string
	// Reason explains the outcome.
	Reason string
	// Err is a managedFields parse problem.
	Err error
}

// Identify decides whether a write by user, with effective field manager
// fieldManager, comes from parent's controller.
func Identify(parent *unstructured.Unstructured, fieldManager string, user User) Identity {
	if parent == nil {
		return Identity{Reason: "no parent"}
	}
	// One annotation is read in place: GetAnnotations copies them all,
	// the parent's trace included, on every write under it.
	controllers, _, _ := unstructured.NestedString(parent.Object, "metadata", "annotations", annotations.Controllers)
	if recorded := ParseHashes(controllers); len(recorded) > 0 {
		id := Identity{Method: MethodStatusWriters, Determined: true, ControllerHashes: recorded}
		id.IsController = user.In(recorded)
		switch {
		case id.IsController && !ContainsHash(recorded, user.Long):
			id.Reason = "the caller's status writes advanced the parent's observedGeneration (" + annotations.Controllers + ", Kausality's short hash: the record has no long hash yet)"
		case id.IsController:
			id.Reason = "the caller's status writes advanced the parent's observedGeneration (" + annotations.Controllers + ")"
		default:
			id.Reason = "the caller is not among the users whose status writes advanced the parent's observedGeneration (" + annotations.Controllers + ")"
		}
		return id
	}
	managers, err := ObservedGenerationManagers(parent)
	switch {
	case len(managers) > 0 && fieldManager != "":
		id := Identity{Method: MethodManagedFields, Determined: true, Managers: managers, Err: err}
		id.IsController = ContainsHash(managers, fieldManager)
		if id.IsController {
			id.Reason = fmt.Sprintf("no recorded status writer; field manager %q owns the parent's status.observedGeneration", fieldManager)
		} else {
			id.Reason = fmt.Sprintf("no recorded status writer; field manager %q is not the parent's controller %q", fieldManager, strings.Join(managers, ","))
		}
		return id
	case len(managers) > 0:
		return Identity{Method: MethodManagedFields, Managers: managers, Err: err,
			Reason: "no recorded status writer, and the request has no field manager to compare with the owner of status.observedGeneration"}
	}
	return Identity{Err: err, Reason: "the parent has reported no observedGeneration yet: its controller is not known"}
}

// Recording refusals: why a status write that advanced observedGeneration
// did not record its user.
const (
	RefusedFull   = "the record already holds its maximum of users, and a newcomer never pushes one out"
	RefusedLegacy = "the record holds only Kausality's short hashes, which a newcomer's long hash would void; it is upgraded by the next status write of a user it names"
)

// RecordController records u, the user of a status write that advanced the
// parent's observedGeneration, in a comma-separated controllers value:
//   - a recorded user moves first;
//   - a user a short-only record names by its short hash is upgraded to its
//     long hash, and the other short hashes are dropped (they would match
//     nobody beside a long hash, and hold places newcomers need);
//   - a newcomer goes first while the record has room, and is refused
//     (refusal says why) when the record is full or short-only: no recorded
//     user is ever pushed out by one.
//
// Entries the proxy does not write are kept as they are.
func RecordController(value string, u User) (newValue string, changed bool, refusal string) {
	hashes := ParseHashes(value)
	switch {
	case ContainsHash(hashes, u.Long):
		if hashes[0] == u.Long {
			return value, false, ""
		}
		return strings.Join(moveFirst(hashes, u.Long), ","), true, ""
	case !hasLong(hashes) && ContainsHash(hashes, u.Short):
		out := []string{u.Long}
		for _, h := range hashes {
			if len(h) != ShortHashLen {
				out = append(out, h)
			}
		}
		return strings.Join(out, ","), true, ""
	case len(hashes) >= MaxHashes:
		return value, false, RefusedFull
	case !hasLong(hashes) && hasShort(hashes):
		return value, false, RefusedLegacy
	}
	return strings.Join(append([]string{u.Long}, hashes...), ","), true, ""
}

// moveFirst puts h, which hashes holds, first.
func moveFirst(hashes []string, h string) []string {
	out := []string{h}
	for _, x := range hashes {
		if x != h {
			out = append(out, x)
		}
	}
	return out
}
