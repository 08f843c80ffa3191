package drifts

import (
	"context"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/report/notify"
)

// One namespace's service accounts are as many controllers: the tenant of
// one namespace who runs its own operators (a service account per
// operator, each the recorded controller of its own custom resources)
// must not fill the cluster-wide cap with its own drift, each controller
// within its quota, so that no drift of any other namespace is recorded.
func TestOneNamespaceCannotCrowdOutEveryOtherNamespacesDrift(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	objs := &fixedObjects{parent: ledgerParent(2), child: ledgerChild()}
	l, client := ledgerWith(t, objs, clock)
	// 25 service accounts of namespace tenant, each 200 records (its
	// quota) under two of its parents (100 each, their quota): the
	// cluster's total.
	store := l.records.GetStore()
	for sa := range DefaultMaxRecords / DefaultControllerRecords {
		for i := range DefaultControllerRecords {
			d, w := detectedWrite("op-"+strconv.Itoa(sa)+"-"+strconv.Itoa(i%2), "cm-"+strconv.Itoa(sa)+"-"+strconv.Itoa(i),
				"system:serviceaccount:tenant:op-"+strconv.Itoa(sa))
			d.Child.Namespace, d.Parent.Ref.Namespace = "tenant", "tenant"
			r := notify.FromDecision(d, w)
			cm, err := encode(&Record{Name: RecordName(r.Spec.ID), Report: summarize(r)}, "kausality-system")
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Add(cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A 26th operator of the tenant drifts: its namespace holds its share.
	d, w := detectedWrite("op-new", "cm-new", "system:serviceaccount:tenant:op-new")
	d.Child.Namespace, d.Parent.Ref.Namespace = "tenant", "tenant"
	more := &Record{Report: summarize(notify.FromDecision(d, w))}
	more.Name = RecordName(more.ID())
	l.create(context.Background(), more, 0)
	if _, err := client.CoreV1().ConfigMaps("kausality-system").Get(context.Background(), more.Name, metav1.GetOptions{}); err == nil {
		t.Errorf("the tenant's namespace recorded past the cluster's total, though it holds all of it")
	}
	// Production's deployment controller drifts, held in enforce mode.
	rec := heldRecord(objs.parent, objs.child)
	l.create(context.Background(), rec, 0)
	if _, err := client.CoreV1().ConfigMaps("kausality-system").Get(context.Background(), rec.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the drift of another namespace's controller, its first, was not recorded (%v): one namespace's %d records hold the cluster-wide cap",
			err, len(store.ListKeys()))
	}
}
