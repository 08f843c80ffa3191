package drifts

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kausality-io/kausality-proxy/report/escalation"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

// maxClaimedClicks bounds the clicks remembered on one record. Only
// clicks with a valid Slack signature get here, and each is remembered
// only while its signature is within the window.
const maxClaimedClicks = 64

// Clicks are the open drifts as Slack clicks see them: read live from the
// cluster, not from an informer, so that every replica, however far its
// cache lags, answers a click from the same record, and a click is
// recorded on the record before it is applied.
type Clicks struct {
	client    kubernetes.Interface
	namespace string
}

// NewClicks returns the open drifts kept in namespace (the ledger's).
func NewClicks(client kubernetes.Interface, namespace string) *Clicks {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return &Clicks{client: client, namespace: namespace}
}

var _ escalation.OpenDrifts = (*Clicks)(nil)

// Claim implements escalation.OpenDrifts. The click is recorded in the
// record's state with the record's resourceVersion as precondition: of two
// replicas that get the same request, one records it and the other finds
// it recorded.
func (c *Clicks) Claim(ctx context.Context, id string, claim escalation.ClickClaim, check func(escalation.OpenDrift) error) (escalation.OpenDrift, error) {
	cms := c.client.CoreV1().ConfigMaps(c.namespace)
	var open escalation.OpenDrift
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, RecordName(id), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return escalation.ErrNoOpenDrift
		}
		if err != nil {
			return err
		}
		// Only the ledger's records count, not another ConfigMap that
		// happens to have a record's name.
		if cm.Labels[ManagedByLabel] != managedBy || cm.Labels[ComponentLabel] != component {
			return escalation.ErrNoOpenDrift
		}
		rec, err := decode(cm)
		if err != nil {
			return fmt.Errorf("%w: %w", escalation.ErrNoOpenDrift, err)
		}
		if rec.State.Resolved != nil {
			return escalation.ErrNoOpenDrift
		}
		open = openDrift(rec)
		if err := check(open); err != nil {
			return err
		}
		if err := recordClick(&rec.State, claim); err != nil {
			return err
		}
		out, err := encode(rec, c.namespace)
		if err != nil {
			return err
		}
		_, err = cms.Update(ctx, out, metav1.UpdateOptions{FieldManager: managedBy})
		return err
	})
	if err != nil {
		return escalation.OpenDrift{}, err
	}
	return open, nil
}

// recordClick adds claim to the clicks of a record, forgetting the ones
// whose signature has left the window.
func recordClick(st *State, claim escalation.ClickClaim) error {
	for k, until := range st.SlackClicks {
		if claim.Now.After(until.Time) {
			delete(st.SlackClicks, k)
		}
	}
	if _, seen := st.SlackClicks[claim.Key]; seen {
		return escalation.ErrClickReplayed
	}
	if len(st.SlackClicks) >= maxClaimedClicks {
		// Forgetting a live click would let it be replayed.
		return fmt.Errorf("%w (%d)", escalation.ErrTooManyClicks, maxClaimedClicks)
	}
	if st.SlackClicks == nil {
		st.SlackClicks = map[string]metav1.Time{}
	}
	st.SlackClicks[claim.Key] = metav1.NewTime(claim.Expires)
	return nil
}

// openDrift is what a click may act on, from the record.
func openDrift(rec *Record) escalation.OpenDrift {
	sp := rec.Report.Spec
	return escalation.OpenDrift{
		ID: rec.ID(), Parent: notify.ParentObject(sp.Parent), ParentUID: sp.Parent.UID, Generation: sp.Parent.Generation,
		ParentSpecHash: rec.State.ParentSpecHash, Child: notify.ChildObject(sp.Child), Controller: sp.Request.User,
		Message: rec.State.Slack,
	}
}
