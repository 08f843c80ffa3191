//go:build hardening

package hardening

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// outcome is what the client learned about one write.
type outcome int

const (
	// accepted: 2xx. The write must be in etcd, exactly once.
	accepted outcome = iota
	// denied: 403 with the proxy's drift causes. It must not be in etcd.
	denied
	// refused: any other 4xx Status (a conflict, 429, an invalid object).
	// kube-apiserver or the proxy refused it before applying it: it must
	// not be in etcd.
	refused
	// failed: a 5xx Status. The proxy answered, but the write may have
	// been applied before kube-apiserver or the connection to it went
	// away: it may be in etcd, at most once.
	failed
	// broken: no answer at all (the replica was killed). It may be in
	// etcd, at most once.
	broken
)

func (o outcome) String() string {
	return [...]string{"accepted", "denied", "refused", "failed", "broken"}[o]
}

// writeKind is the role a write plays in a round.
type writeKind string

const (
	kindCreate   writeKind = "create"   // a new Tally while its Rig reconciles
	kindExpected writeKind = "expected" // an update while the Rig reconciles: allowed
	kindDrift    writeKind = "drift"    // an update under a settled Rig: denied
	kindApproved writeKind = "approved" // drift with a once approval: allowed once
	kindStatus   writeKind = "status"   // the controller's status write of its Rig
)

// entry is one write the load sent.
type entry struct {
	controller int
	kind       writeKind
	tally      string
	// marker is unique per write; an applied write leaves it in etcd
	// (spec.created of a create, a key of spec.keys for an update).
	marker  string
	replica int
	start   time.Time
	end     time.Time
	outcome outcome
	code    int32
	err     string
	// approvalConsumed, for an approved write: whether the once approval
	// was gone from the Rig right after the write's answer.
	approvalConsumed bool
	// applied is filled in by the verification: the marker is in etcd.
	applied bool
}

// ledger records every write of the load.
type ledger struct {
	mu       sync.Mutex
	entries  []*entry
	byMarker map[string]*entry
}

func newLedger() *ledger { return &ledger{byMarker: map[string]*entry{}} }

func (l *ledger) add(e *entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
	if e.marker != "" {
		l.byMarker[e.marker] = e
	}
}

func (l *ledger) all() []*entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*entry(nil), l.entries...)
}

// classify turns a client's error into an outcome.
func classify(err error) (outcome, int32) {
	if err == nil {
		return accepted, http.StatusOK
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		switch {
		case s.Code == http.StatusForbidden && isDriftDenial(err):
			return denied, s.Code
		case s.Code >= 400 && s.Code < 500:
			return refused, s.Code
		default:
			return failed, s.Code
		}
	}
	return broken, 0
}

// isDriftDenial reports whether err is the proxy's drift denial (its
// details carry the Kausality causes).
func isDriftDenial(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if strings.HasPrefix(string(c.Type), "Kausality") {
			return true
		}
	}
	return false
}

// violations collects broken invariants; the test fails on any.
type violations struct {
	mu   sync.Mutex
	list []string
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.list = append(v.list, fmt.Sprintf(format, args...))
}

func (v *violations) take() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.list...)
}

// counters count what the test's clients sent through the proxies.
type counters struct {
	requests atomic.Int64 // every request
	writes   atomic.Int64 // POST, PUT, PATCH, DELETE (dry runs included)
}

// countingTransport counts requests and drops Retry-After from answers.
// client-go retries a write answered 429 or 5xx with Retry-After on its
// own; the ledger must see every attempt, or a retry refused with a
// conflict would hide that its first attempt was applied.
type countingTransport struct {
	next     http.RoundTripper
	counters *counters
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.counters.requests.Add(1)
	if req.Method != http.MethodGet {
		t.counters.writes.Add(1)
	}
	resp, err := t.next.RoundTrip(req)
	if resp != nil {
		resp.Header.Del("Retry-After")
	}
	return resp, err
}

// hop is one entry of a kausality.io/trace annotation.
type hop struct {
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	User       string `json:"user"`
}

// checkTrace says what is wrong with the trace of a stored Tally: every
// spec change of a Tally goes through the proxy, which puts the trace into
// the same request, so the trace's last hop names the Tally's current
// generation. A trace written apart from its spec change would not.
func checkTrace(obj *unstructured.Unstructured) error {
	raw, ok := obj.GetAnnotations()["kausality.io/trace"]
	if !ok {
		return errors.New("no kausality.io/trace")
	}
	var hops []hop
	if err := json.Unmarshal([]byte(raw), &hops); err != nil {
		return fmt.Errorf("kausality.io/trace %q: %w", raw, err)
	}
	if len(hops) == 0 {
		return fmt.Errorf("empty kausality.io/trace %q", raw)
	}
	last := hops[len(hops)-1]
	if last.Kind != "Tally" || last.Name != obj.GetName() || last.Generation != obj.GetGeneration() {
		return fmt.Errorf("the trace's last hop %+v does not name Tally %s at generation %d", last, obj.GetName(), obj.GetGeneration())
	}
	return nil
}
