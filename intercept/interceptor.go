package intercept

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/clock"

	"github.com/kausality-io/kausality-proxy/intercept/access"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/binding"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
	"github.com/kausality-io/kausality-proxy/intercept/reservations"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/intercept/settlements"
	"github.com/kausality-io/kausality-proxy/intercept/sidewrites"
	"github.com/kausality-io/kausality-proxy/intercept/storedcopies"
	"github.com/kausality-io/kausality-proxy/intercept/subresources"
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
	"github.com/kausality-io/kausality-proxy/internal/stackgrow"
	"github.com/kausality-io/kausality-proxy/report"
)

// ErrorWriter writes an error as a metav1.Status. The proxy owns the wire
// format; intercept only decides which error to send.
type ErrorWriter func(w http.ResponseWriter, err error)

// FailurePolicy says what happens to a write whose parent cannot be read
// (decision.OnFailure).
type FailurePolicy = decision.FailurePolicy

// Failure policies.
const (
	FailurePolicyFail   = decision.FailurePolicyFail
	FailurePolicyIgnore = decision.FailurePolicyIgnore
)

// FieldManager is the field manager of the proxy's own writes (approval
// reservations, controller identity, phase).
const FieldManager = "kausality-proxy"

// PolicySource gives decisions the approval policies of a writer, and
// takes back what their evaluation found.
type PolicySource interface {
	// For returns the compiled policies that apply to user, namespaced
	// first, then cluster policies by name. It does no I/O.
	For(user string) []*policy.Compiled
	// Report records evaluations that exceeded the cost limit or a
	// write's budget, for the policies' status.
	Report(problems []policy.EvalProblem)
}

// AllowanceSource gives decisions the AllowancePolicies, and takes back
// what their evaluation found.
type AllowanceSource interface {
	// All returns every compiled policy, invalid ones included, by name.
	// It does no I/O and the slice must not be changed.
	All() []*allowance.Compiled
	// Report records problems evaluations ran into, for the status.
	Report(problems []allowance.EvalProblem)
	// HasSynced reports whether All holds what kube-apiserver has.
	HasSynced() bool
}

// Config configures an Interceptor.
type Config struct {
	// Objects reads parents, stored children and namespaces.
	Objects *objects.Store
	// Writer makes the proxy's own writes to parents, with the proxy's
	// credentials.
	Writer dynamic.Interface
	// Metadata lists the objects a deletecollection would delete as
	// metadata only, with the proxy's credentials; nil lists them whole
	// through Writer.
	Metadata metadata.Interface
	// Authorizer says whether the effective user may do what a write asks.
	// It is asked before the proxy does any work for the write; nil
	// refuses every intercepted write.
	Authorizer authorizer.Authorizer
	// Settings returns the configuration in force (the --config file may
	// change at run time). nil means config.Default().
	Settings func() *config.Config
	// DefaultMode is --default-mode.
	DefaultMode annotations.DriftMode
	// FailurePolicy is --failure-policy.
	FailurePolicy FailurePolicy
	// MaxBodyBytes bounds the body of an intercepted write (413 above).
	MaxBodyBytes int64
	// Log receives one decision line per intercepted write.
	Log *zap.Logger
	// SideWriteTimeout bounds each write the proxy makes after a
	// successful request.
	SideWriteTimeout time.Duration
	// Metrics receives the write path's metrics; nil registers nowhere.
	Metrics prometheus.Registerer
	// Drifts hears of every decided write, for the DriftReports and the
	// Slack escalation; nil tells nobody.
	Drifts *report.Reporter
	// Policies gives decisions the writer's approval policies; nil means
	// none.
	Policies PolicySource
	// AllowancePolicies are the compiled AllowancePolicies; nil means
	// none, and readiness waits for nothing.
	AllowancePolicies AllowanceSource
	// Clock tells decisions the time (snooze, trace timestamps) and
	// measures latency; nil is the real clock.
	Clock clock.PassiveClock
	// Reservations records each once approval reserved for a write until
	// the write's outcome is settled; nil records none (a replica that
	// dies mid-write then takes the approval with it).
	Reservations *reservations.Store
	// ReservationOrphanAge is when a reservation its replica has not
	// settled is settled by this one; 0 is DefaultReservationOrphanAge.
	ReservationOrphanAge time.Duration
	// UnboundStatusRecordDelay is how long after a status write that names
	// no resourceVersion the generation it landed on is recorded for a kind
	// that reports none (sidewrites.Deferred), unless the config file sets
	// the kind's own; 0 records at once.
	UnboundStatusRecordDelay time.Duration
	// Timers runs the deferred records; nil is the real clock.
	Timers clock.WithDelayedExecution
	// RequestTimeout is the longest the proxy serves a write that is not
	// long-running (its --request-timeout); a forwarded write with a
	// reserved once approval carries what is left of it as its timeout at
	// kube-apiserver. 0 is sidewrites.DefaultWriteTimeout.
	RequestTimeout time.Duration
	// Settlements keeps what this replica learns of its parents'
	// settledness for every replica; nil keeps it in this process only.
	Settlements *settlements.Store
}

// DefaultReservationOrphanAge is when a reservation whose replica has not
// settled it is settled by any replica.
const DefaultReservationOrphanAge = sidewrites.DefaultReservationOrphanAge

// DefaultUnboundStatusRecordDelay is --unbound-status-record-delay: long
// enough for a controller to see a spec change that landed while it was
// computing a status, short beside the time a parent stays settled.
const DefaultUnboundStatusRecordDelay = 30 * time.Second

// MaxUnboundStatusRecordDelay bounds --unbound-status-record-delay as it
// bounds a kind's delay in the config file.
const MaxUnboundStatusRecordDelay = config.MaxUnboundStatusRecordDelay

// Interceptor holds what write interception needs across requests.
type Interceptor struct {
	cfg     Config
	metrics *metrics
	// settled remembers the spec each parent last settled at, learned from
	// the caches and from the parents read for decisions.
	settled *settle.Memory
	// scalePaths remembers where custom resources keep their replicas.
	scalePaths *subresources.Resolver
	// copies are the last whole stored objects seen of children whose
	// writes needed more than their cached metadata.
	copies *storedcopies.Copies
	// watcher and stopBackground are set by Build, which owns the parts.
	watcher        *config.Watcher
	stopBackground context.CancelFunc
	// kinds warns about kinds the config file names that are not served,
	// checked every kindsEvery.
	kinds      *config.KindChecker
	kindsEvery time.Duration
	// access asks what the caller may do.
	access *access.Checker
	// kindChecks are the writers whose status access is being asked, per
	// parent kind (watchParentKind, a kindCheck each): one review per
	// writer and kind at a time, so that no caller's review holds back
	// another's.
	kindChecks sync.Map
	// sideWriter makes the proxy's own writes to parents.
	sideWriter *sidewrites.Writer
	// approvals reserves once approvals and settles them.
	approvals *sidewrites.Approvals
	// deferred makes the records a status write without a resourceVersion
	// asks for, once its writer has had the time to see the latest spec.
	deferred *sidewrites.Deferred
}

// New returns an Interceptor. A nil Objects store makes it a pass-through:
// nothing is intercepted.
func New(cfg Config) *Interceptor {
	if cfg.Settings == nil {
		def := config.Default()
		cfg.Settings = func() *config.Config { return def }
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 3 * 1024 * 1024
	}
	if cfg.DefaultMode == "" {
		cfg.DefaultMode = annotations.ModeLog
	}
	if cfg.FailurePolicy == "" {
		cfg.FailurePolicy = FailurePolicyFail
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = sidewrites.DefaultWriteTimeout
	}
	if cfg.SideWriteTimeout <= 0 {
		cfg.SideWriteTimeout = 10 * time.Second
	}
	if cfg.ReservationOrphanAge <= 0 {
		cfg.ReservationOrphanAge = DefaultReservationOrphanAge
	}
	i := &Interceptor{cfg: cfg, metrics: newMetrics(cfg.Metrics), settled: settle.NewMemory(0, time.Now)}
	i.access = &access.Checker{Authorizer: cfg.Authorizer, Objects: cfg.Objects}
	i.scalePaths = subresources.New(cfg.Objects, cfg.Clock)
	i.copies = storedcopies.New(storedcopies.DefaultLimits)
	i.sideWriter = &sidewrites.Writer{Objects: cfg.Objects, Dynamic: cfg.Writer, FieldManager: FieldManager, Log: cfg.Log, Timeout: cfg.SideWriteTimeout}
	i.approvals = sidewrites.NewApprovals(i.sideWriter, cfg.Reservations, cfg.Clock, cfg.ReservationOrphanAge, cfg.RequestTimeout, i.metrics.reservation)
	if cfg.Timers == nil {
		cfg.Timers = clock.RealClock{}
	}
	i.deferred = sidewrites.NewDeferred(i.sideWriter, cfg.Timers, cfg.SideWriteTimeout, 0, cfg.Log)
	registerDeferredMetrics(cfg.Metrics, i.deferred)
	registerCacheMetrics(cfg.Metrics, cfg.Objects)
	if cfg.Settlements != nil {
		cfg.Settlements.Attach(i.settled)
	}
	if cfg.Objects != nil {
		cfg.Objects.AddObserver(i.settled)
	}
	return i
}

// The caches give a StatusObserver a parent's status without decoding its
// pod templates on every change.
var _ objects.StatusObserver = (*settle.Memory)(nil)

// Wrap returns the handler the proxy chain calls in place of forward.
func (i *Interceptor) Wrap(forward http.Handler, writeError ErrorWriter) http.Handler {
	if i == nil || i.cfg.Objects == nil {
		return forward
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write, ok := i.classify(r)
		if !ok {
			if info, isResource := request.RequestInfoFrom(r.Context()); isResource && binding.Is(info) &&
				i.cfg.Settings().Rules.Targets("", "pods", info.Namespace) {
				i.serveBinding(w, r, info, forward, writeError)
				return
			}
			forward.ServeHTTP(w, r)
			return
		}
		// The write path's frames are large: grown a doubling at a time
		// on the way down, the stack is copied several times per write.
		stackgrow.To32K()
		i.serveWrite(w, r, write, forward, writeError)
	})
}

// serveBinding forwards a Binding of a pod the proxy decides about, read
// whole and untouched, unless package binding refuses it; a refused one
// sends nothing upstream.
func (i *Interceptor) serveBinding(w http.ResponseWriter, r *http.Request, info *request.RequestInfo, forward http.Handler, writeError ErrorWriter) {
	data, err := i.readInterceptedBody(w, r)
	if err == nil {
		err = binding.Refusal(info, r.Header.Get("Content-Type"), data)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	upstream.RestoreBody(r, data)
	forward.ServeHTTP(w, r)
}

// errPoliciesNotSynced is what readiness reports while the approval
// policies are still being listed.
var errPoliciesNotSynced = errors.New("the approval-policy caches have not synced")

// errAllowancePoliciesNotSynced is what readiness reports while the
// allowance policies are still being listed: a controller's write checked
// before would be a violation a policy allows.
var errAllowancePoliciesNotSynced = errors.New("the allowance-policy cache has not synced")

// errSettlementsNotSynced is what readiness reports while the records of
// the parents' settledness are still being read: a replica that decided
// before would be lenient about parents the cluster records as settled.
var errSettlementsNotSynced = errors.New("the records of the parents' settledness have not been read yet")

// Ready reports why the write path cannot decide as it would with complete
// information yet, or nil when it can. The caches it waits for are those
// every decision may consult: the approval and allowance policies and the
// records of settledness. The object caches start lazily and fall back to
// live reads, so they never hold a decision back.
func (i *Interceptor) Ready() error {
	if i == nil {
		return nil
	}
	if s, ok := i.cfg.Policies.(interface{ HasSynced() bool }); ok && !s.HasSynced() {
		return errPoliciesNotSynced
	}
	if i.cfg.AllowancePolicies != nil && !i.cfg.AllowancePolicies.HasSynced() {
		return errAllowancePoliciesNotSynced
	}
	if i.cfg.Settlements != nil && !i.cfg.Settlements.HasSynced() {
		return errSettlementsNotSynced
	}
	return nil
}
