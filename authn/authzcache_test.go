package authn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	authzwebhook "k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	authzmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
)

// countingAuthorizer answers with a fixed decision and counts the questions
// that reached it.
type countingAuthorizer struct {
	decision authorizer.Decision
	err      error
	calls    int
}

func (c *countingAuthorizer) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	c.calls++
	return c.decision, "because", c.err
}

func baseAttributes() *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: "alice", UID: "u1", Groups: []string{"g1", "g2"},
			Extra: map[string][]string{"scopes": {"a", "b"}, "other": {"x"}}},
		Verb: "patch", Namespace: "ns", APIGroup: "apps", APIVersion: "v1", Resource: "replicasets",
		Name: "rs", ResourceRequest: true,
	}
}

func TestAuthorizationKeyTellsQuestionsApart(t *testing.T) {
	label, err := labels.NewRequirement("app", selection.Equals, []string{"web"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(a *authorizer.AttributesRecord)
	}{
		{"user name", func(a *authorizer.AttributesRecord) { a.User.(*user.DefaultInfo).Name = "bob" }},
		{"uid", func(a *authorizer.AttributesRecord) { a.User.(*user.DefaultInfo).UID = "u2" }},
		{"group", func(a *authorizer.AttributesRecord) { a.User.(*user.DefaultInfo).Groups = []string{"g1"} }},
		{"group order", func(a *authorizer.AttributesRecord) { a.User.(*user.DefaultInfo).Groups = []string{"g2", "g1"} }},
		{"group boundary", func(a *authorizer.AttributesRecord) { a.User.(*user.DefaultInfo).Groups = []string{"g1g2"} }},
		{"extra value", func(a *authorizer.AttributesRecord) { a.User.(*user.DefaultInfo).Extra["scopes"] = []string{"a"} }},
		{"extra key", func(a *authorizer.AttributesRecord) {
			a.User.(*user.DefaultInfo).Extra = map[string][]string{"scopes": {"a", "b"}}
		}},
		{"no user", func(a *authorizer.AttributesRecord) { a.User = nil }},
		{"verb", func(a *authorizer.AttributesRecord) { a.Verb = "update" }},
		{"namespace", func(a *authorizer.AttributesRecord) { a.Namespace = "other" }},
		{"namespace and name swapped", func(a *authorizer.AttributesRecord) { a.Namespace, a.Name = a.Name, a.Namespace }},
		{"group of resource", func(a *authorizer.AttributesRecord) { a.APIGroup = "" }},
		{"version", func(a *authorizer.AttributesRecord) { a.APIVersion = "v2" }},
		{"resource", func(a *authorizer.AttributesRecord) { a.Resource = "deployments" }},
		{"subresource", func(a *authorizer.AttributesRecord) { a.Subresource = "status" }},
		{"name", func(a *authorizer.AttributesRecord) { a.Name = "" }},
		{"non-resource", func(a *authorizer.AttributesRecord) { a.ResourceRequest = false; a.Path = "/healthz" }},
		{"label selector", func(a *authorizer.AttributesRecord) { a.LabelSelectorRequirements = labels.Requirements{*label} }},
		{"field selector", func(a *authorizer.AttributesRecord) {
			a.FieldSelectorRequirements = fields.Requirements{{Operator: selection.Equals, Field: "metadata.name", Value: "x"}}
		}},
	}
	base, ok := authorizationKey(baseAttributes())
	if !ok {
		t.Fatal("base attributes are not cacheable")
	}
	same, _ := authorizationKey(baseAttributes())
	if same != base {
		t.Fatalf("one question has two keys: %q and %q", base, same)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := baseAttributes()
			tt.change(a)
			key, ok := authorizationKey(a)
			if !ok {
				t.Fatal("not cacheable")
			}
			if key == base {
				t.Errorf("the key does not change with the %s: %q", tt.name, key)
			}
		})
	}
}

func TestAuthorizationKeyRefusesHugeAttributes(t *testing.T) {
	a := baseAttributes()
	a.Name = strings.Repeat("n", maxCachedAttributesSize)
	if _, ok := authorizationKey(a); ok {
		t.Error("attributes of 10000 bytes are cacheable; the webhook's cache refuses them")
	}
}

func TestCachedAuthorizer(t *testing.T) {
	tests := []struct {
		name          string
		decision      authorizer.Decision
		err           error
		allowed, deny time.Duration
		wantCalls     int
	}{
		{"allowed is kept for the authorized TTL", authorizer.DecisionAllow, nil, time.Minute, 0, 1},
		{"allowed with no authorized TTL is asked again", authorizer.DecisionAllow, nil, 0, time.Minute, 3},
		{"denied is kept for the unauthorized TTL", authorizer.DecisionDeny, nil, 0, time.Minute, 1},
		{"no opinion is kept for the unauthorized TTL", authorizer.DecisionNoOpinion, nil, 0, time.Minute, 1},
		{"denied with no unauthorized TTL is asked again", authorizer.DecisionDeny, nil, time.Minute, 0, 3},
		{"an error is never kept", authorizer.DecisionNoOpinion, errors.New("unreachable"), time.Minute, time.Minute, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := &countingAuthorizer{decision: tt.decision, err: tt.err}
			c := newCachedAuthorizer(next, tt.allowed, tt.deny)
			for range 3 {
				d, reason, err := c.Authorize(context.Background(), baseAttributes())
				if d != tt.decision || reason != "because" || !errors.Is(err, tt.err) {
					t.Fatalf("got (%v, %q, %v), want (%v, %q, %v)", d, reason, err, tt.decision, "because", tt.err)
				}
			}
			if next.calls != tt.wantCalls {
				t.Errorf("the authorizer behind the cache was asked %d times, want %d", next.calls, tt.wantCalls)
			}
		})
	}
}

func TestCachedAuthorizerEntriesExpire(t *testing.T) {
	next := &countingAuthorizer{decision: authorizer.DecisionAllow}
	c := newCachedAuthorizer(next, 50*time.Millisecond, 50*time.Millisecond)
	ctx := context.Background()
	if _, _, err := c.Authorize(ctx, baseAttributes()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, _, err := c.Authorize(ctx, baseAttributes()); err != nil {
		t.Fatal(err)
	}
	if next.calls != 2 {
		t.Errorf("an expired answer was reused: %d questions reached the authorizer, want 2", next.calls)
	}
}

// BenchmarkCachedAuthorization compares a cache hit of the SubjectAccessReview
// webhook authorizer's own cache (JSON-encoded review as key) with a hit of
// cachedAuthorizer, for the attributes of a controller's write.
func BenchmarkCachedAuthorization(b *testing.B) {
	allow := func(authorizationv1.SubjectAccessReviewSpec) (bool, string) { return true, "" }
	rc, err := bridgeRESTClient(authorizationv1.SchemeGroupVersion, &reviewTransport{sars: newFakeSARs(allow).AuthorizationV1().SubjectAccessReviews()})
	if err != nil {
		b.Fatal(err)
	}
	webhook, err := authzwebhook.NewFromInterface(authorizationGroup{client: rc}, time.Minute, time.Minute,
		*tokenwebhook.DefaultRetryBackoff(), authorizer.DecisionNoOpinion, authzmetrics.NoopAuthorizerMetrics{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(Config{SubjectAccessReviews: newFakeSARs(allow).AuthorizationV1().SubjectAccessReviews(), AuthorizedTTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	attrs := baseAttributes()
	attrs.User = &user.DefaultInfo{Name: "system:serviceaccount:kube-system:replicaset-controller", UID: "0b9f",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	for _, bc := range []struct {
		name  string
		authz authorizer.Authorizer
	}{{"webhook's own cache", webhook}, {"cachedAuthorizer", a.Authorizer()}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			if d, _, err := bc.authz.Authorize(ctx, attrs); d != authorizer.DecisionAllow || err != nil {
				b.Fatalf("got %v, %v", d, err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _, _ = bc.authz.Authorize(ctx, attrs)
			}
		})
	}
}
