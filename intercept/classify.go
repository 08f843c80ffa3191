package intercept

import (
	"net/http"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
)

// subresourceKind says how a write to a subresource is treated.
type subresourceKind int

const (
	// mainResource: the object itself.
	mainResource subresourceKind = iota
	// statusSubresource: recorded (controller identity, phase), never
	// gated; refused only when it changes kausality.io annotations people
	// set, which kube-apiserver keeps on most built-in kinds' status writes.
	statusSubresource
	// scaleSubresource: a write of the scaled object's replicas field
	// (spec.replicas, or a custom resource's specReplicasPath).
	scaleSubresource
	// evictionSubresource: a POST of pods/NAME/eviction. It deletes the
	// pod (after the PodDisruptionBudget check), so it is decided as a
	// delete of the pod: otherwise a frozen parent's pod could be removed
	// by asking for it to be evicted.
	evictionSubresource
	// podSpecSubresource: pods/NAME/resize or pods/NAME/ephemeralcontainers.
	// kube-apiserver takes from it only part of the pod's spec (container
	// resources, ephemeral containers) and keeps the rest of the stored
	// pod, metadata included. It changes the desired state, so it is
	// decided as such: otherwise a frozen parent's pod could be resized.
	podSpecSubresource
)

// write is a classified, intercepted write.
type write struct {
	info *request.RequestInfo
	gvr  schema.GroupVersionResource
	verb string
	// namespace of the object: the request's, except for cluster-scoped
	// resources (kube-apiserver's request info names a Namespace object's
	// own name as its namespace).
	namespace    string
	op           decision.Operation
	sub          subresourceKind
	dryRun       bool
	fieldManager string
	// explicitFieldManager: the client named its field manager; only an
	// apply uses the one kube-apiserver derives from the User-Agent.
	explicitFieldManager bool
	// force is an apply's force query parameter, as sent.
	force []string
	// collection: a deletecollection. Every object it would delete is
	// decided as a delete of that object (collection.go).
	collection bool
}

// classify reports whether r is an intercepted write, and what kind. Every
// request the proxy serves passes here, so what it does not intercept is
// told apart before anything is allocated for it.
func (i *Interceptor) classify(r *http.Request) (*write, bool) {
	info, ok := request.RequestInfoFrom(r.Context())
	if !ok || !info.IsResourceRequest {
		return nil, false
	}
	var op decision.Operation
	collection := false
	switch info.Verb {
	case "create":
		op = decision.Create
	case "update", "patch":
		op = decision.Update
	case "delete":
		op = decision.Delete
	case "deletecollection":
		// kube-apiserver expands it into deletes server-side, where the
		// proxy cannot see them: passed through, it would delete what a
		// single DELETE may not.
		op = decision.Delete
		collection = true
	default:
		// Reads and watches pass through.
		return nil, false
	}
	sub, op, ok := subresourceOf(info, op)
	if !ok {
		return nil, false
	}
	if !i.cfg.Settings().Rules.Targets(info.APIGroup, info.Resource, info.Namespace) {
		return nil, false
	}
	w := &write{
		info:       info,
		gvr:        schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource},
		verb:       info.Verb,
		namespace:  info.Namespace,
		op:         op,
		sub:        sub,
		collection: collection,
	}
	q := r.URL.Query()
	// Any dryRun parameter makes a write that changes nothing: kube-apiserver
	// runs it as a dry run when every value is "All", and refuses it (422)
	// otherwise. Treating only "All" as a dry run would let a write that is
	// refused anyway (dryRun=all, dryRun=All&dryRun=) reserve a once
	// approval that nothing then uses. A single DELETE takes its options
	// from its body when it has one, and the query counts only without it:
	// that is decided once the body is read (deleteDryRun).
	w.dryRun = len(q["dryRun"]) > 0 && info.Verb != "delete"
	// Without a fieldManager parameter kube-apiserver derives the manager
	// from the User-Agent ("kube-controller-manager/v1.35.4 ..." gives
	// "kube-controller-manager").
	w.fieldManager = patch.EffectiveFieldManager(q.Get("fieldManager"), r.UserAgent())
	w.explicitFieldManager = q.Get("fieldManager") != ""
	w.force = q["force"]
	return w, true
}

// subresourceOf says how a write of op to info's subresource is treated,
// and as which operation; false when it is not intercepted.
func subresourceOf(info *request.RequestInfo, op decision.Operation) (subresourceKind, decision.Operation, bool) {
	var sub subresourceKind
	switch info.Subresource {
	case "":
		sub = mainResource
	case "eviction":
		if op != decision.Create || info.APIGroup != "" || info.Resource != "pods" {
			return 0, op, false
		}
		op = decision.Delete
		sub = evictionSubresource
	case "status":
		if op == decision.Delete || op == decision.Create {
			return 0, op, false
		}
		sub = statusSubresource
	case "finalize":
		// kube-apiserver's finalize strategy resets only the status, so a
		// Namespace's metadata, annotations included, is written through
		// it as through a status write, and is guarded as one.
		if op != decision.Update || info.APIGroup != "" || info.Resource != "namespaces" {
			return 0, op, false
		}
		sub = statusSubresource
	case "approval":
		// kube-apiserver's approval strategy resets the spec and the
		// status but its conditions, and keeps the body's metadata, as
		// the status strategy does: guarded as a status write.
		if op != decision.Update || info.APIGroup != "certificates.k8s.io" || info.Resource != "certificatesigningrequests" {
			return 0, op, false
		}
		sub = statusSubresource
	case "scale":
		if op != decision.Update {
			return 0, op, false
		}
		sub = scaleSubresource
	case "resize", "ephemeralcontainers":
		if op != decision.Update || info.APIGroup != "" || info.Resource != "pods" {
			return 0, op, false
		}
		sub = podSpecSubresource
	default:
		return 0, op, false
	}
	return sub, op, true
}
