// Package reservations keeps, in the cluster, a record of each once
// approval the proxy has taken off a parent for a write whose outcome it
// has not settled yet. The replica that reserved the approval settles it
// when kube-apiserver answers (spent, or put back); a replica that dies in
// between leaves its record behind, and any replica settles it later from
// what kube-apiserver stores. So a person's approval is not lost with a
// replica.
//
// A record is a ConfigMap in the proxy's namespace. Whoever settles a
// record first claims it, by deleting it with a resourceVersion
// precondition, and only then acts: two replicas never both put the same
// approval back.
//
// A record alone never puts an approval on a parent. Whoever may write
// ConfigMaps in the proxy's namespace may write records too, and that
// need not include the parent. So the patch that takes the approval off
// the parent also writes, in the parent's kausality.io/reservations, the
// record's name and the SHA-256 digest of the record's content exactly as
// the proxy wrote it: the parent, the approval entry's bytes, the write,
// the replica and the time. An orphaned record is settled only while its
// parent vouches for exactly what it holds, so what goes back is exactly
// what was taken off. A digest needs no key: it is not a secret, it only
// has to be out of reach, and the parent's system annotation is, where a
// MAC key would have to be shared, stored and rotated by every replica.
// The proxy never updates a record, so a claim that finds one rewritten
// knows it was forged, and says so.
package reservations

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/internal/proxynamespace"
)

const (
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "kausality-proxy"
	componentLabel = "app.kubernetes.io/component"
	component      = "approval-reservation"
	dataKey        = "reservation"
	namePrefix     = "kausality-reservation-"
)

// Reservation is a once approval taken off its parent for one write, and
// what is needed to settle it without the replica that took it.
type Reservation struct {
	// Parent carries the approvals annotation the approval was taken from.
	Parent      decision.ObjectRef `json:"parent"`
	Approval    approval.Approval  `json:"approval"`
	ApprovalRaw json.RawMessage    `json:"approvalRaw,omitempty"`
	// The write: its operation and object, and the object as stored
	// before the write was forwarded.
	Operation decision.Operation   `json:"operation"`
	Group     string               `json:"group,omitempty"`
	Version   string               `json:"version"`
	Resource  string               `json:"resource"`
	Namespace string               `json:"namespace,omitempty"`
	Name      string               `json:"name"`
	Before    decision.StoredState `json:"before"`
	// Replica reserved the approval, at Reserved.
	Replica  string    `json:"replica"`
	Reserved time.Time `json:"reserved"`
}

// GVR is the written object's resource.
func (r *Reservation) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

// Update is the approvals update that puts the approval back.
func (r *Reservation) Update() *decision.ApprovalsUpdate {
	return &decision.ApprovalsUpdate{Target: r.Parent, Consumed: r.Approval, ConsumedRaw: r.ApprovalRaw}
}

// Record is a stored Reservation.
type Record struct {
	Reservation
	name, resourceVersion string
	// digest identifies the content as stored, byte for byte.
	digest string
}

// ID names the record (its ConfigMap).
func (r *Record) ID() string { return r.name }

// Digest identifies the record's content: the parent vouches for the
// record with it.
func (r *Record) Digest() string { return r.digest }

// digestOf is the digest of a record's stored content.
func digestOf(data string) string {
	sum := sha256.Sum256([]byte(data))
	return hex.EncodeToString(sum[:])
}

// Store keeps the records of one namespace.
type Store struct {
	configMaps corev1client.ConfigMapInterface
	namespace  string
	replica    string
	clock      clock.PassiveClock
	// records watches the records, so that looking for orphans costs no
	// request.
	factory informers.SharedInformerFactory
	records cache.SharedIndexInformer
}

// New returns a Store of the records in namespace; replica names this
// replica in the records it opens. Run starts the watch Orphans reads.
func New(client kubernetes.Interface, namespace, replica string, c clock.PassiveClock) *Store {
	if c == nil {
		c = clock.RealClock{}
	}
	selector := labels.SelectorFromSet(labels.Set{managedByLabel: managedBy, componentLabel: component}).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector }))
	return &Store{configMaps: client.CoreV1().ConfigMaps(namespace), namespace: namespace, replica: replica, clock: c,
		factory: factory, records: factory.Core().V1().ConfigMaps().Informer()}
}

// Run watches the records until ctx is done.
func (s *Store) Run(ctx context.Context) { s.factory.Start(ctx.Done()) }

// HasSynced reports whether the watch of the records has listed them.
func (s *Store) HasSynced() bool { return s.records.HasSynced() }

// Open records r before its approval is taken off the parent.
func (s *Store) Open(ctx context.Context, r Reservation) (*Record, error) {
	r.Replica, r.Reserved = s.replica, s.clock.Now().UTC()
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: namePrefix, Labels: map[string]string{managedByLabel: managedBy, componentLabel: component}},
		Data:       map[string]string{dataKey: string(data)},
	}
	created, err := s.configMaps.Create(ctx, cm, metav1.CreateOptions{FieldManager: managedBy})
	if proxynamespace.Missing(err) {
		return nil, fmt.Errorf("recording the reservation of a once approval on %s: %w", r.Parent, proxynamespace.MissingError(s.namespace))
	}
	if err != nil {
		return nil, fmt.Errorf("recording the reservation of a once approval on %s: %w", r.Parent, err)
	}
	return &Record{Reservation: r, name: created.Name, resourceVersion: created.ResourceVersion, digest: digestOf(string(data))}, nil
}

// Claim is the outcome of claiming a record.
type Claim int

const (
	// Lost is when somebody else settled the record first.
	Lost Claim = iota
	// Claimed is when the record was removed as it was read; its settlement is
	// the caller's.
	Claimed
	// Rewritten is when the record was rewritten since it was read, by somebody
	// other than the proxy, which never updates a record. The rewritten
	// record is removed, so that nobody settles it; its settlement is the
	// caller's, from what it read, as far as the parent vouches for that.
	Rewritten
)

// maxClaimAttempts bounds the re-reads of a record that keeps changing.
const maxClaimAttempts = 5

// Claim removes rec so that its settlement is this caller's. A record that
// changed since rec was read is read again from the cluster before its
// fate is decided: gone, somebody settled it; rewritten, it was forged.
func (s *Store) Claim(ctx context.Context, rec *Record) (Claim, error) {
	resourceVersion, rewritten := rec.resourceVersion, false
	for attempt := 1; ; attempt++ {
		err := s.configMaps.Delete(ctx, rec.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &resourceVersion}})
		switch {
		case err == nil && rewritten:
			return Rewritten, nil
		case err == nil:
			return Claimed, nil
		case apierrors.IsNotFound(err):
			return Lost, nil
		case !apierrors.IsConflict(err):
			return Lost, err
		case attempt >= maxClaimAttempts:
			return Lost, fmt.Errorf("the reservation record %s kept changing while it was claimed", rec.name)
		}
		current, err := s.configMaps.Get(ctx, rec.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return Lost, nil
		}
		if err != nil {
			return Lost, err
		}
		if digestOf(current.Data[dataKey]) != rec.digest {
			rewritten = true
		}
		resourceVersion = current.ResourceVersion
	}
}

// Orphans lists the records reserved longer than olderThan ago, as the
// watch has them: their replicas died, or gave up settling them. Records
// that cannot be read are returned in broken. Until the watch has listed
// the records, there are none.
func (s *Store) Orphans(olderThan time.Duration) (orphans []*Record, broken []*Record) {
	if !s.records.HasSynced() {
		return nil, nil
	}
	now := s.clock.Now()
	for _, obj := range s.records.GetStore().List() {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Labels[componentLabel] != component || cm.Labels[managedByLabel] != managedBy {
			// Only records: a watch that does not filter by label (a
			// fake clientset's) must not make others' ConfigMaps look
			// like broken records.
			continue
		}
		rec := &Record{name: cm.Name, resourceVersion: cm.ResourceVersion, digest: digestOf(cm.Data[dataKey])}
		if err := json.Unmarshal([]byte(cm.Data[dataKey]), &rec.Reservation); err != nil || rec.Reserved.IsZero() {
			if now.Sub(cm.CreationTimestamp.Time) > olderThan {
				broken = append(broken, rec)
			}
			continue
		}
		if now.Sub(rec.Reserved) > olderThan {
			orphans = append(orphans, rec)
		}
	}
	return orphans, broken
}
