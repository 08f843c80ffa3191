// Package access asks the authorizer what the caller of an intercepted
// write may do: the write itself, before the proxy does anything for it
// with its own credentials, and reading the object and its parents, which
// decides what a message may show.
package access

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// Checker asks Authorizer; a nil Authorizer refuses every write.
type Checker struct {
	Authorizer authorizer.Authorizer
	// Objects maps a parent's kind to its resource.
	Objects *objects.Store
}

// Attributes are the attributes kube-apiserver's own authorization filter
// builds from the request info, for verb and with the name left out: the
// first review covers every object of the resource in the namespace.
func Attributes(u user.Info, info *request.RequestInfo, verb string) *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{
		User:            u,
		Verb:            verb,
		Namespace:       info.Namespace,
		APIGroup:        info.APIGroup,
		APIVersion:      info.APIVersion,
		Resource:        info.Resource,
		Subresource:     info.Subresource,
		ResourceRequest: true,
	}
}

// Write reports whether the caller may do what attrs (the attributes
// kube-apiserver's own authorization filter builds, name left out) ask
// of the object name, before the proxy does anything for the write with
// its own credentials (reading the stored object, applying the patch,
// starting an informer, writing the parent). Those credentials are
// stronger than any caller's: without this check a caller who may not
// touch a Secret could have the proxy read it and echo it in an error, or
// make the proxy write an approval on a parent.
//
// The first review asks for the verb on every object of the resource in the
// namespace; the authorizer caches it by user, groups, verb, resource and
// namespace, so a controller's writes cost no round trip after the first. Only
// when that says no is the object's own name reviewed, for RBAC rules that
// list resourceNames.
//
// A denial is kube-apiserver's own 403, word for word. An error means the
// review could not be made (an *UnavailableError).
func (c *Checker) Write(ctx context.Context, attrs *authorizer.AttributesRecord, name string) error {
	allowed, reason, err := c.authorize(ctx, attrs)
	if err != nil || allowed {
		return err
	}
	if name != "" {
		attrs.Name = name
		if allowed, reason, err = c.authorize(ctx, attrs); err != nil || allowed {
			return err
		}
	}
	return responsewriters.ForbiddenStatusError(attrs, reason)
}

// MayGet reports whether the caller may get the object attrs name, as
// given by a write's attributes. Only then do messages show the stored
// values the write would change.
func (c *Checker) MayGet(ctx context.Context, attrs *authorizer.AttributesRecord, name string) bool {
	attrs.Verb, attrs.Subresource, attrs.Name = "get", "", name
	allowed, _, err := c.authorize(ctx, attrs)
	return err == nil && allowed
}

// MayGetParent reports whether u may get parent. Only then do messages
// name it and say what its annotations say: a caller who may write a child
// may still be kept from reading its owner, its freeze reason included.
func (c *Checker) MayGetParent(ctx context.Context, u user.Info, parent *unstructured.Unstructured) bool {
	return c.mayOnParent(ctx, u, parent, "get", "", parent.GetName())
}

// MayWriteStatus reports whether u may update the status of every object
// of parent's kind in its namespace: through the status subresource, or,
// for a kind whose status is written in the object (inObject: a custom
// resource without the subresource), by updating the object. A caller who
// may is one the proxy would record as parent's controller from its status
// writes: only then does the proxy watch every object of parent's kind for
// a write u makes under it. The name is left out, as controllers are
// granted status access: so the authorizer's cache answers a caller's next
// writes under other parents of the kind without asking again.
func (c *Checker) MayWriteStatus(ctx context.Context, u user.Info, parent *unstructured.Unstructured, inObject bool) bool {
	subresource := "status"
	if inObject {
		subresource = ""
	}
	return c.mayOnParent(ctx, u, parent, "update", subresource, "")
}

// mayOnParent reports whether u may verb the subresource ("" for the
// object itself) of the object of parent's kind and namespace called name
// ("": every such object).
func (c *Checker) mayOnParent(ctx context.Context, u user.Info, parent *unstructured.Unstructured, verb, subresource, name string) bool {
	m, err := c.Objects.Mapping(parent.GroupVersionKind())
	if err != nil {
		return false
	}
	attrs := &authorizer.AttributesRecord{
		User:            u,
		Verb:            verb,
		Namespace:       parent.GetNamespace(),
		APIGroup:        m.Resource.Group,
		APIVersion:      m.Resource.Version,
		Resource:        m.Resource.Resource,
		Subresource:     subresource,
		Name:            name,
		ResourceRequest: true,
	}
	allowed, _, err := c.authorize(ctx, attrs)
	return err == nil && allowed
}

func (c *Checker) authorize(ctx context.Context, attrs *authorizer.AttributesRecord) (bool, string, error) {
	if c.Authorizer == nil {
		return false, "kausality-proxy has no authorizer configured, so it refuses every intercepted write", nil
	}
	decision, reason, err := c.Authorizer.Authorize(ctx, attrs)
	switch {
	case decision == authorizer.DecisionAllow:
		return true, reason, nil
	case err != nil && decision != authorizer.DecisionDeny:
		return false, reason, &UnavailableError{err: err, attrs: attrs}
	}
	return false, reason, nil
}

// UnavailableError is a SubjectAccessReview that could not be made.
// Nothing was decided; --failure-policy says what happens.
type UnavailableError struct {
	err   error
	attrs authorizer.Attributes
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("cannot check whether %s may %s %s: SubjectAccessReview failed: %v",
		e.attrs.GetUser().GetName(), e.attrs.GetVerb(), e.attrs.GetResource(), e.err)
}

func (e *UnavailableError) Unwrap() error { return e.err }

// Status is the retryable 503 a client sees when it cannot be authorized.
func (e *UnavailableError) Status() error {
	return apierrors.NewServiceUnavailable("kausality-proxy " + e.Error() + "; retry")
}
