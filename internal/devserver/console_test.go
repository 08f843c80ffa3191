package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/kausality-io/kausality-proxy/intercept/decisionlog"
)

func TestDecisionConsole(t *testing.T) {
	rs := decisionlog.Line{User: "system:serviceaccount:kube-system:deployment-controller", Verb: "update", Group: "apps", Resource: "replicasets",
		Namespace: "shop", Name: "web-6d4", Decided: true, Parent: "apps/v1 Deployment shop/web"}
	tests := []struct {
		name string
		line func(l decisionlog.Line) decisionlog.Line
		want string // "" for no console line
	}{
		{name: "routine allow", line: func(l decisionlog.Line) decisionlog.Line {
			l.Decision = "Allow"
			l.Category = "ControllerNoDrift"
			return l
		}},
		{name: "deny", line: func(l decisionlog.Line) decisionlog.Line {
			l.Decision, l.Category, l.Reason = "Deny", "DriftUnapproved", "drift: spec.replicas (3 → 2)"
			return l
		}, want: "12:00:00 DENY update replicasets.apps shop/web-6d4 by kube-system:deployment-controller: DriftUnapproved (parent apps/v1 Deployment shop/web)\n"},
		{name: "shadow would deny", line: func(l decisionlog.Line) decisionlog.Line {
			l.Decision, l.Category, l.Reason, l.Shadow, l.WouldDeny = "Allow", "DriftUnapproved", "drift", true, true
			return l
		}, want: "WOULD DENY (shadow) update replicasets.apps shop/web-6d4"},
		{name: "once approval used", line: func(l decisionlog.Line) decisionlog.Line {
			l.Decision, l.Category, l.Approval, l.ApprovalMode = "Allow", "DriftApproved", "ReplicaSet/web-6d4", "once"
			return l
		}, want: "APPROVED ONCE update replicasets.apps shop/web-6d4 by kube-system:deployment-controller: used ReplicaSet/web-6d4 on apps/v1 Deployment shop/web"},
		{name: "generation approval is routine", line: func(l decisionlog.Line) decisionlog.Line {
			l.Decision, l.Category, l.Approval, l.ApprovalMode = "Allow", "DriftApproved", "ReplicaSet/web-6d4", "generation"
			return l
		}},
		{name: "warning", line: func(l decisionlog.Line) decisionlog.Line {
			l.Decision, l.Warnings = "Allow", []string{"drift allowed in log mode", "second"}
			return l
		}, want: "WARNING update replicasets.apps shop/web-6d4 by kube-system:deployment-controller: drift allowed in log mode (and 1 more)"},
		{name: "error", line: func(l decisionlog.Line) decisionlog.Line {
			l.Decided, l.Decision, l.Error = false, decisionlog.DecisionError, "reading the parent: timeout"
			return l
		}, want: "ERROR update replicasets.apps shop/web-6d4 by kube-system:deployment-controller: reading the parent: timeout"},
		{name: "dry run", line: func(l decisionlog.Line) decisionlog.Line {
			l.Decision, l.Category, l.Reason, l.DryRun = "Deny", "Frozen", "frozen", true
			return l
		}, want: "DENY (dry run)"},
		{name: "escape sequences from a request are shown, not acted on", line: func(l decisionlog.Line) decisionlog.Line {
			l.Decision, l.Error = decisionlog.DecisionError, "failed: \x1b[2J"
			return l
		}, want: `failed: \x1b[2J`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var console, next bytes.Buffer
			inner := zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(&next), zapcore.InfoLevel)
			log := zap.New(newDecisionConsole(inner, &console), zap.WithClock(fixedClock{time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}))
			l := tt.line(rs)
			log.Info(decisionlog.Message, zap.Inline(&l))
			log.Info("kube-controller-manager runs through the proxy")
			got := console.String()
			if tt.want == "" && got != "" {
				t.Errorf("a routine Allow on the console: %q", got)
			}
			if tt.want != "" && (!strings.Contains(got, tt.want) || strings.Count(got, "\n") != 1) {
				t.Errorf("console %q, want one line with %q", got, tt.want)
			}
			if !strings.Contains(next.String(), "kube-controller-manager runs through the proxy") || strings.Contains(next.String(), decisionlog.Message) {
				t.Errorf("other messages: %q", next.String())
			}
		})
	}
}

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                         { return c.t }
func (c fixedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// A controller retrying a denied write shows once a minute, with how many
// times it came again.
func TestDecisionConsoleRepeats(t *testing.T) {
	var console bytes.Buffer
	clock := &stepClock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	discard := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel)
	log := zap.New(newDecisionConsole(discard, &console), zap.WithClock(clock))
	deny := decisionlog.Line{User: "u", Verb: "update", Resource: "configmaps", Namespace: "ns", Name: "a", Decided: true, Decision: "Deny", Category: "Frozen"}
	other := deny
	other.Name = "b"
	for _, step := range []struct {
		after time.Duration
		line  decisionlog.Line
	}{{0, deny}, {time.Second, deny}, {2 * time.Second, other}, {10 * time.Second, deny}, {61 * time.Second, deny}, {time.Second, deny}} {
		clock.t = clock.t.Add(step.after)
		l := step.line
		log.Info(decisionlog.Message, zap.Inline(&l))
	}
	want := "12:00:00 DENY update configmaps ns/a by u: Frozen\n" +
		"12:00:03 DENY update configmaps ns/b by u: Frozen\n" +
		"12:01:14 DENY update configmaps ns/a by u: Frozen (and 2 times since 12:00:00)\n"
	if console.String() != want {
		t.Errorf("console:\n%s\nwant:\n%s", console.String(), want)
	}
}

type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time                         { return c.t }
func (c *stepClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }
