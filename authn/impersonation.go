package authn

import (
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
)

// impersonationRequest is one thing the caller asks to act as; each is
// authorized separately, like v1.ObjectReference in the upstream filter.
type impersonationRequest struct {
	kind      string // "ServiceAccount", "User", "Group", "UserExtra", "UID"
	namespace string // ServiceAccount only
	name      string // the user, SA, group, extra value or uid
	extraKey  string // UserExtra only
}

// ResolveImpersonation returns the user the request acts as.
//
// Without Impersonate-* headers that is caller.User. With them, every part of
// the requested identity is authorized for the caller with a
// SubjectAccessReview (verb "impersonate"), following the rules of
// k8s.io/apiserver/pkg/endpoints/filters/impersonation.WithImpersonation
// (legacy impersonation) exactly:
//
//   - Impersonate-User: resource "users" (core group), name = the user; a
//     system:serviceaccount:<ns>:<name> user is checked as resource
//     "serviceaccounts" in <ns> instead and, without Impersonate-Group, gets
//     the service account groups.
//   - Impersonate-Group (each value): resource "groups".
//   - Impersonate-Extra-<key> (each value): resource "userextras", subresource
//     <key> lower-cased and %-unescaped, group authentication.k8s.io.
//   - Impersonate-Uid: resource "uids", group authentication.k8s.io.
//   - Group, extra or uid without a user is a 400; an empty Impersonate-User
//     means "no impersonation".
//   - The result gets system:authenticated unless it has it or
//     system:unauthenticated (system:anonymous gets system:unauthenticated).
//
// Differences, all stricter: header names are matched case-insensitively (a
// hand-built http.Header with a non-canonical "impersonate-user" key is
// resolved, not silently ignored); more than one Impersonate-User or
// Impersonate-Uid value is a 400 instead of "first one wins"; and a
// SubjectAccessReview that could not be completed is a 503 instead of a 403.
//
// A denial is a 403 *apierrors.StatusError naming the denied resource and
// name, e.g. `users "system:admin" is forbidden: User "alice" cannot
// impersonate resource "users" in API group "" at the cluster scope`.
func (a *Authenticator) ResolveImpersonation(ctx context.Context, caller *Caller, h http.Header) (user.Info, error) {
	if caller == nil || caller.User == nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("no authenticated caller"))
	}
	h = impersonationHeaders(h)
	if len(h) == 0 {
		return caller.User, nil
	}
	requests, err := buildImpersonationRequests(h)
	if err != nil {
		return nil, err
	}
	if len(requests) == 0 {
		return caller.User, nil
	}

	groupsSpecified := len(h[authenticationv1.ImpersonateGroupHeader]) > 0
	username, uid := "", ""
	groups := []string{}
	extra := map[string][]string{}
	for _, req := range requests {
		attrs := &authorizer.AttributesRecord{
			User:            caller.User,
			Verb:            "impersonate",
			Name:            req.name,
			ResourceRequest: true,
		}
		switch req.kind {
		case "ServiceAccount":
			attrs.Resource = "serviceaccounts"
			attrs.Namespace = req.namespace
			username = serviceaccount.MakeUsername(req.namespace, req.name)
			if !groupsSpecified {
				groups = serviceaccount.MakeGroupNames(req.namespace)
			}
		case "User":
			attrs.Resource = "users"
			username = req.name
		case "Group":
			attrs.Resource = "groups"
			groups = append(groups, req.name)
		case "UserExtra":
			attrs.APIGroup = authenticationv1.SchemeGroupVersion.Group
			attrs.APIVersion = authenticationv1.SchemeGroupVersion.Version
			attrs.Resource = "userextras"
			attrs.Subresource = req.extraKey
			extra[req.extraKey] = append(extra[req.extraKey], req.name)
		case "UID":
			attrs.APIGroup = authenticationv1.SchemeGroupVersion.Group
			attrs.APIVersion = authenticationv1.SchemeGroupVersion.Version
			attrs.Resource = "uids"
			uid = req.name
		}
		if err := a.authorizeImpersonation(ctx, attrs); err != nil {
			return nil, err
		}
	}

	if username != user.Anonymous {
		if !slices.Contains(groups, user.AllAuthenticated) && !slices.Contains(groups, user.AllUnauthenticated) {
			groups = append(groups, user.AllAuthenticated)
		}
	} else if !slices.Contains(groups, user.AllUnauthenticated) {
		groups = append(groups, user.AllUnauthenticated)
	}
	return &user.DefaultInfo{Name: username, UID: uid, Groups: groups, Extra: extra}, nil
}

func (a *Authenticator) authorizeImpersonation(ctx context.Context, attrs *authorizer.AttributesRecord) error {
	if a.authz == nil {
		return responsewriters.ForbiddenStatusError(attrs, "impersonation is not enabled on this proxy (no SubjectAccessReview client)")
	}
	decision, reason, err := a.authz.Authorize(ctx, attrs)
	switch {
	case decision == authorizer.DecisionAllow:
		return nil
	case err != nil && decision != authorizer.DecisionDeny:
		return apierrors.NewServiceUnavailable(fmt.Sprintf("unable to authorize impersonation: %s: SubjectAccessReview failed: %v",
			responsewriters.ForbiddenStatusError(attrs, "").ErrStatus.Message, err))
	default:
		return responsewriters.ForbiddenStatusError(attrs, reason)
	}
}

// impersonationHeaders returns the Impersonate-* headers of h under canonical
// keys, whatever case they were stored in.
func impersonationHeaders(h http.Header) http.Header {
	var out http.Header
	for k, v := range h {
		if !hasPrefixFold(k, "Impersonate-") {
			continue
		}
		if out == nil {
			out = http.Header{}
		}
		ck := textproto.CanonicalMIMEHeaderKey(k)
		out[ck] = append(out[ck], v...)
	}
	return out
}

// singleHeader is the value of a header that names one identity, which
// kube-apiserver refuses to read from several headers.
func singleHeader(h http.Header, name string) (string, error) {
	if len(h[name]) > 1 {
		return "", apierrors.NewBadRequest(fmt.Sprintf("multiple %s headers are not allowed", name))
	}
	return h.Get(name), nil
}

// buildImpersonationRequests mirrors the upstream function of the same name,
// in a deterministic order: user, groups, extras by key, uid.
func buildImpersonationRequests(h http.Header) ([]impersonationRequest, error) {
	var requests []impersonationRequest

	requestedUser, err := singleHeader(h, authenticationv1.ImpersonateUserHeader)
	if err != nil {
		return nil, err
	}
	hasUser := requestedUser != ""
	if hasUser {
		if ns, name, err := serviceaccount.SplitUsername(requestedUser); err == nil {
			requests = append(requests, impersonationRequest{kind: "ServiceAccount", namespace: ns, name: name})
		} else {
			requests = append(requests, impersonationRequest{kind: "User", name: requestedUser})
		}
	}

	hasGroups := false
	for _, g := range h[authenticationv1.ImpersonateGroupHeader] {
		hasGroups = true
		requests = append(requests, impersonationRequest{kind: "Group", name: g})
	}

	hasExtra := false
	var extraHeaders []string
	for k := range h {
		if strings.HasPrefix(k, authenticationv1.ImpersonateUserExtraHeaderPrefix) {
			extraHeaders = append(extraHeaders, k)
		}
	}
	slices.Sort(extraHeaders)
	for _, k := range extraHeaders {
		hasExtra = true
		key := unescapeExtraKey(strings.ToLower(k[len(authenticationv1.ImpersonateUserExtraHeaderPrefix):]))
		for _, v := range h[k] {
			requests = append(requests, impersonationRequest{kind: "UserExtra", name: v, extraKey: key})
		}
	}

	requestedUID, err := singleHeader(h, authenticationv1.ImpersonateUIDHeader)
	if err != nil {
		return nil, err
	}
	hasUID := requestedUID != ""
	if hasUID {
		requests = append(requests, impersonationRequest{kind: "UID", name: requestedUID})
	}

	if (hasGroups || hasExtra || hasUID) && !hasUser {
		var parts []string
		if hasGroups {
			parts = append(parts, authenticationv1.ImpersonateGroupHeader)
		}
		if hasExtra {
			parts = append(parts, authenticationv1.ImpersonateUserExtraHeaderPrefix+"*")
		}
		if hasUID {
			parts = append(parts, authenticationv1.ImpersonateUIDHeader)
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s requested without %s: impersonating groups, extras or a uid requires impersonating a user",
			strings.Join(parts, ", "), authenticationv1.ImpersonateUserHeader))
	}
	return requests, nil
}

// unescapeExtraKey is the upstream filter's: %-decode, or keep the key as is
// if it is not valid %-encoding.
func unescapeExtraKey(encodedKey string) string {
	key, err := url.PathUnescape(encodedKey)
	if err != nil {
		return encodedKey
	}
	return key
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
