package decisionlog

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// encodeLine writes one decision line the way the proxy's log does: zap's
// production JSON encoder, at a fixed time so that the bytes can be compared.
func encodeLine(t testing.TB, l *Line) string {
	t.Helper()
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	buf, err := enc.EncodeEntry(zapcore.Entry{Level: zapcore.InfoLevel, Time: time.Unix(1700000000, 0), Message: Message},
		[]zapcore.Field{zap.Inline(l)})
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	return buf.String()
}

// Tools parse the decision line by its field names and rely on which fields
// a line has (the shadow report, the dev console, the e2e tests): the exact
// bytes of representative lines are locked here, so that any change to a
// name, the order or when a field is written shows as a failing test.
func TestDecisionLineGolden(t *testing.T) {
	tests := []struct {
		name string
		line Line
		want string
	}{
		{
			name: "an error before deciding leaves out the decision fields",
			line: Line{User: "alice", FieldManager: "kubectl", Verb: "patch", Group: "apps", Version: "v1", Resource: "deployments",
				Namespace: "ns", Name: "web", Operation: "UPDATE", Decision: DecisionError, Category: "ignored", Outcome: "error",
				Latency: 1500 * time.Millisecond, Error: "reading the parent: timeout"},
			want: `{"level":"info","ts":1700000000,"msg":"kausality decision","user":"alice","fieldManager":"kubectl","verb":"patch","group":"apps","version":"v1","resource":"deployments","subresource":"","namespace":"ns","name":"web","decision":"Error","shadow":false,"controller":"","outcome":"error","latency":1.5,"error":"reading the parent: timeout"}` + "\n",
		},
		{
			name: "decided without a parent writes every decision field, even false or empty",
			line: Line{User: "bob", Verb: "create", Version: "v1", Resource: "configmaps", Namespace: "ns", Name: "cm",
				Decided: true, Decision: "Allow", Category: "NewOrigin", Outcome: "allowed"},
			want: `{"level":"info","ts":1700000000,"msg":"kausality decision","user":"bob","fieldManager":"","verb":"create","operation":"","group":"","version":"v1","resource":"configmaps","subresource":"","namespace":"ns","name":"cm","desiredChanged":false,"decision":"Allow","category":"NewOrigin","reason":"","drift":false,"dryRun":false,"confirmed":false,"shadow":false,"wouldDeny":false,"controller":"","snoozed":false,"outcome":"allowed","latency":0}` + "\n",
		},
		{
			name: "a parent writes all its fields, zero generations included; the mode writes its source even when empty",
			line: Line{User: "system:serviceaccount:kube-system:replicaset-controller", FieldManager: "kube-controller-manager", Verb: "update",
				Operation: "UPDATE", Version: "v1", Resource: "pods", Subresource: "status", Namespace: "ns", Name: "web-1",
				Decided: true, DesiredChanged: true, Decision: "Allow", Category: "Expected", Reason: "the parent's generation is not yet observed",
				Shadow: true, Controller: "replicaset", Outcome: "allowed", Latency: 2 * time.Millisecond, Mode: "enforce",
				Parent: "apps/v1 ReplicaSet ns/web", LifecyclePhase: "Initializing", ParentSource: "cache", ControllerMethod: "userAgent",
				HasTrace: true},
			want: `{"level":"info","ts":1700000000,"msg":"kausality decision","user":"system:serviceaccount:kube-system:replicaset-controller","fieldManager":"kube-controller-manager","verb":"update","operation":"UPDATE","group":"","version":"v1","resource":"pods","subresource":"status","namespace":"ns","name":"web-1","desiredChanged":true,"decision":"Allow","category":"Expected","reason":"the parent's generation is not yet observed","drift":false,"dryRun":false,"confirmed":false,"shadow":true,"wouldDeny":false,"controller":"replicaset","snoozed":false,"outcome":"allowed","latency":0.002,"mode":"enforce","modeSource":"","parent":"apps/v1 ReplicaSet ns/web","parentGeneration":0,"parentObservedGeneration":0,"lifecyclePhase":"Initializing","parentSource":"cache","isController":false,"controllerDetermined":false,"controllerMethod":"userAgent","traceHops":0,"traceOrigin":false}` + "\n",
		},
		{
			name: "drift approved, with a policy, allowances, a trace, changed paths and warnings",
			line: Line{User: "system:serviceaccount:kube-system:deployment-controller", FieldManager: "kube-controller-manager", Verb: "update",
				Operation: "UPDATE", Group: "apps", Version: "v1", Resource: "replicasets", Namespace: "ns", Name: "web-7d9",
				Decided: true, DesiredChanged: true, Decision: "Allow", Category: "DriftApproved", Reason: "approved once", Drift: true,
				DryRun: true, Confirmed: true, WouldDeny: false, Controller: "deployment", Snoozed: true, Outcome: "allowed",
				Latency: 250 * time.Microsecond, Mode: "enforce", ModeSource: "namespace",
				Parent: "apps/v1 Deployment ns/web", ParentGeneration: 4, ParentObservedGeneration: 3, LifecyclePhase: "Initialized",
				ParentSource: "live", IsController: true, ControllerDetermined: true, ControllerMethod: "managedFields",
				Approval: "ReplicaSet/web-7d9", ApprovalMode: "once", Policy: "ApprovalPolicy ns/scale rule 0",
				AllowanceMode: "enforce", AllowanceJustified: []string{"spec.replicas <- ns/hpa (alice, HorizontalPodAutoscaler/web spec.maxReplicas)"},
				AllowanceViolations: []string{"spec.template"}, AllowanceGranted: []string{"ns/rollout"}, AllowancePruned: 2,
				AllowanceUnfinished: "ns/slow: 3 of 5 evaluated",
				HasTrace:            true, TraceHops: 3, TraceOrigin: true, ChangedPaths: []string{"spec.replicas", `data["tls.key"]`},
				Warnings: []string{"the approval is used up", `quoted "warning"`}},
			want: `{"level":"info","ts":1700000000,"msg":"kausality decision","user":"system:serviceaccount:kube-system:deployment-controller","fieldManager":"kube-controller-manager","verb":"update","operation":"UPDATE","group":"apps","version":"v1","resource":"replicasets","subresource":"","namespace":"ns","name":"web-7d9","desiredChanged":true,"decision":"Allow","category":"DriftApproved","reason":"approved once","drift":true,"dryRun":true,"confirmed":true,"shadow":false,"wouldDeny":false,"controller":"deployment","snoozed":true,"outcome":"allowed","latency":0.00025,"mode":"enforce","modeSource":"namespace","parent":"apps/v1 Deployment ns/web","parentGeneration":4,"parentObservedGeneration":3,"lifecyclePhase":"Initialized","parentSource":"live","isController":true,"controllerDetermined":true,"controllerMethod":"managedFields","approval":"ReplicaSet/web-7d9","approvalMode":"once","policy":"ApprovalPolicy ns/scale rule 0","allowanceMode":"enforce","allowanceJustified":["spec.replicas <- ns/hpa (alice, HorizontalPodAutoscaler/web spec.maxReplicas)"],"allowanceViolations":["spec.template"],"allowanceGranted":["ns/rollout"],"allowancePruned":2,"allowanceUnfinished":"ns/slow: 3 of 5 evaluated","traceHops":3,"traceOrigin":true,"changedPaths":["spec.replicas","data[\"tls.key\"]"],"warnings":["the approval is used up","quoted \"warning\""]}` + "\n",
		},
		{
			name: "drift rejected by no policy; allowances on with nothing to list; the approval mode is written with the approval only",
			line: Line{User: "carol", Verb: "patch", Operation: "UPDATE", Group: "apps", Version: "v1", Resource: "deployments", Namespace: "ns", Name: "web",
				Decided: true, DesiredChanged: true, Decision: "Deny", Category: "DriftRejected", Reason: "rejected", Drift: true, WouldDeny: true,
				Outcome: "denied", ApprovalMode: "always", Rejection: "Deployment/web", Policy: PolicyNone, AllowanceMode: "log",
				TraceHops: 5, TraceOrigin: true},
			want: `{"level":"info","ts":1700000000,"msg":"kausality decision","user":"carol","fieldManager":"","verb":"patch","operation":"UPDATE","group":"apps","version":"v1","resource":"deployments","subresource":"","namespace":"ns","name":"web","desiredChanged":true,"decision":"Deny","category":"DriftRejected","reason":"rejected","drift":true,"dryRun":false,"confirmed":false,"shadow":false,"wouldDeny":true,"controller":"","snoozed":false,"outcome":"denied","latency":0,"rejection":"Deployment/web","policy":"none","allowanceMode":"log"}` + "\n",
		},
		{
			name: "fields gated on the parent, the mode and allowances stay out without them",
			line: Line{User: "dave", Verb: "delete", Version: "v1", Resource: "secrets", Namespace: "ns", Name: "s",
				Decided: true, Decision: "Allow", Outcome: "allowed", ModeSource: "default", ParentGeneration: 9, IsController: true,
				ParentSource: "live", AllowanceJustified: []string{"x"}, AllowancePruned: 1, AllowanceUnfinished: "u", ChangedPaths: []string{}, Warnings: nil},
			want: `{"level":"info","ts":1700000000,"msg":"kausality decision","user":"dave","fieldManager":"","verb":"delete","operation":"","group":"","version":"v1","resource":"secrets","subresource":"","namespace":"ns","name":"s","desiredChanged":false,"decision":"Allow","category":"","reason":"","drift":false,"dryRun":false,"confirmed":false,"shadow":false,"wouldDeny":false,"controller":"","snoozed":false,"outcome":"allowed","latency":0}` + "\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := encodeLine(t, &tt.line); got != tt.want {
				t.Fatalf("decision line changed\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}
