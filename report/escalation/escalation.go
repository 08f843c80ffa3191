// Package escalation takes drift to a Slack channel and lets people answer
// it there. Post puts a DriftReport into the channel as a message with
// four buttons (approve once, approve for the parent's generation, reject,
// snooze for an hour); Resolve closes the message when the drift is gone.
// InteractionHandler is Slack's interaction endpoint: a click, once its
// Slack signature is verified, becomes the same annotation edit of the
// parent that the kubectl plugin writes (annotations.AddApproval,
// AddRejection, SetSnooze), stamped with the Slack user who clicked.
//
// A click names only a drift id. What it acts on comes from the ledger's
// open record of that id, read from the cluster (OpenDrifts), and only a
// click on the drift's own message in the channel it was posted to counts.
// The proxy's own credentials write those edits (ParentEditor), so who may
// answer drift is whoever may click in the channel: the channel's
// membership is the access control.
package escalation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// Config configures an Escalator.
type Config struct {
	// BotToken is the Slack bot token (xoxb-...), used for chat.postMessage
	// and chat.update. Read it with LoadCredentials.
	BotToken string
	// SigningSecret verifies that interaction requests come from Slack.
	SigningSecret string
	// Channel is where drift is posted (an id, or a name the bot may post to).
	Channel string
	// APIURL replaces Slack's API endpoint (tests); "" is Slack. It ends
	// with a slash: methods are appended to it.
	APIURL string
	// Parents writes the answers to the parents' annotations.
	Parents ParentEditor
	// Drifts are the open drifts a click may answer, read from the
	// cluster so that any replica can serve a click.
	Drifts OpenDrifts
	// ExcludedNamespaces returns the namespaces the proxy's configuration
	// never gates; nil is the defaults only. A click never writes there.
	ExcludedNamespaces func() []string
	// Limits bound the drift messages; zero values are the defaults.
	Limits MessageLimits
	// Clock is the time for stamps, snoozes and the signature window;
	// nil is time.Now.
	Clock func() time.Time
	// Log is where failures of clicks are logged; nil logs nothing.
	Log *zap.Logger
	// HTTPClient calls Slack; nil is a client with a 10s timeout.
	HTTPClient *http.Client
}

// MessageRef identifies a posted message, for Resolve. It is stored with
// the open drift, so it serializes as JSON.
type MessageRef struct {
	Channel   string `json:"channel"`
	Timestamp string `json:"ts"`
}

// Escalator posts drift to Slack and handles the clicks on its buttons.
type Escalator struct {
	api           *slack.Client
	channel       string
	signingSecret []byte
	parents       ParentEditor
	drifts        OpenDrifts
	excluded      func() []string
	limiter       *messageLimiter
	clock         func() time.Time
	log           *zap.Logger
	// refusals logs the requests refused for their signature, sampled:
	// anyone who reaches the endpoint can send them, and a flood of them
	// must not become a flood of lines.
	refusals *zap.Logger
	replays  *replayMemory
	// clicks are the clicks being applied after their request was answered.
	clicks sync.WaitGroup
}

// New validates cfg and returns an Escalator.
func New(cfg Config) (*Escalator, error) {
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"BotToken", cfg.BotToken}, {"SigningSecret", cfg.SigningSecret}, {"Channel", cfg.Channel},
	} {
		if strings.TrimSpace(f.value) == "" {
			missing = append(missing, f.name)
		}
	}
	if cfg.Parents == nil {
		missing = append(missing, "Parents")
	}
	if cfg.Drifts == nil {
		missing = append(missing, "Drifts")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("slack escalation: %s required", strings.Join(missing, ", "))
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	opts := []slack.Option{slack.OptionHTTPClient(hc)}
	if cfg.APIURL != "" {
		opts = append(opts, slack.OptionAPIURL(cfg.APIURL))
	}
	e := &Escalator{
		api:           slack.New(cfg.BotToken, opts...),
		channel:       cfg.Channel,
		signingSecret: []byte(cfg.SigningSecret),
		parents:       cfg.Parents,
		drifts:        cfg.Drifts,
		excluded:      cfg.ExcludedNamespaces,
		limiter:       newMessageLimiter(cfg.Limits),
		clock:         cfg.Clock,
		log:           cfg.Log,
		replays:       newReplayMemory(maxRememberedSignatures),
	}
	if e.clock == nil {
		e.clock = time.Now
	}
	if e.log == nil {
		e.log = zap.NewNop()
	}
	e.refusals = sampledPerMinute(e.log, 5)
	if e.excluded == nil {
		e.excluded = func() []string { return nil }
	}
	return e, nil
}

// Post posts a detected drift to the channel and returns where it went.
// Past the message limits it posts nothing and returns ErrSuppressed; the
// drift is counted in a summary message instead.
func (e *Escalator) Post(ctx context.Context, r v1alpha1.DriftReport) (MessageRef, error) {
	if r.Spec.Phase != v1alpha1.PhaseDetected || r.Spec.ID == "" {
		return MessageRef{}, fmt.Errorf("slack escalation: only a Detected report with an id is posted, not phase %q id %q", r.Spec.Phase, r.Spec.ID)
	}
	if ok, schedule := e.limiter.allow(r.Spec.Request.User, e.clock()); !ok {
		if schedule {
			e.scheduleSummary()
		}
		return MessageRef{}, ErrSuppressed
	}
	blocks := detectedBlocks(r)
	channel, ts, err := e.api.PostMessageContext(ctx, e.channel,
		slack.MsgOptionText(fallbackText(r), false), slack.MsgOptionBlocks(blocks...))
	if err != nil {
		return MessageRef{}, fmt.Errorf("slack chat.postMessage of drift %s: %w", r.Spec.ID, err)
	}
	return MessageRef{Channel: channel, Timestamp: ts}, nil
}

// Resolve rewrites the message of a drift to say that it is resolved and
// why (r is the Resolved report, or the Detected one with Reason set). The
// buttons go: there is nothing left to answer.
func (e *Escalator) Resolve(ctx context.Context, ref MessageRef, r v1alpha1.DriftReport) error {
	if ref.Channel == "" || ref.Timestamp == "" {
		return errors.New("slack escalation: resolve needs the message's channel and timestamp")
	}
	_, _, _, err := e.api.UpdateMessageContext(ctx, ref.Channel, ref.Timestamp,
		slack.MsgOptionText("Resolved: "+fallbackText(r), false), slack.MsgOptionBlocks(resolvedBlocks(r)...))
	if err != nil {
		return fmt.Errorf("slack chat.update of drift %s: %w", r.Spec.ID, err)
	}
	return nil
}

// Wait returns when every click answered so far has been applied and its
// message updated; for shutdown (and tests).
func (e *Escalator) Wait() { e.clicks.Wait() }

// Snoozed reports whether the parent's snooze annotations suppress drift
// notifications at now, as the proxy reads them (a malformed snooze is not
// snoozed: notifications keep flowing).
func Snoozed(parent *unstructured.Unstructured, now time.Time) bool {
	if parent == nil {
		return false
	}
	s, _ := annotations.ParseSnooze(parent.GetAnnotations())
	return s.ActiveAt(now)
}

// Files of the mounted Secret that LoadCredentials reads.
const (
	BotTokenFile      = "bot-token"
	SigningSecretFile = "signing-secret"
)

// LoadCredentials reads the bot token and the signing secret from the
// files bot-token and signing-secret of dir (a mounted Secret). Surrounding
// whitespace, such as the newline an editor leaves, is trimmed. The
// credentials come from files, never from flags, which other users of the
// node can read in the process list.
func LoadCredentials(dir string) (botToken, signingSecret string, err error) {
	read := func(name string) (string, error) {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("slack credentials: reading %s: %w", path, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("slack credentials: %s is empty", path)
		}
		return v, nil
	}
	if botToken, err = read(BotTokenFile); err != nil {
		return "", "", err
	}
	if signingSecret, err = read(SigningSecretFile); err != nil {
		return "", "", err
	}
	return botToken, signingSecret, nil
}

// sampledPerMinute is log writing at most n lines of each message a
// minute.
func sampledPerMinute(log *zap.Logger, n int) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Minute, n, 0)
	}))
}
