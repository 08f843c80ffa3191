// Package report tells people about drift. It is a subsystem beside the
// write path: the write path hands it each decided write (Observe) and
// never waits for it; from there the drift ledger (drifts) records open
// drifts as ConfigMaps, the elected sender POSTs DriftReports (notify), and
// Slack escalation (escalation) posts messages whose buttons annotate the
// parent.
//
// The write path imports this package only, never its sub-packages; the
// sub-packages import the write path's pure vocabulary (decision, desired,
// trace, annotations, approval, settle, rules) and the object caches, never
// its orchestration.
package report

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/report/drifts"
	"github.com/kausality-io/kausality-proxy/report/escalation"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

// Write is what the write path knows of a write besides its decision.
type Write = notify.Write

// MessageLimits bound the Slack messages; zero values are the defaults.
type MessageLimits = escalation.MessageLimits

// Config is what the subsystem needs: where to keep records, whom to tell,
// and the write path's object caches to follow parents and children.
type Config struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Objects *objects.Store

	// Namespace holds the drift records and the sender's Lease.
	Namespace string
	// Identity names this replica in the Lease.
	Identity string

	// Receivers are the DriftReport webhook URLs.
	Receivers []string
	// ReceiverTokenFile holds the bearer token sent with every
	// DriftReport ("" = none).
	ReceiverTokenFile string
	// Timeout bounds one POST to a receiver.
	Timeout time.Duration

	// SlackChannel, when set, escalates each drift to this channel.
	SlackChannel string
	// SlackCredentialsDir holds the files bot-token and signing-secret.
	SlackCredentialsDir string
	// SlackAPIURL replaces Slack's API endpoint (tests).
	SlackAPIURL string
	SlackLimits MessageLimits
	// ExcludedNamespaces are read on every click: a click never edits a
	// parent in a namespace the proxy does not gate.
	ExcludedNamespaces func() []string

	// Timings of the sender election, the delivery backoff and the
	// periodic recheck of open drifts; zero values are the defaults.
	LeaseDuration, RenewDeadline, RetryPeriod, BackoffMax, Recheck time.Duration

	Log        *zap.Logger
	Registerer prometheus.Registerer
}

// Reporter is the running subsystem. A nil Reporter tells nobody: every
// method is a no-op on it.
type Reporter struct {
	ledger *drifts.Ledger
	slack  *escalation.Escalator
}

// New builds the subsystem; with no receiver and no Slack channel there is
// nobody to tell, and it returns nil.
func New(c Config) (*Reporter, error) {
	// A person reading the records with kubectl kausality drifts is
	// someone to tell: the proxy's namespace alone is enough.
	if c.Namespace == "" && len(c.Receivers) == 0 && c.SlackChannel == "" {
		return nil, nil
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	receiverToken, err := readReceiverToken(c.ReceiverTokenFile)
	if err != nil {
		return nil, err
	}
	lo := drifts.Options{
		Client: c.Client, Namespace: c.Namespace, Identity: c.Identity, Objects: c.Objects,
		Receivers: c.Receivers, ReceiverToken: receiverToken, Timeout: c.Timeout,
		Backoff:       notify.Backoff{Max: c.BackoffMax},
		LeaseDuration: c.LeaseDuration, RenewDeadline: c.RenewDeadline, RetryPeriod: c.RetryPeriod, Recheck: c.Recheck,
		Log: c.Log, Registerer: c.Registerer,
	}
	r := &Reporter{}
	if c.SlackChannel != "" {
		if r.slack, err = newEscalator(c); err != nil {
			return nil, err
		}
		lo.Escalator = r.slack
	}
	if r.ledger, err = drifts.New(lo); err != nil {
		return nil, fmt.Errorf("drift reports: %w", err)
	}
	return r, nil
}

func readReceiverToken(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--drift-webhook-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("--drift-webhook-token-file %s is empty", file)
	}
	return token, nil
}

func newEscalator(c Config) (*escalation.Escalator, error) {
	if c.SlackCredentialsDir == "" {
		return nil, errors.New("--slack-channel needs --slack-credentials-dir: the bot token and the signing secret come from a mounted Secret")
	}
	token, secret, err := escalation.LoadCredentials(c.SlackCredentialsDir)
	if err != nil {
		return nil, fmt.Errorf("--slack-credentials-dir: %w", err)
	}
	esc, err := escalation.New(escalation.Config{
		BotToken: token, SigningSecret: secret, Channel: c.SlackChannel, APIURL: c.SlackAPIURL,
		Parents:            escalation.NewDynamicParentEditor(c.Dynamic, c.Objects.RESTMapper()),
		Drifts:             drifts.NewClicks(c.Client, c.Namespace),
		ExcludedNamespaces: c.ExcludedNamespaces,
		Limits:             c.SlackLimits,
		Log:                c.Log.Named("slack"),
	})
	if err != nil {
		return nil, fmt.Errorf("slack escalation: %w", err)
	}
	return esc, nil
}

// Observe takes a decided write once its outcome is known. It never
// blocks the write path.
func (r *Reporter) Observe(d *decision.Decision, w Write, parent *unstructured.Unstructured) {
	if r == nil {
		return
	}
	r.ledger.Observe(d, w, parent)
}

// Run records drifts and takes part in the election of the sender until
// ctx is done.
func (r *Reporter) Run(ctx context.Context) {
	if r == nil {
		return
	}
	r.ledger.Run(ctx)
}

// SlackInteractions is the endpoint Slack posts button clicks to; nil
// without Slack escalation.
func (r *Reporter) SlackInteractions() http.Handler {
	if r == nil || r.slack == nil {
		return nil
	}
	return r.slack.InteractionHandler()
}

// Shutdown applies the clicks already answered and records the drifts
// taken, within ctx.
func (r *Reporter) Shutdown(ctx context.Context) error {
	if r == nil {
		return nil
	}
	if r.slack != nil {
		// Clicks already answered 200 are applied before the process ends.
		done := make(chan struct{})
		go func() { r.slack.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	return r.ledger.Shutdown(ctx)
}
