package authn

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
)

// impersonationPolicy allows alice (by group "impersonators") to impersonate
// a fixed set of things and nothing else.
func impersonationPolicy(spec authorizationv1.SubjectAccessReviewSpec) (bool, string) {
	ra := spec.ResourceAttributes
	if ra == nil || ra.Verb != "impersonate" || !slices.Contains(spec.Groups, "impersonators") {
		return false, "not an impersonator"
	}
	type key struct{ group, resource, subresource, namespace, name string }
	allowed := map[key]bool{
		{"", "users", "", "", "jane"}:                                         true,
		{"", "users", "", "", "system:anonymous"}:                             true,
		{"", "groups", "", "", "viewers"}:                                     true,
		{"", "groups", "", "", "system:unauthenticated"}:                      true,
		{"", "serviceaccounts", "", "ns1", "builder"}:                         true,
		{"authentication.k8s.io", "uids", "", "", "jane-uid"}:                 true,
		{"authentication.k8s.io", "userextras", "scopes", "", "read"}:         true,
		{"authentication.k8s.io", "userextras", "example.com/team", "", "a"}:  true,
		{"authentication.k8s.io", "userextras", "example.com/team", "", "b"}:  true,
		{"authentication.k8s.io", "userextras", "example.com/team", "", "zz"}: false,
	}
	if allowed[key{ra.Group, ra.Resource, ra.Subresource, ra.Namespace, ra.Name}] {
		return true, ""
	}
	return false, "RBAC: no impersonate rule"
}

func TestResolveImpersonation(t *testing.T) {
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"impersonators", "system:authenticated"}}
	mallory := &user.DefaultInfo{Name: "mallory", Groups: []string{"system:authenticated"}}

	type sar struct{ group, resource, subresource, namespace, name string }
	tests := []struct {
		name     string
		caller   user.Info
		headers  http.Header
		want     *user.DefaultInfo // nil: caller.User itself
		wantCode int32
		wantMsg  string
		wantSARs []sar // in order; nil: don't check
	}{
		{name: "no headers", caller: alice, headers: http.Header{"Accept": {"application/json"}}, wantSARs: []sar{}},
		{name: "empty Impersonate-User means none", caller: alice, headers: http.Header{"Impersonate-User": {""}}, wantSARs: []sar{}},
		{
			name: "user allowed", caller: alice, headers: http.Header{"Impersonate-User": {"jane"}},
			want:     &user.DefaultInfo{Name: "jane", Groups: []string{"system:authenticated"}, Extra: map[string][]string{}},
			wantSARs: []sar{{"", "users", "", "", "jane"}},
		},
		{
			name: "user denied", caller: alice, headers: http.Header{"Impersonate-User": {"system:admin"}},
			wantCode: 403, wantMsg: `users "system:admin" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope: RBAC: no impersonate rule`,
		},
		{
			name: "caller without rights is denied", caller: mallory, headers: http.Header{"Impersonate-User": {"jane"}},
			wantCode: 403, wantMsg: `User "mallory" cannot impersonate resource "users"`,
		},
		{
			name: "group allowed", caller: alice, headers: http.Header{"Impersonate-User": {"jane"}, "Impersonate-Group": {"viewers"}},
			want:     &user.DefaultInfo{Name: "jane", Groups: []string{"viewers", "system:authenticated"}, Extra: map[string][]string{}},
			wantSARs: []sar{{"", "users", "", "", "jane"}, {"", "groups", "", "", "viewers"}},
		},
		{
			name: "group denied", caller: alice, headers: http.Header{"Impersonate-User": {"jane"}, "Impersonate-Group": {"viewers", "system:masters"}},
			wantCode: 403, wantMsg: `groups "system:masters" is forbidden`,
		},
		{
			name: "group without user is a 400", caller: alice, headers: http.Header{"Impersonate-Group": {"viewers"}},
			wantCode: 400, wantMsg: "Impersonate-Group requested without Impersonate-User", wantSARs: []sar{},
		},
		{
			name: "uid allowed", caller: alice, headers: http.Header{"Impersonate-User": {"jane"}, "Impersonate-Uid": {"jane-uid"}},
			want:     &user.DefaultInfo{Name: "jane", UID: "jane-uid", Groups: []string{"system:authenticated"}, Extra: map[string][]string{}},
			wantSARs: []sar{{"", "users", "", "", "jane"}, {"authentication.k8s.io", "uids", "", "", "jane-uid"}},
		},
		{
			name: "uid denied", caller: alice, headers: http.Header{"Impersonate-User": {"jane"}, "Impersonate-Uid": {"root-uid"}},
			wantCode: 403, wantMsg: `uids.authentication.k8s.io "root-uid" is forbidden`,
		},
		{
			name: "uid without user is a 400", caller: alice, headers: http.Header{"Impersonate-Uid": {"jane-uid"}},
			wantCode: 400, wantMsg: "Impersonate-Uid requested without Impersonate-User",
		},
		{
			name: "extra allowed, key lower-cased and unescaped", caller: alice,
			headers: http.Header{
				"Impersonate-User":                     {"jane"},
				"Impersonate-Extra-Scopes":             {"read"},
				"Impersonate-Extra-Example.com%2fteam": {"a", "b"},
			},
			want: &user.DefaultInfo{Name: "jane", Groups: []string{"system:authenticated"},
				Extra: map[string][]string{"scopes": {"read"}, "example.com/team": {"a", "b"}}},
			wantSARs: []sar{
				{"", "users", "", "", "jane"},
				{"authentication.k8s.io", "userextras", "example.com/team", "", "a"},
				{"authentication.k8s.io", "userextras", "example.com/team", "", "b"},
				{"authentication.k8s.io", "userextras", "scopes", "", "read"},
			},
		},
		{
			name: "extra denied", caller: alice, headers: http.Header{"Impersonate-User": {"jane"}, "Impersonate-Extra-Scopes": {"cluster-admin"}},
			wantCode: 403, wantMsg: `userextras.authentication.k8s.io "cluster-admin" is forbidden: User "alice" cannot impersonate resource "userextras/scopes" in API group "authentication.k8s.io"`,
		},
		{
			name: "extra without user is a 400", caller: alice, headers: http.Header{"Impersonate-Extra-Scopes": {"read"}},
			wantCode: 400, wantMsg: "Impersonate-Extra-* requested without Impersonate-User",
		},
		{
			name: "service account allowed, gets service account groups", caller: alice,
			headers: http.Header{"Impersonate-User": {"system:serviceaccount:ns1:builder"}},
			want: &user.DefaultInfo{Name: "system:serviceaccount:ns1:builder",
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"}, Extra: map[string][]string{}},
			wantSARs: []sar{{"", "serviceaccounts", "", "ns1", "builder"}},
		},
		{
			name: "service account with explicit groups gets only those", caller: alice,
			headers: http.Header{"Impersonate-User": {"system:serviceaccount:ns1:builder"}, "Impersonate-Group": {"viewers"}},
			want: &user.DefaultInfo{Name: "system:serviceaccount:ns1:builder",
				Groups: []string{"viewers", "system:authenticated"}, Extra: map[string][]string{}},
		},
		{
			name: "service account denied", caller: alice, headers: http.Header{"Impersonate-User": {"system:serviceaccount:kube-system:admin"}},
			wantCode: 403, wantMsg: `serviceaccounts "admin" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "kube-system"`,
		},
		{
			name: "anonymous gets system:unauthenticated", caller: alice, headers: http.Header{"Impersonate-User": {"system:anonymous"}},
			want: &user.DefaultInfo{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}, Extra: map[string][]string{}},
		},
		{
			name: "system:unauthenticated suppresses system:authenticated", caller: alice,
			headers: http.Header{"Impersonate-User": {"jane"}, "Impersonate-Group": {"system:unauthenticated"}},
			want:    &user.DefaultInfo{Name: "jane", Groups: []string{"system:unauthenticated"}, Extra: map[string][]string{}},
		},
		{
			name: "non-canonical header names are resolved, not ignored", caller: alice,
			headers:  http.Header{"impersonate-user": {"system:admin"}},
			wantCode: 403, wantMsg: `users "system:admin" is forbidden`,
		},
		{
			name: "ambiguous Impersonate-User is a 400", caller: alice,
			headers:  http.Header{"Impersonate-User": {"jane", "system:admin"}},
			wantCode: 400, wantMsg: "multiple Impersonate-User headers",
		},
		{
			name: "the first denial stops the checks", caller: alice,
			headers:  http.Header{"Impersonate-User": {"root"}, "Impersonate-Group": {"viewers"}},
			wantCode: 403, wantSARs: []sar{{"", "users", "", "", "root"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sars := newFakeSARs(impersonationPolicy)
			a, err := New(Config{SubjectAccessReviews: sars.AuthorizationV1().SubjectAccessReviews(), WebhookRetryBackoff: noRetry})
			if err != nil {
				t.Fatal(err)
			}
			caller := &Caller{User: tt.caller, Method: MethodX509}
			before := tt.headers.Clone()

			got, err := a.ResolveImpersonation(context.Background(), caller, tt.headers)

			if !reflect.DeepEqual(tt.headers, before) {
				t.Errorf("headers modified: %v", tt.headers)
			}
			if tt.wantSARs != nil {
				var gotSARs []sar
				for _, s := range sars.recorded() {
					ra := s.ResourceAttributes
					if ra.Verb != "impersonate" || s.User != tt.caller.GetName() || !reflect.DeepEqual(s.Groups, tt.caller.GetGroups()) {
						t.Errorf("SAR not for the caller's impersonate verb: %+v", s)
					}
					gotSARs = append(gotSARs, sar{ra.Group, ra.Resource, ra.Subresource, ra.Namespace, ra.Name})
				}
				if len(gotSARs) != len(tt.wantSARs) || (len(gotSARs) > 0 && !reflect.DeepEqual(gotSARs, tt.wantSARs)) {
					t.Errorf("SARs = %v\nwant   %v", gotSARs, tt.wantSARs)
				}
			}
			if tt.wantCode != 0 {
				if err == nil {
					t.Fatalf("resolved to %#v, want HTTP %d", got, tt.wantCode)
				}
				if code := statusCode(t, err); code != tt.wantCode {
					t.Errorf("code = %d, want %d: %v", code, tt.wantCode, err)
				}
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("error %q\ndoes not contain %q", err.Error(), tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.want == nil {
				if got != tt.caller {
					t.Errorf("got %#v, want the caller's own user", got)
				}
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("effective user = %#v\nwant             %#v", got, tt.want)
			}
		})
	}
}

func TestResolveImpersonationFailures(t *testing.T) {
	alice := &Caller{User: &user.DefaultInfo{Name: "alice", Groups: []string{"impersonators"}}, Method: MethodX509}
	h := http.Header{"Impersonate-User": {"jane"}}

	t.Run("no SubjectAccessReview client: every attempt is 403", func(t *testing.T) {
		a, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.ResolveImpersonation(context.Background(), alice, h)
		if err == nil || statusCode(t, err) != 403 || !strings.Contains(err.Error(), "impersonation is not enabled") {
			t.Fatalf("want 403, got %v", err)
		}
		if u, err := a.ResolveImpersonation(context.Background(), alice, http.Header{}); err != nil || u != alice.User {
			t.Fatalf("without headers: %v, %v", u, err)
		}
	})
	t.Run("SubjectAccessReview failure is 503, never allowed", func(t *testing.T) {
		sars := newFakeSARs(impersonationPolicy)
		sars.fail = apierrors.NewInternalError(errors.New("apiserver overloaded"))
		a, err := New(Config{SubjectAccessReviews: sars.AuthorizationV1().SubjectAccessReviews(), WebhookRetryBackoff: noRetry})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.ResolveImpersonation(context.Background(), alice, h)
		if err == nil || statusCode(t, err) != 503 || !strings.Contains(err.Error(), `cannot impersonate resource "users"`) {
			t.Fatalf("want 503 naming the check, got %v", err)
		}
	})
	t.Run("nil caller is a 500", func(t *testing.T) {
		a, _ := New(Config{})
		if _, err := a.ResolveImpersonation(context.Background(), nil, h); err == nil || statusCode(t, err) != 500 {
			t.Fatalf("want 500, got %v", err)
		}
	})
	t.Run("decisions are cached", func(t *testing.T) {
		sars := newFakeSARs(impersonationPolicy)
		a, err := New(Config{SubjectAccessReviews: sars.AuthorizationV1().SubjectAccessReviews(), WebhookRetryBackoff: noRetry})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if _, err := a.ResolveImpersonation(context.Background(), alice, h); err != nil {
				t.Fatal(err)
			}
			if _, err := a.ResolveImpersonation(context.Background(), alice, http.Header{"Impersonate-User": {"root"}}); err == nil {
				t.Fatal("root allowed")
			}
		}
		if n := len(sars.recorded()); n != 2 {
			t.Errorf("%d SubjectAccessReviews for 3x2 identical checks, want 2 (allowed and denied both cached)", n)
		}
	})
}

// TestResolveImpersonationMatchesUpstream runs the same headers through
// ResolveImpersonation and through k8s.io/apiserver's own impersonation
// filter, with the same authorizer, and demands the same outcome.
func TestResolveImpersonationMatchesUpstream(t *testing.T) {
	caller := &user.DefaultInfo{Name: "alice", Groups: []string{"impersonators", "system:authenticated"}}
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		spec := authorizationv1.SubjectAccessReviewSpec{
			User: a.GetUser().GetName(), Groups: a.GetUser().GetGroups(),
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.GetVerb(), Group: a.GetAPIGroup(), Resource: a.GetResource(),
				Subresource: a.GetSubresource(), Namespace: a.GetNamespace(), Name: a.GetName(),
			},
		}
		if ok, reason := impersonationPolicy(spec); ok {
			return authorizer.DecisionAllow, reason, nil
		}
		return authorizer.DecisionNoOpinion, "RBAC: no impersonate rule", nil
	})
	ours := &Authenticator{authz: authz}

	cases := []http.Header{
		{},
		{"Impersonate-User": {""}},
		{"Impersonate-User": {"jane"}},
		{"Impersonate-User": {"root"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Group": {"viewers"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Group": {"viewers", "admins"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Group": {"system:unauthenticated"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Group": {""}},
		{"Impersonate-Group": {"viewers"}},
		{"Impersonate-Uid": {"jane-uid"}},
		{"Impersonate-Extra-Scopes": {"read"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Uid": {"jane-uid"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Uid": {"other"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Extra-Scopes": {"read"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Extra-Scopes": {"write"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Extra-Example.com%2fteam": {"a", "b"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Extra-Example.com%2fteam": {"a", "zz"}},
		{"Impersonate-User": {"system:anonymous"}},
		{"Impersonate-User": {"system:anonymous"}, "Impersonate-Group": {"viewers"}},
		{"Impersonate-User": {"system:serviceaccount:ns1:builder"}},
		{"Impersonate-User": {"system:serviceaccount:ns1:builder"}, "Impersonate-Group": {"viewers"}},
		{"Impersonate-User": {"system:serviceaccount:ns2:builder"}},
		{"Impersonate-User": {"system:serviceaccount:broken"}},
		{"Impersonate-User": {"jane"}, "Impersonate-Group": {"viewers"}, "Impersonate-Uid": {"jane-uid"},
			"Impersonate-Extra-Scopes": {"read"}, "Impersonate-Extra-Example.com%2fteam": {"a"}},
		{"Impersonate-Foo": {"bar"}},
	}
	for _, h := range cases {
		t.Run(fmtHeader(h), func(t *testing.T) {
			// upstream
			var upstreamUser user.Info
			handler := impersonation.WithImpersonation(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				upstreamUser, _ = genericrequest.UserFrom(r.Context())
			}), authz, scheme.Codecs)
			req := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
			req.Header = h.Clone()
			req = req.WithContext(genericrequest.WithUser(req.Context(), caller))
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)

			// ours
			got, err := ours.ResolveImpersonation(context.Background(), &Caller{User: caller, Method: MethodX509}, h)

			if rec.Code != http.StatusOK {
				if err == nil {
					t.Fatalf("upstream says %d (%s), we allowed %#v", rec.Code, rec.Body.String(), got)
				}
				if code := statusCode(t, err); int(code) != rec.Code {
					t.Fatalf("upstream says %d (%s), we say %d (%v)", rec.Code, rec.Body.String(), code, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("upstream allowed %#v, we said %v", upstreamUser, err)
			}
			if !sameUser(got, upstreamUser) {
				t.Fatalf("effective user differs:\nours     %#v\nupstream %#v", got, upstreamUser)
			}
		})
	}
}

func fmtHeader(h http.Header) string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, k+"="+strings.Join(h[k], ","))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ";")
}
