package body

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	sigsjson "sigs.k8s.io/json"
)

// maxRepeatedNamed bounds how many repeated members a refusal names.
const maxRepeatedNamed = 3

// unmarshalJSONOnce decodes a JSON request body into v as kube-apiserver
// reads JSON (case-sensitive, integers kept), and refuses one that has a
// member twice in one object, at any depth.
//
// kube-apiserver decodes the object of a built-in kind into its Go type,
// where a repeated member is decoded into what the first one left: two
// "spec" members are merged, each keeping what the other does not name.
// Decoded into a map, as the proxy decodes every body, the last one
// replaces the first. A write could so store changes the proxy never saw,
// under a settled or frozen parent; the same holds for an object that a
// merge patch or a JSON patch carries as a value, which kube-apiserver
// copies into the patched object as it was sent. No encoder writes a
// member twice, so such a body is refused (kube-apiserver itself refuses
// it only under fieldValidation=Strict).
func unmarshalJSONOnce(data []byte, v any) (syntaxErr error, repeated error) {
	strict, err := sigsjson.UnmarshalStrict(data, v, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return err, nil
	}
	if len(strict) == 0 {
		return nil, nil
	}
	named := make([]string, 0, maxRepeatedNamed)
	for _, e := range strict[:min(len(strict), maxRepeatedNamed)] {
		named = append(named, e.Error())
	}
	more := ""
	if len(strict) > maxRepeatedNamed {
		more = fmt.Sprintf(" and %d more", len(strict)-maxRepeatedNamed)
	}
	return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body has a member twice in one object (%s%s): "+
		"kube-apiserver merges the two for a built-in kind, where kausality-proxy reads the last, so what would be stored cannot be decided; "+
		"send each member once", strings.Join(named, ", "), more))
}

// CheckMembersOnce refuses a JSON patch or merge patch that has a member
// twice in one object (see unmarshalJSONOnce). A body that is not JSON
// passes: the patch's own decoding says what is wrong with it.
func CheckMembersOnce(data []byte) error {
	var v any
	_, repeated := unmarshalJSONOnce(data, &v)
	return repeated
}
