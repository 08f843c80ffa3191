// Package controllerid decides whether a write comes from the controller of
// the written object's parent.
//
// Primary method (the Kausality design's admission design): the controller is the field manager
// that owns f:status.f:observedGeneration in the parent's managedFields. The
// write is the controller's when its effective field manager equals that
// manager. FieldsV1 is parsed with structured-merge-diff.
//
// Fallback (the Kausality design's user-hash identity), used when the parent has no such entry or
// the request has no field manager: user hashes. The parent's
// kausality.io/controllers lists hashes of users that wrote its status; the
// child's kausality.io/updaters lists hashes of users that changed its
// desired state. Hashes are 5-char base36 of sha256(username or UID); at
// most 5 are kept, most recent last.
package controllerid

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
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

// Hash returns the 5-character base36 hash of a user identifier (first 4
// bytes of sha256 as a big-endian uint32, base36, zero-padded, first 5
// characters). Compatible with Kausality's HashUsername.
func Hash(id string) string {
	sum := sha256.Sum256([]byte(id))
	s := strconv.FormatUint(uint64(binary.BigEndian.Uint32(sum[:4])), 36)
	for len(s) < 5 {
		s = "0" + s
	}
	return s[:5]
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

// Intersect returns the hashes of b that are also in a, in b's order.
func Intersect(a, b []string) []string {
	var out []string
	for _, h := range b {
		if ContainsHash(a, h) {
			out = append(out, h)
		}
	}
	return out
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
	MethodManagedFields Method = "managedFields"
	MethodUserHash      Method = "userHash"
)

// Identity is the result of Identify.
type Identity struct {
	Method Method
	// Determined is false when the user-hash method cannot tell (several
	// child updaters and no parent controllers): be lenient, no drift check.
	Determined bool
	// IsController: the write comes from the parent's controller.
	IsController bool
	// Managers owning status.observedGeneration (managedFields method).
	Managers []string
	// ControllerHashes is the controller set of the user-hash method.
	ControllerHashes []string
	// Reason explains the outcome.
	Reason string
	// Err is a managedFields parse problem (the fallback was used).
	Err error
}

// IdentifyByHash is the Kausality design's user-hash algorithm:
//
//	if child has 1 updater:              controller = that updater
//	else if parent has controllers:      controller = intersection(child.updaters, parent.controllers)
//	else:                                can't determine → lenient
//	isController = userHash in controller set
//
// One refinement: a child without any updaters (a CREATE, or a child that
// predates kausality) is not narrowed; its controller set is the parent's
// controllers (an empty intersection would make every CREATE a new origin).
func IdentifyByHash(userHash string, childUpdaters, parentControllers []string) Identity {
	id := Identity{Method: MethodUserHash, Determined: true}
	switch {
	case len(childUpdaters) == 1:
		id.ControllerHashes = childUpdaters
		id.Reason = "child has a single updater"
	case len(parentControllers) > 0 && len(childUpdaters) == 0:
		id.ControllerHashes = parentControllers
		id.Reason = "child has no updaters; parent controllers"
	case len(parentControllers) > 0:
		id.ControllerHashes = Intersect(parentControllers, childUpdaters)
		id.Reason = "intersection of child updaters and parent controllers"
	default:
		id.Determined = false
		id.Reason = "cannot determine the controller: child has no single updater and the parent has no " + annotations.Controllers + " annotation"
		return id
	}
	id.IsController = ContainsHash(id.ControllerHashes, userHash)
	return id
}

// Identify decides whether a write to a child of parent comes from the
// parent's controller. fieldManager is the request's effective field
// manager; userHash is Hash(UserIdentifier(user)); childUpdaters are the
// hashes in the stored child's kausality.io/updaters (nil on CREATE).
func Identify(parent *unstructured.Unstructured, fieldManager, userHash string, childUpdaters []string) Identity {
	managers, err := ObservedGenerationManagers(parent)
	if len(managers) > 0 && fieldManager != "" {
		id := Identity{Method: MethodManagedFields, Determined: true, Managers: managers, Err: err}
		id.IsController = ContainsHash(managers, fieldManager)
		if id.IsController {
			id.Reason = fmt.Sprintf("field manager %q owns the parent's status.observedGeneration", fieldManager)
		} else {
			id.Reason = fmt.Sprintf("field manager %q is not the parent's controller %q", fieldManager, strings.Join(managers, ","))
		}
		return id
	}
	var controllers []string
	if parent != nil {
		controllers = ParseHashes(parent.GetAnnotations()[annotations.Controllers])
	}
	id := IdentifyByHash(userHash, childUpdaters, controllers)
	id.Managers, id.Err = managers, err
	if len(managers) > 0 {
		id.Reason = "no field manager on the request; " + id.Reason
	}
	return id
}
