package authn

import (
	"fmt"
	"maps"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// addedImpersonation is setImpersonation written with http.Header's Set
// and Add: the headers it writes are the reference.
func addedImpersonation(h http.Header, u user.Info) {
	name := u.GetName()
	h.Set(authenticationv1.ImpersonateUserHeader, name)
	if uid := u.GetUID(); uid != "" {
		h.Set(authenticationv1.ImpersonateUIDHeader, uid)
	}
	for _, g := range impersonatedGroups(name, u.GetGroups()) {
		h.Add(authenticationv1.ImpersonateGroupHeader, g)
	}
	extra := u.GetExtra()
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		for _, v := range extra[k] {
			var b strings.Builder
			for i := 0; i < len(k); i++ {
				if c := k[i]; !isTokenChar(c) || c == '%' || c >= 'A' && c <= 'Z' {
					fmt.Fprintf(&b, "%%%02X", c)
				} else {
					b.WriteByte(c)
				}
			}
			h.Add(authenticationv1.ImpersonateUserExtraHeaderPrefix+b.String(), v)
		}
	}
}

func TestSetImpersonationMatchesHeaderAdd(t *testing.T) {
	for _, k := range []string{authenticationv1.ImpersonateUserHeader, authenticationv1.ImpersonateUIDHeader, authenticationv1.ImpersonateGroupHeader} {
		if c := textproto.CanonicalMIMEHeaderKey(k); c != k {
			t.Fatalf("%s is assigned as is but its canonical spelling is %s", k, c)
		}
	}
	users := []*user.DefaultInfo{
		{Name: "alice", Groups: []string{"dev", "system:authenticated"}},
		{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}},
		{Name: "system:serviceaccount:ns:sa", UID: "9d3c", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"},
			Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=abc"}, "authentication.kubernetes.io/pod-name": {"p"}}},
		{Name: "system:serviceaccount:ns:sa"},
		{Name: "jane", UID: "u", Groups: []string{"a"},
			Extra: map[string][]string{"Scopes": {"x"}, "scopes": {"y", "z"}, "empty": {}, "100%": {"p"}, "with space": {"s"}, "ünïcode/key": {"u"}, "a-b_c": {"t"}}},
	}
	for _, u := range users {
		got, want := http.Header{}, http.Header{}
		setImpersonation(got, u)
		addedImpersonation(want, u)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", u.Name, got, want)
		}
		// The header's values are its own.
		for _, values := range got {
			for i := range values {
				values[i] = "changed"
			}
		}
		if slices.Contains(u.Groups, "changed") || slices.ContainsFunc(slices.Collect(maps.Values(u.Extra)), func(v []string) bool { return slices.Contains(v, "changed") }) {
			t.Fatalf("%s: the headers share values with the user", u.Name)
		}
	}
}

func TestHeaderKeyEscape(t *testing.T) {
	for in, want := range map[string]string{
		"scopes":           "scopes",
		"example.com/team": "example.com%2Fteam",
		"100%":             "100%25",
		"with space":       "with%20space",
		"ü":                "%C3%BC",
		"":                 "",
		"a~b|c":            "a~b|c",
		// kube-apiserver lower-cases the header name before decoding it.
		"Scopes":  "%53copes",
		"aDMIN-x": "a%44%4D%49%4E-x",
	} {
		if got := headerKeyEscape(in); got != want {
			t.Errorf("headerKeyEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
