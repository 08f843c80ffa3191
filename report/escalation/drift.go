package escalation

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/rules"
)

// OpenDrift is what the drift ledger holds about a drift that is still
// open: everything a click acts on. A click's payload names only the
// drift id; the objects come from here, so a signed click cannot point an
// approval at an object of its choosing.
type OpenDrift struct {
	ID     string
	Parent decision.ObjectRef
	// ParentUID guards against answering a parent that was deleted and
	// created again under the same name since.
	ParentUID string
	// Generation is the parent's generation the drift happened at.
	Generation int64
	// ParentSpecHash is the parent's spec at detection (settle.SpecHash),
	// "" when it could not be read then.
	ParentSpecHash string
	Child          decision.ObjectRef
	// Controller is the user whose write drifted.
	Controller string
	// Message is where the drift was posted; nil before it was.
	Message *MessageRef
}

// ClickClaim is a verified click as the ledger records it, so that the
// same request is applied once whichever replica it reaches.
type ClickClaim struct {
	// Key identifies the signed request.
	Key string
	// Now is when the click arrived and Expires when its signature leaves
	// the window; after that the signature check refuses it anyway.
	Now, Expires time.Time
}

// OpenDrifts is the drift ledger as the interaction endpoint sees it.
type OpenDrifts interface {
	// Claim reads the open drift id from the cluster, lets check refuse
	// it, and records claim on it, conditional on the version read. It
	// fails with ErrNoOpenDrift when there is no open drift of that id,
	// with ErrClickReplayed when claim.Key is recorded already, and with
	// the error of check.
	Claim(ctx context.Context, id string, claim ClickClaim, check func(OpenDrift) error) (OpenDrift, error)
}

var (
	// ErrNoOpenDrift is when the drift a click names is not open (never was, or
	// resolved since).
	ErrNoOpenDrift = errors.New("no open drift")
	// ErrClickReplayed is when the signed request was applied before.
	ErrClickReplayed = errors.New("click already applied")
	// ErrTooManyClicks is when the drift holds as many live clicks as it may;
	// forgetting one would let it be replayed.
	ErrTooManyClicks = errors.New("too many clicks on this drift within the signature window")
)

// driftID is the form of a drift id (notify.FromDecision): checked before
// it names a record to read.
var driftID = regexp.MustCompile(`^[0-9a-f]{8,64}$`)

// refusal is why a click is not applied, as the clicker is told.
type refusal struct {
	status int
	reason string
}

func (r *refusal) Error() string { return r.reason }

// checkClick decides whether a click on the message in clickChannel may
// act on the open drift d. Pure: the channel the drift was posted to and
// the namespaces the proxy never gates come as arguments.
//
// A click is honoured only from the message the drift was posted as, in
// the channel the proxy posts to: the channel's membership is the access
// control, so a click from another channel (a shared or forwarded message,
// another workspace's app) must not count. A drift whose parent or child
// lies in a namespace the proxy never gates is refused even though the
// ledger holds it: nobody may steer system objects through a button, not
// even with a record forged into the proxy's namespace.
func checkClick(d OpenDrift, clickChannel, clickTS, configuredChannel string, excluded []string) error {
	if d.Message == nil {
		// Either the message was suppressed by the rate limit, or the click
		// came before the ledger wrote down where it posted the message.
		return &refusal{status: 409, reason: fmt.Sprintf("drift %s has no Slack message on record yet; click again in a moment, or answer it with kubectl kausality", d.ID)}
	}
	if clickChannel != d.Message.Channel || (isChannelID(configuredChannel) && clickChannel != configuredChannel) {
		return &refusal{status: 403, reason: fmt.Sprintf("clicks on drift %s count only in the channel it was posted to", d.ID)}
	}
	if clickTS != "" && clickTS != d.Message.Timestamp {
		return &refusal{status: 403, reason: fmt.Sprintf("this message is not the one drift %s was posted as", d.ID)}
	}
	for _, ref := range []decision.ObjectRef{d.Parent, d.Child} {
		if ungated(ref, excluded) {
			return &refusal{status: 403, reason: fmt.Sprintf("%s is in a namespace the proxy never gates; nothing is written there from Slack", ref)}
		}
	}
	return nil
}

// ungated reports whether ref is in, or is, a namespace the proxy never
// gates. The defaults count whatever the configuration says: they hold the
// cluster's own components.
func ungated(ref decision.ObjectRef, excluded []string) bool {
	ns := ref.Namespace
	if ref.APIVersion == "v1" && ref.Kind == "Namespace" {
		ns = ref.Name
	}
	if ns == "" {
		return false
	}
	return slices.Contains(excluded, ns) || slices.Contains(rules.DefaultExcludedNamespaces, ns)
}

// channelID is the form of a Slack conversation id; a configured channel
// of another form is a name, which clicks do not carry.
var channelID = regexp.MustCompile(`^[CGD][A-Z0-9]{2,}$`)

func isChannelID(s string) bool { return channelID.MatchString(s) }
