package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// hangGuard only turns a hang into a failure; no test asserts on time.
const hangGuard = 30 * time.Second

// fakeClock fires every backoff at once and records the delays.
type fakeClock struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (c *fakeClock) Now() time.Time { return time.Unix(1700000000, 0) }

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.delays = append(c.delays, d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

func (c *fakeClock) Delays() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.delays...)
}

// received is one request seen by the sink.
type received struct {
	Code   int
	Raw    map[string]any
	Report DriftReport
}

// sink is the test receiver: it records what it is sent and answers with
// respond (200 by default). With block set, each request waits for a
// value on release (or for the client to give up) before answering.
type sink struct {
	t       *testing.T
	srv     *httptest.Server
	respond func(n int) (code int, retryAfter string)
	block   bool
	release chan struct{}
	arrived chan struct{}

	mu  sync.Mutex
	all []received
}

func newSink(t *testing.T, configure func(*sink)) *sink {
	k := &sink{t: t, release: make(chan struct{}), arrived: make(chan struct{}, 1000)}
	if configure != nil {
		configure(k)
	}
	k.srv = httptest.NewServer(http.HandlerFunc(k.serve))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		k.t.Errorf("sink: got %s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
	}
	k.arrived <- struct{}{}
	if k.block {
		select {
		case <-k.release:
		case <-r.Context().Done():
			return
		}
	}
	var rec received
	if err := json.Unmarshal(body, &rec.Raw); err != nil {
		k.t.Errorf("sink: body is not JSON: %v", err)
	}
	if err := json.Unmarshal(body, &rec.Report); err != nil {
		k.t.Errorf("sink: body is not a DriftReport: %v", err)
	}
	k.mu.Lock()
	n := len(k.all) + 1
	rec.Code = http.StatusOK
	var retryAfter string
	if k.respond != nil {
		rec.Code, retryAfter = k.respond(n)
	}
	k.all = append(k.all, rec)
	k.mu.Unlock()
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(rec.Code)
}

// requests returns every request seen.
func (k *sink) requests() []received {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]received(nil), k.all...)
}

// delivered returns the reports answered with 2xx.
func (k *sink) delivered() []DriftReport {
	var out []DriftReport
	for _, r := range k.requests() {
		if r.Code/100 == 2 {
			out = append(out, r.Report)
		}
	}
	return out
}

func (k *sink) waitArrived(t *testing.T) {
	t.Helper()
	select {
	case <-k.arrived:
	case <-time.After(hangGuard):
		t.Fatal("no request arrived at the sink")
	}
}

// harness is a started Sender with its delivery events.
type harness struct {
	s      *Sender
	clock  *fakeClock
	events chan done
}

func newHarness(t *testing.T, cfg Config, start bool) *harness {
	t.Helper()
	h := &harness{clock: &fakeClock{}, events: make(chan done, 10000)}
	if cfg.Clock == nil {
		cfg.Clock = h.clock
	}
	if cfg.Backoff.Initial == 0 {
		cfg.Backoff = Backoff{Initial: time.Second, Max: 8 * time.Second}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.onDone = func(d done) { h.events <- d }
	h.s = s
	if start {
		ctx, cancel := context.WithCancel(context.Background())
		s.Start(ctx)
		t.Cleanup(func() {
			_ = s.Shutdown(context.Background())
			cancel()
		})
	}
	return h
}

// wait returns the next n finished deliveries.
func (h *harness) wait(t *testing.T, n int) []done {
	t.Helper()
	var out []done
	for len(out) < n {
		select {
		case d := <-h.events:
			out = append(out, d)
		case <-time.After(hangGuard):
			t.Fatalf("waited for %d deliveries, got %d: %+v", n, len(out), out)
		}
	}
	return out
}

// noMoreEvents asserts that no further delivery has finished. Callers make
// sure the workers are idle (e.g. after Shutdown).
func (h *harness) noMoreEvents(t *testing.T) {
	t.Helper()
	select {
	case d := <-h.events:
		t.Fatalf("unexpected delivery: %+v", d)
	default:
	}
}

var (
	parentDeploy = ParentRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web",
		Generation: 5, ObservedGeneration: 5, ControllerManager: "deploy-controller", LifecyclePhase: "Initialized"}
	childRS = ChildRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "ns", Name: "web-1", UID: "uid-1", Generation: 3}
)

func child(name string) ChildRef {
	c := childRS
	c.Name = name
	return c
}

func drift(c ChildRef, changes ...desired.Change) DriftReport {
	return DriftReport{Spec: DriftReportSpec{Phase: PhaseDetected, Parent: parentDeploy, Child: c,
		Request: RequestInfo{User: "system:serviceaccount:kube-system:deployment-controller", FieldManager: "kube-controller-manager", Operation: "UPDATE"},
		Changes: changes}}
}

func replicas(from, to int) desired.Change {
	return desired.Change{Path: "spec.replicas", Old: strconv.Itoa(from), New: strconv.Itoa(to)}
}

func resolve(c ChildRef) DriftReport {
	return DriftReport{Spec: DriftReportSpec{Parent: parentDeploy, Child: c}}
}
