// Package policy is the logic of ApprovalPolicy and ClusterApprovalPolicy
// (their types are in api/v1alpha1): which policies apply to a writer, compiling their rules (CEL
// through k8s.io/apiserver's environment and cost limits, regular
// expressions) once per policy version, and matching a write against them.
// No I/O: the proxy's informers feed it objects, and the decision asks it
// whether a drift write matches.
package policy

import (
	"strings"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// ServiceAccountOf splits "system:serviceaccount:NS:NAME"; ok is false for
// any other user.
func ServiceAccountOf(user string) (v1alpha1.ServiceAccountRef, bool) {
	rest, found := strings.CutPrefix(user, "system:serviceaccount:")
	if !found {
		return v1alpha1.ServiceAccountRef{}, false
	}
	ns, name, found := strings.Cut(rest, ":")
	if !found || ns == "" || name == "" || strings.Contains(name, ":") {
		return v1alpha1.ServiceAccountRef{}, false
	}
	return v1alpha1.ServiceAccountRef{Namespace: ns, Name: name}, true
}
