package drifts

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// RecordSelector selects the drift records among the ConfigMaps of the
// proxy's namespace, for readers outside the proxy (kubectl kausality
// drifts).
func RecordSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{ManagedByLabel: managedBy, ComponentLabel: component})
}

// DecodeRecord reads the drift record a ConfigMap holds. It is the one
// reader of the format, for the proxy and for tools.
func DecodeRecord(cm *corev1.ConfigMap) (*Record, error) { return decode(cm) }
