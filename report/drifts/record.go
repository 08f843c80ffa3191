package drifts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/report/escalation"
)

// Names and labels of the records.
const (
	// NamePrefix prefixes the drift id in a record's name.
	NamePrefix = "kausality-drift-"
	// ManagedByLabel marks the proxy's records; the informers select on it.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "kausality-proxy"
	// ComponentLabel tells the records from the proxy's other ConfigMaps.
	ComponentLabel = "app.kubernetes.io/component"
	component      = "drift-record"
	// PairLabel holds a hash of the (parent, child) pair, so the drifts of
	// one pair are found together.
	PairLabel = "kausality.io/drift-pair"
	// ControllerLabel holds a hash of the user whose write drifted, and
	// ParentLabel one of the parent: the quotas count records by them.
	ControllerLabel = "kausality.io/drift-controller"
	ParentLabel     = "kausality.io/drift-parent"
	// NamespaceLabel holds a hash of the namespace the drifted write went
	// to: past the cluster's total, each namespace records only its share.
	NamespaceLabel = "kausality.io/drift-namespace"

	reportKey = "report"
	stateKey  = "state"
)

// Reasons a drift is resolved, besides the ones notify defines.
const (
	// ReasonSuperseded: a newer drift of the same (parent, child) pair
	// replaced this one.
	ReasonSuperseded = "Superseded"
	// ReasonParentDeleted: the parent is gone, and its children with it.
	ReasonParentDeleted = "ParentDeleted"
	// ReasonNotCreated: the child of a denied create still does not exist
	// a grace period after the denial.
	ReasonNotCreated = "NotCreated"
)

// State is what a record knows besides the Detected report. It is stored
// as JSON next to the report.
type State struct {
	// ParentSpecHash is the parent's spec when the drift was detected
	// ("" when it could not be read at that generation).
	ParentSpecHash string `json:"parentSpecHash,omitempty"`
	// DetectedAt is when the record was made.
	DetectedAt metav1.Time `json:"detectedAt"`
	// Mode is the drift mode the write was decided in, and Held says the
	// write was denied: a person on call tells held drifts from reported
	// ones without reading the decision log.
	Mode annotations.DriftMode `json:"mode,omitempty"`
	Held bool                  `json:"held,omitempty"`
	// Resolved, once set, says why and when the drift ended.
	Resolved *Resolution `json:"resolved,omitempty"`
	// Delivered is the last phase each receiver acknowledged, by
	// receiver key (a hash of its URL: URLs may carry credentials).
	Delivered map[string]v1alpha1.DriftReportPhase `json:"delivered,omitempty"`
	// Slack is the escalation message, once posted.
	Slack *escalation.MessageRef `json:"slack,omitempty"`
	// SlackResolved: the message says the drift was resolved.
	SlackResolved bool `json:"slackResolved,omitempty"`
	// SlackSuppressed: the message was not posted, to keep within the
	// message rate limits; a summary message counts it.
	SlackSuppressed bool `json:"slackSuppressed,omitempty"`
	// SlackClicks are the Slack requests applied to this drift, by request
	// key, until their signature expires: a replay is refused by every
	// replica, and after a restart.
	SlackClicks map[string]metav1.Time `json:"slackClicks,omitempty"`
}

// Resolution is why and when a drift ended.
type Resolution struct {
	Reason string      `json:"reason"`
	At     metav1.Time `json:"at"`
}

// Record is one open (or resolved, not yet fully delivered) drift.
type Record struct {
	// Name of the ConfigMap.
	Name string
	// ResourceVersion of the ConfigMap the record was read from: updates
	// are conditional on it.
	ResourceVersion string
	Report          v1alpha1.DriftReport
	State           State
}

// ID is the drift id.
func (r *Record) ID() string { return r.Report.Spec.ID }

// RecordName is the name of the record of drift id.
func RecordName(id string) string { return NamePrefix + id }

// PairHash identifies the (parent, child) pair of a report in a label
// value.
func PairHash(r v1alpha1.DriftReport) string {
	var b strings.Builder
	for _, s := range [...]string{groupOf(r.Spec.Parent.APIVersion), r.Spec.Parent.Kind, r.Spec.Parent.Namespace, r.Spec.Parent.Name,
		groupOf(r.Spec.Child.APIVersion), r.Spec.Child.Kind, r.Spec.Child.Namespace, r.Spec.Child.Name} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])[:16]
}

// ControllerKey identifies, in a label value, the user whose write
// drifted: quotas and rate limits are kept per controller.
func ControllerKey(r v1alpha1.DriftReport) string { return shortHash(r.Spec.Request.User) }

// NamespaceKey identifies, in a label value, the namespace of the drifted
// write ("" for a cluster-scoped child counts as a namespace of its own).
func NamespaceKey(r v1alpha1.DriftReport) string { return shortHash("ns\x00" + r.Spec.Child.Namespace) }

// ParentKey identifies, in a label value, the parent of the drift.
func ParentKey(r v1alpha1.DriftReport) string {
	p := r.Spec.Parent
	return shortHash(groupOf(p.APIVersion) + "\x00" + p.Kind + "\x00" + p.Namespace + "\x00" + p.Name)
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}

func groupOf(apiVersion string) string {
	if i := strings.IndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}

// receiverKey names a receiver in State.Delivered without its URL.
func receiverKey(url string) string {
	sum := sha256.Sum256([]byte(url))
	return hex.EncodeToString(sum[:])[:12]
}

// encode returns the ConfigMap of r in namespace.
func encode(r *Record, namespace string) (*corev1.ConfigMap, error) {
	report, err := json.Marshal(r.Report)
	if err != nil {
		return nil, fmt.Errorf("serializing the DriftReport: %w", err)
	}
	state, err := json.Marshal(r.State)
	if err != nil {
		return nil, fmt.Errorf("serializing the drift state: %w", err)
	}
	if n := len(report) + len(state); n > MaxRecordBytes {
		return nil, fmt.Errorf("drift record %s would hold %d bytes, more than the %d a record may hold", r.Name, n, MaxRecordBytes)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:            r.Name,
			Namespace:       namespace,
			ResourceVersion: r.ResourceVersion,
			Labels: map[string]string{
				ManagedByLabel:  managedBy,
				ComponentLabel:  component,
				PairLabel:       PairHash(r.Report),
				ControllerLabel: ControllerKey(r.Report),
				ParentLabel:     ParentKey(r.Report),
				NamespaceLabel:  NamespaceKey(r.Report),
			},
		},
		Data: map[string]string{reportKey: string(report), stateKey: string(state)},
	}, nil
}

// decode reads the record a ConfigMap holds.
func decode(cm *corev1.ConfigMap) (*Record, error) {
	r := &Record{Name: cm.Name, ResourceVersion: cm.ResourceVersion}
	if err := json.Unmarshal([]byte(cm.Data[reportKey]), &r.Report); err != nil {
		return nil, fmt.Errorf("drift record %s: the %q key is not a DriftReport: %w", cm.Name, reportKey, err)
	}
	if err := json.Unmarshal([]byte(cm.Data[stateKey]), &r.State); err != nil {
		return nil, fmt.Errorf("drift record %s: the %q key is not a drift state: %w", cm.Name, stateKey, err)
	}
	if r.Report.Spec.ID == "" || RecordName(r.Report.Spec.ID) != cm.Name {
		return nil, fmt.Errorf("drift record %s holds the report of drift %q", cm.Name, r.Report.Spec.ID)
	}
	return r, nil
}

// resolvedReport is the Resolved report that closes r: the Detected
// report's id, references, request and changes, without the objects.
func resolvedReport(r *Record) v1alpha1.DriftReport {
	out := r.Report
	out.APIVersion, out.Kind = v1alpha1.DriftReportAPIVersion, v1alpha1.DriftReportKind
	out.Spec.Phase = v1alpha1.PhaseResolved
	if r.State.Resolved != nil {
		out.Spec.Reason = r.State.Resolved.Reason
	}
	out.Spec.OldObject.Raw, out.Spec.OldObject.Object = nil, nil
	out.Spec.NewObject.Raw, out.Spec.NewObject.Object = nil, nil
	return out
}
