package decisionlog

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// What the proxy writes is what tools read back: a line logged through zap's
// JSON encoder decodes into the same Line, and fields that do not apply are
// left out of the log.
func TestLineRoundTripsThroughTheJSONLog(t *testing.T) {
	cases := map[string]struct {
		line    Line
		absent  []string
		present []string
	}{
		"decided, with a parent": {line: Line{
			User: "u", FieldManager: "m", Verb: "update", Operation: "UPDATE", Resource: "replicasets", Namespace: "ns", Name: "rs",
			Decided: true, DesiredChanged: true, Decision: "Deny", Category: "DriftUnapproved", Reason: "r", Drift: true,
			Controller: "deployments", Outcome: "denied", Mode: "enforce", ModeSource: "namespace",
			Parent: "apps/v1 Deployment ns/web", ParentGeneration: 3, ParentObservedGeneration: 3, LifecyclePhase: "Initialized",
			ParentSource: "live", IsController: true, ControllerDetermined: true, ControllerMethod: "managedFields",
			HasTrace: true, TraceHops: 2, ChangedPaths: []string{"spec.replicas"}, Warnings: []string{"w"}, Confirmed: true,
		}, present: []string{"parentGeneration", "traceHops", "changedPaths", "wouldDeny", "confirmed"}, absent: []string{"error", "approval"}},
		"an error before deciding": {line: Line{User: "u", Verb: "patch", Decision: DecisionError, Outcome: "error", Error: "boom"},
			present: []string{"error"}, absent: []string{"category", "parent", "operation", "traceHops", "mode"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zapcore.InfoLevel))
			log.Info(Message, zap.Inline(&tc.line))
			var fields map[string]any
			if err := json.Unmarshal(buf.Bytes(), &fields); err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.present {
				if _, ok := fields[k]; !ok {
					t.Errorf("field %s missing: %s", k, buf.String())
				}
			}
			for _, k := range tc.absent {
				if _, ok := fields[k]; ok {
					t.Errorf("field %s present: %s", k, buf.String())
				}
			}
			var got Line
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			want := tc.line
			want.Decided, want.HasTrace, want.Latency = false, false, 0
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("read back\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// The line names what changed, never to what: a Secret's keys, not its
// data, whatever the changes carry.
func TestChangedPathsCarryNoValues(t *testing.T) {
	tests := []struct {
		name    string
		changes []desired.Change
		want    []string
	}{
		{"none", nil, nil},
		{"a Secret's keys", []desired.Change{
			{Path: "data.password", Old: `"aHVudGVyMg=="`, New: `"c3dvcmRmaXNo"`},
			{Path: `stringData["tls.key"]`, Old: "<unset>", New: `"-----BEGIN PRIVATE KEY-----"`},
		}, []string{"data.password", `stringData["tls.key"]`}},
		{"spec fields", []desired.Change{{Path: "spec.image", Old: `"registry/app:v17"`, New: `"registry/app:v18"`}, {Path: "spec.template"}},
			[]string{"spec.image", "spec.template"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ChangedPaths(tt.changes)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			var buf bytes.Buffer
			log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zapcore.InfoLevel))
			log.Info(Message, zap.Inline(&Line{Decided: true, ChangedPaths: got}))
			for _, c := range tt.changes {
				for _, v := range []string{c.Old, c.New} {
					if v != "" && v != "<unset>" && strings.Contains(buf.String(), v) {
						t.Errorf("the line carries the value %s: %s", v, buf.String())
					}
				}
			}
		})
	}
}
