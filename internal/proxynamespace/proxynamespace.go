// Package proxynamespace watches the namespace the proxy keeps its own
// records in (--drift-namespace): the drift records, the once-approval
// reservations and the Lease of the replica that sends DriftReports.
//
// Without that namespace every one of those writes fails, and each of them
// fails on a path where nobody waits for the answer: a DriftReport would be
// dropped, a reservation would not survive the replica. So the proxy says
// it is not ready, with the namespace and the flag, until the namespace
// exists, and logs one error line when it goes missing rather than one per
// failed write.
package proxynamespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Flag is the flag that names the proxy's namespace.
const Flag = "--drift-namespace"

// Missing reports whether err is kube-apiserver's answer to a write into a
// namespace that does not exist: a 404 whose details name a namespace
// rather than the object written.
func Missing(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsNotFound(err) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// MissingError is what a person reads when the namespace is missing: what
// it is for, and the two ways out.
func MissingError(namespace string) error {
	return fmt.Errorf("the proxy's namespace %q does not exist: the proxy keeps its drift records, once-approval reservations and DriftReport sender Lease there; "+
		"create it (kubectl create namespace %s) or set %s to the namespace the proxy may write ConfigMaps and Leases in", namespace, namespace, Flag)
}

// Probe keeps whether the proxy's namespace exists, for readiness.
type Probe struct {
	namespaces corev1client.NamespaceInterface
	name       string
	interval   time.Duration
	log        *zap.Logger

	mu      sync.RWMutex
	lastErr error
}

// NewProbe returns a probe of the namespace name; it reports not ready
// until its first check.
func NewProbe(namespaces corev1client.NamespaceInterface, name string, interval time.Duration, log *zap.Logger) *Probe {
	if log == nil {
		log = zap.NewNop()
	}
	if interval <= 0 {
		interval = 2 * time.Second
	}
	return &Probe{namespaces: namespaces, name: name, interval: interval, log: log,
		lastErr: fmt.Errorf("the proxy's namespace %q (%s) has not been checked yet", name, Flag)}
}

// Run checks the namespace every interval until ctx is done.
func (p *Probe) Run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.CheckOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CheckOnce reads the namespace and logs when the answer changes: once
// when it goes missing, once when it is back.
func (p *Probe) CheckOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, min(p.interval, 5*time.Second))
	defer cancel()
	err := p.check(ctx)
	p.mu.Lock()
	prev := p.lastErr
	p.lastErr = err
	p.mu.Unlock()
	switch {
	case err != nil && (prev == nil || prev.Error() != err.Error()):
		p.log.Error("not ready: the proxy cannot keep its records", zap.String("namespace", p.name), zap.Error(err))
	case err == nil && prev != nil:
		p.log.Info("the proxy's namespace exists", zap.String("namespace", p.name))
	}
}

func (p *Probe) check(ctx context.Context) error {
	ns, err := p.namespaces.Get(ctx, p.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return MissingError(p.name)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the proxy may not read its namespace %q (%s): grant its user get on namespaces: %w", p.name, Flag, err)
	case err != nil:
		return fmt.Errorf("reading the proxy's namespace %q (%s): %w", p.name, Flag, err)
	case ns.DeletionTimestamp != nil:
		return fmt.Errorf("the proxy's namespace %q (%s) is being deleted: records written to it are lost with it", p.name, Flag)
	}
	return nil
}

// Err is why the namespace cannot hold the proxy's records, nil when it
// can. A nil probe has nothing to check.
func (p *Probe) Err() error {
	if p == nil {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.lastErr
}
