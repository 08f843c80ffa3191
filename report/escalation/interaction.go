package escalation

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

const (
	// signatureWindow is how far a request's timestamp may be from now:
	// Slack's recommendation, and how long a signature is remembered.
	signatureWindow = 5 * time.Minute
	// maxInteractionBody bounds a request; a click's payload (the message
	// with its blocks included) is a few KiB.
	maxInteractionBody = 64 << 10
	// maxRememberedSignatures bounds the replay memory. Only requests
	// signed with the secret enter it, so only Slack can fill it.
	maxRememberedSignatures = 4096
	// clickTimeout bounds applying a click after its request was answered.
	clickTimeout = 30 * time.Second
)

// Signature headers of Slack requests.
const (
	signatureHeader = "X-Slack-Signature"
	timestampHeader = "X-Slack-Request-Timestamp"
)

var (
	errMissingSignature = errors.New("missing signature headers")
	errBadSignature     = errors.New("invalid signature")
	errExpired          = errors.New("timestamp outside the signature window")
	errReplayed         = errors.New("signature already used")
	errTooManyRequests  = errors.New("too many signed requests in the signature window")
)

// InteractionHandler is the endpoint Slack sends button clicks to. A
// request is answered 200 as soon as it is verified and understood (Slack
// gives up after 3 seconds); the edit of the parent and the update of the
// message follow (Wait waits for them).
//
// Nothing of a request is parsed before its signature is verified: an
// unsigned, wrongly signed, stale or replayed request is answered 401 and
// changes nothing.
func (e *Escalator) InteractionHandler() http.Handler {
	return http.HandlerFunc(e.serveInteraction)
}

func (e *Escalator) serveInteraction(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInteractionBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the request failed", http.StatusBadRequest)
		return
	}
	claim, err := e.verify(r.Header, body)
	if err != nil {
		e.refusals.Info("slack interaction refused (at most 5 such lines a minute)", zap.Error(err), zap.String("remote", r.RemoteAddr))
		if errors.Is(err, errTooManyRequests) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	c, err := parseClick(body)
	if err != nil {
		e.log.Info("slack interaction not understood", zap.Error(err))
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d, status, err := e.claim(r.Context(), c, claim)
	if err != nil {
		log := e.log.With(zap.String("drift", c.driftID), zap.String("action", c.action), zap.String("user", c.who()),
			zap.String("channel", c.message.Channel))
		if status == http.StatusUnauthorized {
			log.Info("slack click refused", zap.Error(err))
			http.Error(w, "unauthorized", status)
			return
		}
		log.Warn("slack click refused", zap.Error(err))
		// The clicker sees why; Slack also marks the click as failed.
		e.clicks.Go(func() { e.tellClicker(context.WithoutCancel(r.Context()), c, err.Error()) })
		http.Error(w, err.Error(), status)
		return
	}
	ctx := context.WithoutCancel(r.Context())
	e.clicks.Go(func() { e.apply(ctx, c, d) })
	w.WriteHeader(http.StatusOK)
}

// claimTimeout bounds reading and claiming the drift while Slack waits
// for the answer (it gives up after 3 seconds).
const claimTimeout = 2500 * time.Millisecond

// claim binds a click to the open drift it names and records it there,
// so that a replay is refused by every replica. It returns the status to
// answer with when the click is refused.
func (e *Escalator) claim(ctx context.Context, c click, claim ClickClaim) (OpenDrift, int, error) {
	if !driftID.MatchString(c.driftID) {
		return OpenDrift{}, http.StatusNotFound, fmt.Errorf("%q is not a drift id; nothing was written", c.driftID)
	}
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	excluded := e.excluded()
	d, err := e.drifts.Claim(ctx, c.driftID, claim, func(d OpenDrift) error {
		return checkClick(d, c.message.Channel, c.message.Timestamp, e.channel, excluded)
	})
	var refused *refusal
	switch {
	case err == nil:
		return d, http.StatusOK, nil
	case errors.Is(err, ErrClickReplayed):
		return OpenDrift{}, http.StatusUnauthorized, err
	case errors.Is(err, ErrTooManyClicks):
		return OpenDrift{}, http.StatusTooManyRequests, fmt.Errorf("%w; nothing was written, click again in a few minutes", err)
	case errors.Is(err, ErrNoOpenDrift):
		return OpenDrift{}, http.StatusNotFound,
			fmt.Errorf("drift %s is not open (it was resolved, or never detected); nothing was written", c.driftID)
	case errors.As(err, &refused):
		return OpenDrift{}, refused.status, fmt.Errorf("%s; nothing was written", refused.reason)
	}
	return OpenDrift{}, http.StatusServiceUnavailable,
		fmt.Errorf("the open drifts cannot be read now (%v); nothing was written, click again", err)
}

// tellClicker shows the clicker, and only them, why their click did not
// count.
func (e *Escalator) tellClicker(ctx context.Context, c click, why string) {
	if c.message.Channel == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, clickTimeout)
	defer cancel()
	_, err := e.api.PostEphemeralContext(ctx, c.message.Channel, c.userID,
		slack.MsgOptionText(":warning: "+code(why), false))
	if err != nil {
		e.log.Info("cannot tell a clicker why the click was refused", zap.Error(err))
	}
}

// verify checks Slack's v0 signature: hex HMAC-SHA256 of
// "v0:{timestamp}:{body}" under the signing secret, the timestamp within
// signatureWindow of the clock, and the signature not seen by this
// replica before (the ledger's claim refuses what another replica saw). The
// window is checked here, not by slack.NewSecretsVerifier, because that
// one reads the wall clock and the Escalator's clock is injected.
func (e *Escalator) verify(h http.Header, body []byte) (ClickClaim, error) {
	sigHeader, tsHeader := h.Get(signatureHeader), h.Get(timestampHeader)
	if sigHeader == "" || tsHeader == "" {
		return ClickClaim{}, errMissingSignature
	}
	hexSig, ok := strings.CutPrefix(sigHeader, "v0=")
	if !ok {
		return ClickClaim{}, errBadSignature
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil || len(sig) != sha256.Size {
		return ClickClaim{}, errBadSignature
	}
	secs, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return ClickClaim{}, errBadSignature
	}
	sent, now := time.Unix(secs, 0), e.clock()
	if now.Sub(sent).Abs() > signatureWindow {
		return ClickClaim{}, errExpired
	}
	mac := hmac.New(sha256.New, e.signingSecret)
	mac.Write([]byte("v0:" + tsHeader + ":"))
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), sig) {
		return ClickClaim{}, errBadSignature
	}
	// Keyed by the decoded bytes: the same signature in other hex case is
	// the same request. The signature covers the timestamp and the whole
	// payload (action_ts, trigger_id), so it names the request.
	claim := ClickClaim{Key: hex.EncodeToString(sig[:16]), Now: now, Expires: sent.Add(signatureWindow)}
	return claim, e.replays.firstUse(string(sig), claim.Expires, now)
}

// replayMemory remembers the signatures of verified requests until their
// timestamp leaves the window, after which the window check refuses them.
type replayMemory struct {
	mu    sync.Mutex
	max   int
	until map[string]time.Time
}

func newReplayMemory(maxEntries int) *replayMemory {
	return &replayMemory{max: maxEntries, until: map[string]time.Time{}}
}

// firstUse records sig, valid until expires, and fails if it was seen. It
// fails closed when full of live signatures: forgetting one would let it
// be replayed.
func (m *replayMemory) firstUse(sig string, expires, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if until, seen := m.until[sig]; seen && !now.After(until) {
		return errReplayed
	}
	if len(m.until) >= m.max {
		for s, until := range m.until {
			if now.After(until) {
				delete(m.until, s)
			}
		}
		if len(m.until) >= m.max {
			return errTooManyRequests
		}
	}
	m.until[sig] = expires
	return nil
}

// click is a verified, understood button click.
type click struct {
	action string
	// driftID is all a click says about what it acts on.
	driftID string
	// userID and userName are the Slack user who clicked.
	userID, userName string
	// message is the clicked message, and blocks its blocks as Slack sent
	// them back (nil when it did not).
	message MessageRef
	blocks  []slack.Block
}

func parseClick(body []byte) (click, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return click{}, fmt.Errorf("form: %w", err)
	}
	payload := form.Get("payload")
	if payload == "" {
		return click{}, errors.New("no payload")
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal([]byte(payload), &cb); err != nil {
		return click{}, fmt.Errorf("payload: %w", err)
	}
	if cb.Type != slack.InteractionTypeBlockActions {
		return click{}, fmt.Errorf("unsupported interaction type %q", cb.Type)
	}
	if len(cb.ActionCallback.BlockActions) != 1 {
		return click{}, fmt.Errorf("want one action, got %d", len(cb.ActionCallback.BlockActions))
	}
	a := cb.ActionCallback.BlockActions[0]
	switch a.ActionID {
	case ActionApproveOnce, ActionApproveGeneration, ActionReject, ActionSnooze:
	default:
		return click{}, fmt.Errorf("unknown action %q", a.ActionID)
	}
	v, err := decodeButtonValue(a.Value)
	if err != nil {
		return click{}, err
	}
	c := click{action: a.ActionID, driftID: v.DriftID, userID: cb.User.ID, userName: cb.User.Username, blocks: cb.Message.Blocks.BlockSet}
	if c.userName == "" {
		c.userName = cb.User.Name
	}
	if c.userID == "" {
		return click{}, errors.New("no user")
	}
	c.message = MessageRef{Channel: cb.Container.ChannelID, Timestamp: cb.Container.MessageTs}
	if c.message.Channel == "" {
		c.message.Channel = cb.Channel.ID
	}
	if c.message.Timestamp == "" {
		c.message.Timestamp = cb.Message.Timestamp
	}
	return c, nil
}

// who is the clicker as the annotations record them.
func (c click) who() string { return "slack:" + c.userID + "/" + c.userName }

// slackUserID is the form of a Slack user id; only such an id is put into
// a mention, anything else is shown as text.
var slackUserID = regexp.MustCompile(`^[A-Z0-9]{2,32}$`)

func (c click) mention() string {
	if slackUserID.MatchString(c.userID) {
		return "<@" + c.userID + ">"
	}
	return "`" + code(c.who()) + "`"
}

// apply writes the click's edit to the parent of the open drift d and
// tells the channel.
func (e *Escalator) apply(ctx context.Context, c click, d OpenDrift) {
	ctx, cancel := context.WithTimeout(ctx, clickTimeout)
	defer cancel()
	st := annotations.Stamp{User: c.who(), At: e.clock()}
	var edit annotations.Edit
	var generation int64
	err := e.parents.Edit(ctx, d.Parent, func(parent *unstructured.Unstructured) (annotations.Edit, error) {
		var err error
		edit, generation, err = c.compute(parent, d, st)
		return edit, err
	})
	log := e.log.With(zap.String("drift", d.ID), zap.String("action", c.action), zap.String("user", c.who()),
		zap.Stringer("parent", d.Parent))
	outcome, answered := c.outcome(edit, generation, err)
	if err != nil {
		log.Warn("slack click not applied", zap.Error(err))
	} else {
		log.Info("slack click applied", zap.String("edit", edit.Summary), zap.Bool("unchanged", edit.Unchanged))
	}
	if c.message.Channel == "" || c.message.Timestamp == "" {
		log.Warn("slack click: no message to update")
		return
	}
	blocks := clickedBlocks(c.blocks, d, outcome, !answered)
	_, _, _, err = e.api.UpdateMessageContext(ctx, c.message.Channel, c.message.Timestamp,
		slack.MsgOptionText(fmt.Sprintf("Drift %s: %s", d.ID, outcome), false), slack.MsgOptionBlocks(blocks...))
	if err != nil {
		log.Warn("slack chat.update after a click failed", zap.Error(err))
	}
}

// compute is the edit of the parent a click on drift d asks for, computed
// from the parent as read, and the parent generation an approval is for.
func (c click) compute(parent *unstructured.Unstructured, d OpenDrift, st annotations.Stamp) (annotations.Edit, int64, error) {
	if err := SameParent(parent, d.ParentUID); err != nil {
		return annotations.Edit{}, 0, err
	}
	ann := parent.GetAnnotations()
	switch c.action {
	case ActionApproveOnce, ActionApproveGeneration:
		generation, err := ApprovableGeneration(parent, d.Generation, d.ParentSpecHash)
		if err != nil {
			return annotations.Edit{}, 0, err
		}
		mode := annotations.ApprovalOnce
		if c.action == ActionApproveGeneration {
			mode = annotations.ApprovalGeneration
		}
		a := annotations.Approval{APIVersion: d.Child.APIVersion, Kind: d.Child.Kind, Name: d.Child.Name, Generation: generation, Mode: mode}
		edit, err := annotations.AddApprovalTo(ann, a, st)
		return edit, generation, err
	case ActionReject:
		r := annotations.Rejection{APIVersion: d.Child.APIVersion, Kind: d.Child.Kind, Name: d.Child.Name,
			Reason: "rejected in Slack by " + c.who()}
		edit, err := annotations.AddRejection(ann[annotations.Rejections], r, st)
		return edit, 0, err
	case ActionSnooze:
		edit, err := annotations.SetSnooze(snoozeFor, "snoozed in Slack (drift "+d.ID+")", st)
		return edit, 0, err
	}
	return annotations.Edit{}, 0, fmt.Errorf("unknown action %q", c.action)
}

// SameParent reports an error when parent is not the object a drift was
// detected under (uid; "" when the record has none): it was deleted and
// created again under the same name since, and whatever is decided for
// the drift must not land on the new one.
func SameParent(parent *unstructured.Unstructured, uid string) error {
	if uid != "" && string(parent.GetUID()) != uid {
		return fmt.Errorf("the parent was deleted and created again since the drift (uid %s, now %s)", uid, parent.GetUID())
	}
	return nil
}

// ApprovableGeneration is the parent generation an approval of a drift
// detected at generation, with the parent's spec then hashing to specHash
// ("" when unknown), is written for. An approval names a generation;
// after the parent's spec changed it would approve a write nobody was
// shown, and the drift is gone. Some kinds bump the generation when only
// annotations change (a snooze on the same drift does that): with the
// spec as it was at detection, the approval is for the parent's current
// generation.
func ApprovableGeneration(parent *unstructured.Unstructured, generation int64, specHash string) (int64, error) {
	g := parent.GetGeneration()
	if g == generation {
		return g, nil
	}
	if g > generation && specHash != "" && settle.SpecHash(parent) == specHash {
		return g, nil
	}
	return 0, fmt.Errorf("the parent's spec changed since the drift (generation %d, now %d): the write is no longer drift", generation, g)
}

// outcome says in the message who did what, and whether the drift is
// answered (its buttons go). A failed click leaves the buttons to retry.
func (c click) outcome(edit annotations.Edit, generation int64, err error) (text string, answered bool) {
	var emoji, did, try string
	switch c.action {
	case ActionApproveOnce:
		emoji, did, try, answered = ":white_check_mark:", "approved the next write (once)", "approve", true
	case ActionApproveGeneration:
		emoji, did, try, answered = ":white_check_mark:",
			fmt.Sprintf("approved the writes while the parent is at generation %d", generation), "approve", true
	case ActionReject:
		emoji, did, try, answered = ":no_entry:",
			"rejected the drift (until the rejection is removed from kausality.io/rejections)", "reject", true
	case ActionSnooze:
		emoji, did, try = ":zzz:", "snoozed the notifications of the parent for an hour", "snooze"
	}
	if err != nil {
		return fmt.Sprintf(":warning: %s tried to %s, but nothing was written: %s", c.mention(), try, code(err.Error())), false
	}
	text = fmt.Sprintf("%s %s %s", emoji, c.mention(), did)
	if edit.Unchanged {
		text += " (the parent already said so: " + code(edit.Summary) + ")"
	}
	return text, answered
}
