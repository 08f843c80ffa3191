package policy

import (
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// Finding is one problem as a policy's Ready condition states it.
type Finding struct {
	Reason string
	// Text names the part of the spec at fault and what is wrong with it.
	Text string
}

// maxConditionMessage is the longest message metav1.Condition validation
// accepts; a longer one would make the status write fail.
const maxConditionMessage = 32768

// ReadyCondition is the Ready condition the proxy writes on a policy of
// any kind: True with readyMessage when nothing is wrong, else False with
// the first finding's reason and every finding listed, followed by
// brokenSuffix, so that an author sees all that needs fixing at once.
func ReadyCondition(generation int64, findings []Finding, readyMessage, brokenSuffix string) metav1.Condition {
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: generation}
	if len(findings) == 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonCompiled, readyMessage
		return cond
	}
	texts := make([]string, len(findings))
	for i, f := range findings {
		texts[i] = f.Text
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, findings[0].Reason
	cond.Message = strconv.Itoa(len(findings)) + " problem(s): " + strings.Join(texts, "; ") + brokenSuffix
	if len(cond.Message) > maxConditionMessage {
		cond.Message = cond.Message[:maxConditionMessage]
	}
	return cond
}

// Finding states p in a Ready condition.
func (p Problem) Finding() Finding { return Finding{Reason: p.Reason, Text: p.String()} }
