package intercept

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
)

// authorizeWrite reports whether u may do what wr asks, before the proxy does
// anything for the write with its own credentials (reading the stored
// object, applying the patch, starting an informer, writing the parent).
// Those credentials are stronger than any caller's: without this check a
// caller who may not touch a Secret could have the proxy read it and echo it
// in an error, or make the proxy write an approval on a parent.
//
// The first review asks for the verb on every object of the resource in the
// namespace; the authorizer caches it by user, groups, verb, resource and
// namespace, so a controller's writes cost no round trip after the first. Only
// when that says no is the object's own name reviewed, for RBAC rules that
// list resourceNames.
//
// A denial is kube-apiserver's own 403, word for word. An error means the
// review could not be made.
func (i *Interceptor) authorizeWrite(ctx context.Context, u user.Info, wr *write) error {
	attrs := writeAttributes(u, wr, wr.info.Verb)
	allowed, reason, err := i.authorize(ctx, attrs)
	if err != nil || allowed {
		return err
	}
	if wr.info.Name != "" {
		attrs.Name = wr.info.Name
		if allowed, reason, err = i.authorize(ctx, attrs); err != nil || allowed {
			return err
		}
	}
	return responsewriters.ForbiddenStatusError(attrs, reason)
}

// mayRead reports whether u may get the object wr writes. Only then do
// messages show the stored values the write would change.
func (i *Interceptor) mayRead(ctx context.Context, u user.Info, wr *write) bool {
	attrs := writeAttributes(u, wr, "get")
	attrs.Subresource = ""
	attrs.Name = wr.info.Name
	allowed, _, err := i.authorize(ctx, attrs)
	return err == nil && allowed
}

// mayReadParent reports whether u may get parent. Only then do messages
// name it and say what its annotations say: a caller who may write a child
// may still be kept from reading its owner, its freeze reason included.
func (i *Interceptor) mayReadParent(ctx context.Context, u user.Info, parent *unstructured.Unstructured) bool {
	m, err := i.cfg.Objects.Mapping(parent.GroupVersionKind())
	if err != nil {
		return false
	}
	attrs := &authorizer.AttributesRecord{
		User:            u,
		Verb:            "get",
		Namespace:       parent.GetNamespace(),
		APIGroup:        m.Resource.Group,
		APIVersion:      m.Resource.Version,
		Resource:        m.Resource.Resource,
		Name:            parent.GetName(),
		ResourceRequest: true,
	}
	allowed, _, err := i.authorize(ctx, attrs)
	return err == nil && allowed
}

func (i *Interceptor) authorize(ctx context.Context, attrs *authorizer.AttributesRecord) (bool, string, error) {
	if i.cfg.Authorizer == nil {
		return false, "kausality-proxy has no authorizer configured, so it refuses every intercepted write", nil
	}
	decision, reason, err := i.cfg.Authorizer.Authorize(ctx, attrs)
	switch {
	case decision == authorizer.DecisionAllow:
		return true, reason, nil
	case err != nil && decision != authorizer.DecisionDeny:
		return false, reason, &authorizationUnavailableError{err: err, attrs: attrs}
	}
	return false, reason, nil
}

// writeAttributes are the attributes kube-apiserver's own authorization
// filter builds from the request info, name left out.
func writeAttributes(u user.Info, wr *write, verb string) *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{
		User:            u,
		Verb:            verb,
		Namespace:       wr.info.Namespace,
		APIGroup:        wr.info.APIGroup,
		APIVersion:      wr.info.APIVersion,
		Resource:        wr.info.Resource,
		Subresource:     wr.info.Subresource,
		ResourceRequest: true,
	}
}

// authorizationUnavailableError is a SubjectAccessReview that could not be
// made. Nothing was decided; --failure-policy says what happens.
type authorizationUnavailableError struct {
	err   error
	attrs authorizer.Attributes
}

func (e *authorizationUnavailableError) Error() string {
	return fmt.Sprintf("cannot check whether %s may %s %s: SubjectAccessReview failed: %v",
		e.attrs.GetUser().GetName(), e.attrs.GetVerb(), e.attrs.GetResource(), e.err)
}

func (e *authorizationUnavailableError) Unwrap() error { return e.err }

// status is the retryable 503 a client sees when it cannot be authorized.
func (e *authorizationUnavailableError) status() error {
	s := apierrors.NewServiceUnavailable("kausality-proxy " + e.Error() + "; retry")
	return s
}
