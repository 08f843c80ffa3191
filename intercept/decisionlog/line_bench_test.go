package decisionlog

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Every intercepted write logs one line, so encoding it is on the write
// path's CPU budget: a typical decided line of a controller's write, and a
// full one with every optional field.
func BenchmarkLineMarshal(b *testing.B) {
	routine := Line{User: "system:serviceaccount:kube-system:replicaset-controller", FieldManager: "kube-controller-manager",
		Verb: "update", Operation: "UPDATE", Version: "v1", Resource: "pods", Namespace: "ns", Name: "web-7d9-x2x4",
		Decided: true, DesiredChanged: true, Decision: "Allow", Category: "Expected", Reason: "the parent's generation is not yet observed",
		Controller: "replicaset", Outcome: "allowed", Latency: 2 * time.Millisecond, Mode: "enforce", ModeSource: "namespace",
		Parent: "apps/v1 ReplicaSet ns/web-7d9", ParentGeneration: 4, ParentObservedGeneration: 3, LifecyclePhase: "Initialized",
		ParentSource: "cache", IsController: true, ControllerDetermined: true, ControllerMethod: "managedFields",
		ChangedPaths: []string{"spec.replicas"}}
	full := routine
	full.Approval, full.ApprovalMode, full.Policy = "ReplicaSet/web-7d9", "once", "ApprovalPolicy ns/scale rule 0"
	full.AllowanceMode, full.AllowanceJustified, full.AllowanceGranted = "enforce", []string{"spec.replicas <- ns/hpa (alice)"}, []string{"ns/rollout"}
	full.HasTrace, full.TraceHops, full.TraceOrigin = true, 3, true
	full.Warnings = []string{"the approval is used up"}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	entry := zapcore.Entry{Level: zapcore.InfoLevel, Time: time.Unix(1700000000, 0), Message: Message}
	for _, bc := range []struct {
		name string
		line *Line
	}{{"routine", &routine}, {"full", &full}} {
		b.Run(bc.name, func(b *testing.B) {
			fields := []zapcore.Field{zap.Inline(bc.line)}
			b.ReportAllocs()
			for b.Loop() {
				buf, err := enc.EncodeEntry(entry, fields)
				if err != nil {
					b.Fatal(err)
				}
				buf.Free()
			}
		})
	}
}
