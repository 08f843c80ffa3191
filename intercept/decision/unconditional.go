package decision

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// refusesUnconditionalUpdate are the built-in resources whose storage
// strategy refuses an update that names no resourceVersion
// (AllowUnconditionalUpdate is false), as of the Kubernetes minor version
// of the API types the proxy is built with; each says whether it has a
// status subresource, which shares the strategy. A resource missing here
// (one newer than the types, or an aggregated API server's) is taken to
// allow such an update, as most do.
var refusesUnconditionalUpdate = map[schema.GroupResource]bool{
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}:         true,
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicybindings"}:   false,
	{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}:     false,
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}:       true,
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"}: false,
	{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}:   false,
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}:                 true,
	{Group: "apiregistration.k8s.io", Resource: "apiservices"}:                             true,
	{Group: "certificates.k8s.io", Resource: "clustertrustbundles"}:                        false,
	{Group: "certificates.k8s.io", Resource: "podcertificaterequests"}:                     true,
	{Group: "coordination.k8s.io", Resource: "leasecandidates"}:                            false,
	{Group: "coordination.k8s.io", Resource: "leases"}:                                     false,
	{Group: "internal.apiserver.k8s.io", Resource: "storageversions"}:                      true,
	{Group: "node.k8s.io", Resource: "runtimeclasses"}:                                     false,
	{Group: "policy", Resource: "poddisruptionbudgets"}:                                    true,
	{Group: "storage.k8s.io", Resource: "csidrivers"}:                                      false,
	{Group: "storage.k8s.io", Resource: "csinodes"}:                                        false,
	{Group: "storage.k8s.io", Resource: "csistoragecapacities"}:                            false,
	{Group: "storage.k8s.io", Resource: "volumeattachments"}:                               true,
	{Group: "storagemigration.k8s.io", Resource: "storageversionmigrations"}:               true,
}

// RefusesUnconditionalUpdate reports whether gr is a built-in resource
// whose updates must name a resourceVersion, and whether it has a status
// subresource, whose updates must too.
func RefusesUnconditionalUpdate(gr schema.GroupResource) (refuses, status bool) {
	status, refuses = refusesUnconditionalUpdate[gr]
	return refuses, status
}

// UpdateNeedsResourceVersion reports whether kube-apiserver refuses an
// update of an existing object of gr (ofStatus: of its status
// subresource) that names no resourceVersion: every custom resource
// served from a CustomResourceDefinition (custom; customStatus: the CRD's
// version has a status subresource), and the built-in resources whose
// strategy says so. A status subresource that does not exist is
// kube-apiserver's 404, not this. The proxy must not turn such an update
// into one that lands, as adding its own precondition would:
// kube-apiserver refuses it so that a client that read nothing cannot
// overwrite what others wrote.
func UpdateNeedsResourceVersion(gr schema.GroupResource, ofStatus, custom, customStatus bool) bool {
	if custom {
		return !ofStatus || customStatus
	}
	refuses, status := RefusesUnconditionalUpdate(gr)
	return refuses && (!ofStatus || status)
}

// ResourceVersionRequired is kube-apiserver's answer, word for word, to an
// update of an existing object of gr named name that names no
// resourceVersion where UpdateNeedsResourceVersion holds: its storage
// names the resource where the kind belongs, and the version as the
// unsigned integer it parsed.
func ResourceVersionRequired(gr schema.GroupResource, name string) *apierrors.StatusError {
	return apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: gr.Resource}, name, field.ErrorList{
		field.Invalid(field.NewPath("metadata", "resourceVersion"), uint64(0), "must be specified for an update"),
	})
}
