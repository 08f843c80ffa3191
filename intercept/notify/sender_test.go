package notify

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

func count(v *prometheus.CounterVec, p Phase) int {
	return int(testutil.ToFloat64(v.WithLabelValues(string(p))))
}

func TestDedup(t *testing.T) {
	a, b := replicas(1, 3), replicas(1, 4)
	tests := []struct {
		name    string
		urls    int
		reports []DriftReport
		want    []Result
		// wantIDs per URL, in order
		wantIDs []DriftReport
	}{
		{"same drift thrice", 1,
			[]DriftReport{drift(childRS, a), drift(childRS, a), drift(childRS, a)},
			[]Result{Queued, Deduplicated, Deduplicated},
			[]DriftReport{drift(childRS, a)}},
		{"two drifts of one pair", 1,
			[]DriftReport{drift(childRS, a), drift(childRS, b), drift(childRS, a), drift(childRS, b)},
			[]Result{Queued, Queued, Deduplicated, Deduplicated},
			[]DriftReport{drift(childRS, a), drift(childRS, b)}},
		{"same change, two children", 1,
			[]DriftReport{drift(childRS, a), drift(child("web-2"), a)},
			[]Result{Queued, Queued},
			[]DriftReport{drift(childRS, a), drift(child("web-2"), a)}},
		{"two URLs each get it once", 2,
			[]DriftReport{drift(childRS, a), drift(childRS, a)},
			[]Result{Queued, Deduplicated},
			[]DriftReport{drift(childRS, a)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sinks []*sink
			var urls []string
			for range tt.urls {
				k := newSink(t, nil)
				sinks = append(sinks, k)
				urls = append(urls, k.srv.URL)
			}
			h := newHarness(t, Config{URLs: urls}, true)
			for i, r := range tt.reports {
				if got := h.s.Enqueue(r); got != tt.want[i] {
					t.Errorf("Enqueue #%d = %s, want %s", i, got, tt.want[i])
				}
			}
			h.wait(t, len(tt.wantIDs)*tt.urls)
			// Once delivered, the drift stays deduplicated.
			for _, r := range tt.reports {
				if got := h.s.Enqueue(r); got != Deduplicated {
					t.Errorf("Enqueue after delivery = %s, want Deduplicated", got)
				}
			}
			if err := h.s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			h.noMoreEvents(t)
			for i, k := range sinks {
				var got, want []string
				for _, r := range k.delivered() {
					got = append(got, r.Spec.ID)
				}
				for _, r := range tt.wantIDs {
					want = append(want, ID(r.Spec.Parent.Ref(), r.Spec.Child.Ref(), r.Spec.Changes))
				}
				if !slices.Equal(got, want) {
					t.Errorf("URL %d got ids %v, want %v", i, got, want)
				}
			}
			if got, want := count(h.s.m.sent, PhaseDetected), len(tt.wantIDs)*tt.urls; got != want {
				t.Errorf("sent = %d, want %d", got, want)
			}
		})
	}
}

func TestRetry(t *testing.T) {
	const initial = time.Second
	tests := []struct {
		name        string
		maxAttempts int
		codes       []int // answers in order; 200 after
		retryAfter  string
		wantOutcome outcome
		wantReqs    int
		wantDelays  []time.Duration
	}{
		{"500 then success", 5, []int{500}, "", delivered, 2, []time.Duration{initial}},
		{"503, 502, 500 then success: exponential", 5, []int{503, 502, 500}, "", delivered, 4, []time.Duration{initial, 2 * initial, 4 * initial}},
		{"429 with Retry-After", 5, []int{429}, "3", delivered, 2, []time.Duration{3 * time.Second}},
		{"Retry-After capped by max backoff", 5, []int{429}, "3600", delivered, 2, []time.Duration{8 * time.Second}},
		{"backoff capped", 6, []int{500, 500, 500, 500, 500}, "", delivered, 6, []time.Duration{initial, 2 * initial, 4 * initial, 8 * initial, 8 * initial}},
		{"400 is final", 5, []int{400}, "", failed, 1, nil},
		{"404 is final", 5, []int{404}, "", failed, 1, nil},
		{"3xx is final", 5, []int{307}, "", failed, 1, nil},
		{"attempts exhausted", 3, []int{500, 500, 500, 500}, "", failed, 3, []time.Duration{initial, 2 * initial}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newSink(t, func(k *sink) {
				k.respond = func(n int) (int, string) {
					if n <= len(tt.codes) {
						return tt.codes[n-1], tt.retryAfter
					}
					return http.StatusOK, ""
				}
			})
			h := newHarness(t, Config{URLs: []string{k.srv.URL}, MaxAttempts: tt.maxAttempts}, true)
			r := drift(childRS, replicas(1, 3))
			if got := h.s.Enqueue(r); got != Queued {
				t.Fatalf("Enqueue = %s", got)
			}
			ev := h.wait(t, 1)[0]
			if ev.outcome != tt.wantOutcome || ev.attempts != tt.wantReqs {
				t.Errorf("outcome %s after %d attempts, want %s after %d", ev.outcome, ev.attempts, tt.wantOutcome, tt.wantReqs)
			}
			if got := len(k.requests()); got != tt.wantReqs {
				t.Errorf("requests = %d, want %d", got, tt.wantReqs)
			}
			if got := h.clock.Delays(); !slices.Equal(got, tt.wantDelays) {
				t.Errorf("backoff delays = %v, want %v", got, tt.wantDelays)
			}
			if got := count(h.s.m.retries, PhaseDetected); got != len(tt.wantDelays) {
				t.Errorf("retries = %d, want %d", got, len(tt.wantDelays))
			}

			// The next occurrence of the drift: deduplicated if it was
			// delivered, queued again if the delivery failed.
			again := h.s.Enqueue(r)
			if tt.wantOutcome == delivered {
				if again != Deduplicated {
					t.Errorf("after delivery: Enqueue = %s, want Deduplicated", again)
				}
				if got := len(k.delivered()); got != 1 {
					t.Errorf("delivered %d times, want exactly once", got)
				}
				if count(h.s.m.sent, PhaseDetected) != 1 || count(h.s.m.failed, PhaseDetected) != 0 {
					t.Error("want sent 1, failed 0")
				}
				return
			}
			if again != Queued {
				t.Fatalf("after a failed delivery: Enqueue = %s, want Queued (failed is not sent)", again)
			}
			h.wait(t, 1)
			if got := len(k.delivered()); got != 1 {
				t.Errorf("delivered %d times after the retry, want 1", got)
			}
			if count(h.s.m.failed, PhaseDetected) != 1 || count(h.s.m.sent, PhaseDetected) != 1 {
				t.Error("want failed 1, sent 1")
			}
		})
	}
}

func TestTransportErrorIsRetried(t *testing.T) {
	k := newSink(t, nil)
	// A closed port first, then the sink: a second URL would be another
	// target, so swap the transport instead.
	var calls int
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("connection refused")
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	h := newHarness(t, Config{URLs: []string{k.srv.URL}, HTTPClient: client}, true)
	h.s.Enqueue(drift(childRS, replicas(1, 3)))
	if ev := h.wait(t, 1)[0]; ev.outcome != delivered || ev.attempts != 2 {
		t.Errorf("got %+v, want delivered after 2 attempts", ev)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestResolved(t *testing.T) {
	a, b := replicas(1, 3), replicas(1, 4)
	type step struct {
		r    DriftReport
		want Result
	}
	det := func(c ChildRef, ch ...desired.Change) step {
		return step{drift(c, ch...), Queued}
	}
	res := func(c ChildRef, want Result) step {
		r := resolve(c)
		r.Spec.Phase, r.Spec.Reason = PhaseResolved, ReasonApproved
		return step{r, want}
	}
	idOf := func(c ChildRef, ch ...desired.Change) string {
		return ID(parentDeploy.Ref(), c.Ref(), ch)
	}
	type sent struct {
		phase Phase
		id    string
	}
	tests := []struct {
		name  string
		steps []step
		want  []sent
	}{
		{"resolved carries the detected id", []step{det(childRS, a), res(childRS, Queued)},
			[]sent{{PhaseDetected, idOf(childRS, a)}, {PhaseResolved, idOf(childRS, a)}}},
		{"no resolved without detected", []step{res(childRS, NotOpen)}, nil},
		{"no resolved for another pair", []step{det(childRS, a), res(child("web-2"), NotOpen)},
			[]sent{{PhaseDetected, idOf(childRS, a)}}},
		{"resolved once", []step{det(childRS, a), res(childRS, Queued), res(childRS, NotOpen)},
			[]sent{{PhaseDetected, idOf(childRS, a)}, {PhaseResolved, idOf(childRS, a)}}},
		{"same drift after resolution is detected again", []step{det(childRS, a), res(childRS, Queued), det(childRS, a)},
			[]sent{{PhaseDetected, idOf(childRS, a)}, {PhaseResolved, idOf(childRS, a)}, {PhaseDetected, idOf(childRS, a)}}},
		{"new drift after resolution gets a new id", []step{det(childRS, a), res(childRS, Queued), det(childRS, b)},
			[]sent{{PhaseDetected, idOf(childRS, a)}, {PhaseResolved, idOf(childRS, a)}, {PhaseDetected, idOf(childRS, b)}}},
		{"all open drifts of the pair are resolved", []step{det(childRS, a), det(childRS, b), res(childRS, Queued)},
			[]sent{{PhaseDetected, idOf(childRS, a)}, {PhaseDetected, idOf(childRS, b)},
				{PhaseResolved, idOf(childRS, a)}, {PhaseResolved, idOf(childRS, b)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newSink(t, nil)
			h := newHarness(t, Config{URLs: []string{k.srv.URL}}, true)
			for i, st := range tt.steps {
				if got := h.s.Enqueue(st.r); got != st.want {
					t.Errorf("step %d (%s): %s, want %s", i, st.r.Spec.Phase, got, st.want)
				}
			}
			if err := h.s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got []sent
			for _, r := range k.delivered() {
				got = append(got, sent{r.Spec.Phase, r.Spec.ID})
				if r.Spec.Phase == PhaseResolved {
					if r.Spec.Reason != ReasonApproved {
						t.Errorf("reason = %q", r.Spec.Reason)
					}
					if len(r.Spec.Changes) != 1 || r.Spec.Parent.Name != "web" || r.Spec.Child.Name != "web-1" {
						t.Errorf("Resolved does not describe the closed drift: %+v", r.Spec)
					}
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("sink got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestResolvedOnlyWhereDetectedArrived(t *testing.T) {
	// URL 0 accepts. URL 1 holds the Detected report until released, then
	// rejects it with 400: its Resolved report, queued meanwhile, must not
	// be sent.
	ok := newSink(t, nil)
	bad := newSink(t, func(k *sink) {
		k.block = true
		k.respond = func(int) (int, string) { return http.StatusBadRequest, "" }
	})
	h := newHarness(t, Config{URLs: []string{ok.srv.URL, bad.srv.URL}}, true)
	h.s.Enqueue(drift(childRS, replicas(1, 3)))
	if ev := h.wait(t, 1)[0]; ev.url != 0 || ev.outcome != delivered {
		t.Fatalf("got %+v", ev)
	}
	bad.waitArrived(t)
	if got := h.s.Resolved(resolve(childRS)); got != Queued {
		t.Fatalf("Resolved = %s", got)
	}
	close(bad.release)
	byURL := map[int][]string{}
	for _, ev := range h.wait(t, 3) {
		byURL[ev.url] = append(byURL[ev.url], string(ev.phase)+":"+string(ev.outcome))
	}
	if want := []string{"Resolved:Delivered"}; !slices.Equal(byURL[0], want) {
		t.Errorf("URL 0: %v, want %v", byURL[0], want)
	}
	if want := []string{"Detected:Failed", "Resolved:Skipped"}; !slices.Equal(byURL[1], want) {
		t.Errorf("URL 1: %v, want %v", byURL[1], want)
	}
	if got := ok.delivered(); len(got) != 2 || got[1].Spec.Phase != PhaseResolved || got[1].Spec.ID != got[0].Spec.ID {
		t.Errorf("URL 0 got %+v", got)
	}
	if got := len(bad.requests()); got != 1 {
		t.Errorf("URL 1 got %d requests, want only the rejected Detected", got)
	}

	// Nothing delivered anywhere: no Resolved at all.
	down := newSink(t, func(k *sink) { k.respond = func(int) (int, string) { return http.StatusInternalServerError, "" } })
	h2 := newHarness(t, Config{URLs: []string{down.srv.URL}, MaxAttempts: 1}, true)
	h2.s.Enqueue(drift(childRS, replicas(1, 5)))
	h2.wait(t, 1)
	if got := h2.s.Resolved(resolve(childRS)); got != NotOpen {
		t.Errorf("Resolved of an undelivered drift = %s, want NotOpen", got)
	}
}

func TestParentGenerationSupersedes(t *testing.T) {
	k := newSink(t, nil)
	h := newHarness(t, Config{URLs: []string{k.srv.URL}}, true)
	a := replicas(1, 3)
	first := drift(childRS, a)
	h.s.Enqueue(first)
	later := drift(childRS, a)
	later.Spec.Parent.Generation, later.Spec.Parent.ObservedGeneration = 6, 6
	if got := h.s.Enqueue(later); got != Queued {
		t.Fatalf("Enqueue at a newer parent generation = %s, want Queued", got)
	}
	if err := h.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range k.delivered() {
		got = append(got, string(r.Spec.Phase)+"/"+r.Spec.Reason)
	}
	want := []string{"Detected/", "Resolved/" + ReasonParentChanged, "Detected/"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestQueueFullNeverBlocks(t *testing.T) {
	const queueSize, extra = 2, 10
	k := newSink(t, func(k *sink) { k.block = true })
	h := newHarness(t, Config{URLs: []string{k.srv.URL}, QueueSize: queueSize}, true)

	// The first report is taken by the worker and hangs at the sink.
	h.s.Enqueue(drift(child("c-0"), replicas(0, 1)))
	k.waitArrived(t)

	results := make(chan []Result)
	go func() {
		var out []Result
		for i := 1; i <= queueSize+extra; i++ {
			out = append(out, h.s.Enqueue(drift(child("c-"+string(rune('a'+i))), replicas(0, i))))
		}
		// Resolving a pair whose Detected is still queued is not blocking
		// either.
		out = append(out, h.s.Resolved(resolve(child("c-b"))))
		results <- out
	}()
	var got []Result
	select {
	case got = <-results:
	case <-time.After(hangGuard):
		t.Fatal("Enqueue blocked on a full queue")
	}
	var queued, dropped int
	for _, r := range got[:queueSize+extra] {
		switch r {
		case Queued:
			queued++
		case Dropped:
			dropped++
		default:
			t.Errorf("unexpected result %s", r)
		}
	}
	if queued != queueSize || dropped != extra {
		t.Errorf("queued %d, dropped %d; want %d, %d", queued, dropped, queueSize, extra)
	}
	if got[len(got)-1] != Dropped {
		t.Errorf("Resolved on a full queue = %s, want Dropped", got[len(got)-1])
	}
	if c := count(h.s.m.dropped, PhaseDetected); c != extra {
		t.Errorf("dropped metric = %d, want %d", c, extra)
	}

	// A dropped Detected report is not deduplicated away: once there is
	// room, its next occurrence is queued.
	close(k.release)
	h.wait(t, 1+queueSize)
	last := drift(child("c-"+string(rune('a'+queueSize+extra))), replicas(0, queueSize+extra))
	if r := h.s.Enqueue(last); r != Queued {
		t.Errorf("re-occurrence of a dropped report: %s, want Queued", r)
	}
	h.wait(t, 1)
	if err := h.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(k.delivered()); got != 1+queueSize+1 {
		t.Errorf("delivered %d, want %d", got, 1+queueSize+1)
	}
}

func TestShutdown(t *testing.T) {
	t.Run("drains the queue", func(t *testing.T) {
		k := newSink(t, nil)
		h := newHarness(t, Config{URLs: []string{k.srv.URL}}, false)
		for i := range 5 {
			h.s.Enqueue(drift(childRS, replicas(0, i)))
		}
		h.s.Start(context.Background())
		if err := h.s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := len(k.delivered()); got != 5 {
			t.Errorf("delivered %d of 5", got)
		}
		if got := h.s.Enqueue(drift(childRS, replicas(0, 9))); got != Dropped {
			t.Errorf("Enqueue after Shutdown = %s, want Dropped", got)
		}
		if err := h.s.Shutdown(context.Background()); err != nil {
			t.Errorf("second Shutdown: %v", err)
		}
	})

	t.Run("deadline cancels in-flight and drops the rest", func(t *testing.T) {
		k := newSink(t, func(k *sink) { k.block = true })
		h := newHarness(t, Config{URLs: []string{k.srv.URL}}, true)
		for i := range 4 {
			h.s.Enqueue(drift(childRS, replicas(0, i)))
		}
		k.waitArrived(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown = %v, want context.Canceled", err)
		}
		// Shutdown returned: the workers are gone.
		if got := len(k.delivered()); got != 0 {
			t.Errorf("delivered %d", got)
		}
		if got := count(h.s.m.dropped, PhaseDetected); got != 4 {
			t.Errorf("dropped = %d, want 4 (1 in flight + 3 queued)", got)
		}
		if got := h.s.queued(); got != 0 {
			t.Errorf("%d left in the queue", got)
		}
	})

	t.Run("Start context cancelled stops hard", func(t *testing.T) {
		k := newSink(t, func(k *sink) { k.block = true })
		h := newHarness(t, Config{URLs: []string{k.srv.URL}}, false)
		ctx, cancel := context.WithCancel(context.Background())
		h.s.Start(ctx)
		h.s.Enqueue(drift(childRS, replicas(0, 1)))
		k.waitArrived(t)
		cancel()
		if ev := h.wait(t, 1)[0]; ev.outcome != canceled {
			t.Errorf("in-flight delivery: %s, want canceled", ev.outcome)
		}
		_ = h.s.Shutdown(context.Background()) // waits for the stop
		if got := h.s.Enqueue(drift(childRS, replicas(0, 2))); got != Dropped {
			t.Errorf("Enqueue after stop = %s", got)
		}
	})

	t.Run("backoff wait is cut by the deadline", func(t *testing.T) {
		k := newSink(t, func(k *sink) { k.respond = func(int) (int, string) { return 500, "" } })
		block := make(chan time.Time)
		h := newHarness(t, Config{URLs: []string{k.srv.URL}, Clock: blockingClock{block}}, true)
		h.s.Enqueue(drift(childRS, replicas(0, 1)))
		k.waitArrived(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown = %v", err)
		}
		if ev := h.wait(t, 1)[0]; ev.outcome != canceled || ev.attempts != 1 {
			t.Errorf("got %+v", ev)
		}
	})
}

// blockingClock's timers never fire.
type blockingClock struct{ c chan time.Time }

func (b blockingClock) Now() time.Time                       { return time.Time{} }
func (b blockingClock) After(time.Duration) <-chan time.Time { return b.c }

func TestDisabled(t *testing.T) {
	for _, s := range []*Sender{nil, func() *Sender { s, _ := New(Config{}); return s }()} {
		if s.Enabled() {
			t.Fatal("enabled")
		}
		s.Start(context.Background())
		d := &decision.Decision{Report: decision.ReportDetected, Parent: &decision.ParentInfo{}}
		if got := s.Observe(d, Write{}); got != Disabled {
			t.Errorf("Observe = %s", got)
		}
		if got := s.Enqueue(drift(childRS)); got != Disabled {
			t.Errorf("Enqueue = %s", got)
		}
		allocs := testing.AllocsPerRun(100, func() { s.Observe(d, Write{}) })
		if allocs != 0 {
			t.Errorf("Observe on a disabled sender allocates %v times", allocs)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if s.OpenDrifts() != 0 {
			t.Error("open drifts")
		}
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://x/", "localhost:8080", "http://", "://"} {
		if _, err := New(Config{URLs: []string{u}}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

func TestObserve(t *testing.T) {
	parent := &decision.ParentInfo{Ref: parentDeploy.Ref(), Generation: 5, ObservedGeneration: 5, ObservedGenerationSource: "status.observedGeneration"}
	changes := []desired.Change{replicas(1, 3)}
	dec := func(cat decision.Category, res decision.Result, rep decision.ReportPhase) *decision.Decision {
		return &decision.Decision{Category: cat, Result: res, Report: rep, Parent: parent, Child: childRS.Ref()}
	}
	w := Write{Operation: decision.Update, Changes: changes, FieldManager: "m"}
	del := Write{Operation: decision.Delete, Changes: changes}
	tests := []struct {
		name       string
		d          *decision.Decision
		w          Write
		openBefore bool
		want       Result
		wantReason string
	}{
		{"detected", dec(decision.DriftUnapproved, decision.Deny, decision.ReportDetected), w, false, Queued, ""},
		{"detected again", dec(decision.DriftUnapproved, decision.Deny, decision.ReportDetected), w, true, Deduplicated, ""},
		{"snoozed drift: no report", dec(decision.DriftUnapproved, decision.Deny, decision.ReportNone), w, false, Ignored, ""},
		{"dry-run", dec(decision.DriftUnapproved, decision.Deny, decision.ReportDetected), Write{Operation: decision.Update, DryRun: true}, false, Ignored, ""},
		{"no parent", &decision.Decision{Category: decision.NoParent, Report: decision.ReportDetected}, w, false, Ignored, ""},
		{"approved resolves", dec(decision.DriftApproved, decision.Allow, decision.ReportResolved), w, true, Queued, ReasonApproved},
		{"approved, nothing open", dec(decision.DriftApproved, decision.Allow, decision.ReportResolved), w, false, NotOpen, ""},
		{"parent changed resolves", dec(decision.Expected, decision.Allow, decision.ReportNone), w, true, Queued, ReasonParentChanged},
		{"expected, nothing open", dec(decision.Expected, decision.Allow, decision.ReportNone), w, false, NotOpen, ""},
		{"child deleted resolves", dec(decision.NewOrigin, decision.Allow, decision.ReportNone), del, true, Queued, ReasonChildDeleted},
		{"new origin update: nothing", dec(decision.NewOrigin, decision.Allow, decision.ReportNone), w, true, Ignored, ""},
		{"denied delete: nothing", dec(decision.Frozen, decision.Deny, decision.ReportNone), del, true, Ignored, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newSink(t, nil)
			h := newHarness(t, Config{URLs: []string{k.srv.URL}}, true)
			if tt.openBefore {
				if got := h.s.Observe(dec(decision.DriftUnapproved, decision.Allow, decision.ReportDetected), w); got != Queued {
					t.Fatalf("opening: %s", got)
				}
			}
			if got := h.s.Observe(tt.d, tt.w); got != tt.want {
				t.Errorf("Observe = %s, want %s", got, tt.want)
			}
			if err := h.s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := k.delivered()
			if tt.wantReason != "" {
				last := got[len(got)-1]
				wantID := ID(parentDeploy.Ref(), childRS.Ref(), changes)
				if last.Spec.Phase != PhaseResolved || last.Spec.Reason != tt.wantReason || last.Spec.ID != wantID {
					t.Errorf("last report %s %s %s, want Resolved %s %s", last.Spec.Phase, last.Spec.Reason, last.Spec.ID, tt.wantReason, wantID)
				}
				if h.s.OpenDrifts() != 0 {
					t.Error("drift still open")
				}
			}
		})
	}
}

func TestOpenTableBounded(t *testing.T) {
	k := newSink(t, nil)
	h := newHarness(t, Config{URLs: []string{k.srv.URL}, MaxOpen: 2}, true)
	for _, c := range []string{"a", "b", "c"} {
		h.s.Enqueue(drift(child(c), replicas(0, 1)))
	}
	h.wait(t, 3)
	if got := h.s.OpenDrifts(); got != 2 {
		t.Errorf("open = %d, want 2", got)
	}
	// "a" was evicted: not resolvable, and detected again.
	if got := h.s.Resolved(resolve(child("a"))); got != NotOpen {
		t.Errorf("Resolved(evicted) = %s", got)
	}
	if got := h.s.Enqueue(drift(child("b"), replicas(0, 1))); got != Deduplicated {
		t.Errorf("b = %s, want Deduplicated", got)
	}
	// Per pair: at most MaxOpenPerPair, oldest forgotten.
	for i := range MaxOpenPerPair + 3 {
		h.s.Enqueue(drift(child("b"), replicas(10, 100+i)))
	}
	h.wait(t, MaxOpenPerPair+3)
	h.s.mu.Lock()
	n := len(h.s.open.pairs[pairKey(parentDeploy.Ref(), child("b").Ref())].drifts)
	total := int(h.s.open.drifts.Load())
	h.s.mu.Unlock()
	if n != MaxOpenPerPair || total > 2*MaxOpenPerPair {
		t.Errorf("pair holds %d drifts (total %d), want %d", n, total, MaxOpenPerPair)
	}
}

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	k := newSink(t, nil)
	h := newHarness(t, Config{URLs: []string{k.srv.URL}, Registerer: reg}, true)
	h.s.Enqueue(drift(childRS, replicas(1, 2)))
	h.wait(t, 1)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "phase" {
					t.Errorf("%s has label %s", mf.GetName(), l.GetName())
				}
			}
		}
	}
	for _, want := range []string{"enqueued_total", "sent_total", "failed_total", "dropped_total", "deduplicated_total", "retries_total", "open", "queued"} {
		if !slices.Contains(names, "kausality_proxy_driftreports_"+want) {
			t.Errorf("missing %s in %s", want, strings.Join(names, ","))
		}
	}
	if n := testutil.ToFloat64(h.s.m.sent.WithLabelValues("Detected")); n != 1 {
		t.Errorf("sent = %v", n)
	}
	if _, err := New(Config{URLs: []string{k.srv.URL}, Registerer: reg}); err == nil {
		t.Error("registering twice succeeded")
	}
}
