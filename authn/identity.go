package authn

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apiserver/pkg/authentication/user"
)

// ValidateIdentity reports why u cannot be carried upstream exactly, or nil.
//
// The proxy re-encodes identities as Impersonate-* header values, and a value
// is not the same on both sides of an HTTP hop when it has leading or
// trailing white space (HTTP/1.1 parsers trim it, HTTP/2 keeps it), CR or LF
// (a header injection), or other control characters. A client certificate
// with O=" system:masters" would otherwise become a member of system:masters
// upstream on the HTTP/1.1 path. Such identities are refused outright rather
// than cleaned up: a cleaned-up name is somebody else's name.
func ValidateIdentity(u user.Info) error {
	if u == nil {
		return fmt.Errorf("no user")
	}
	if err := validIdentityValue("user name", u.GetName()); err != nil {
		return err
	}
	if u.GetName() == user.Anonymous && !slices.Contains(u.GetGroups(), user.AllUnauthenticated) {
		// A certificate can name system:anonymous; kube-apiserver gives
		// an impersonated system:anonymous the group
		// system:unauthenticated, which this user does not have.
		return fmt.Errorf("the user %s without the group %s cannot be impersonated as itself", user.Anonymous, user.AllUnauthenticated)
	}
	if uid := u.GetUID(); uid != "" {
		if err := validIdentityValue("uid", uid); err != nil {
			return err
		}
	}
	for _, g := range u.GetGroups() {
		if err := validIdentityValue("group", g); err != nil {
			return err
		}
	}
	extra := u.GetExtra()
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := validIdentityValue("extra key", k); err != nil {
			return err
		}
		for _, v := range extra[k] {
			// The label is only built for a value that fails: every
			// request of a caller with extra pays for this loop.
			if identityValueProblem(v) != "" {
				return validIdentityValue(fmt.Sprintf("extra %q value", k), v)
			}
		}
	}
	return nil
}

// validIdentityValue names the problem without echoing the value, which may
// be anything a certificate issuer or token webhook put there.
func validIdentityValue(what, v string) error {
	if v == "" {
		if what == "user name" {
			return fmt.Errorf("the %s is empty", what)
		}
		return nil
	}
	if problem := identityValueProblem(v); problem != "" {
		return fmt.Errorf("a %s %s", what, problem)
	}
	return nil
}

// identityValueProblem says what keeps a non-empty v from crossing an HTTP
// hop unchanged, or "".
func identityValueProblem(v string) string {
	if v == "" {
		return ""
	}
	if !utf8.ValidString(v) {
		return "is not valid UTF-8"
	}
	first, _ := utf8.DecodeRuneInString(v)
	last, _ := utf8.DecodeLastRuneInString(v)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return "has leading or trailing white space"
	}
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return "contains a control character (CR, LF, tab or another)"
	}
	return ""
}
