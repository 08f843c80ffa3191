package policywatch

import (
	"strings"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
)

// Allowances watches AllowancePolicies. Until its cache has synced it has
// no policies: without them nothing is granted, and a controller's write
// under an allowance-checked parent is a violation, the strict side.
type Allowances struct {
	*Watcher[*allowance.Compiled, allowance.Problem]
}

// NewAllowances returns the watcher; Run starts it. fieldManager owns the
// status writes.
func NewAllowances(dyn dynamic.Interface, fieldManager string, log *zap.Logger) *Allowances {
	return &Allowances{New(dyn, Kind[*allowance.Compiled, allowance.Problem]{
		Name:    "allowance policy",
		GVR:     v1alpha1.AllowancePoliciesGVR,
		Compile: allowance.Compile,
		Ready: func(_ *unstructured.Unstructured, c *allowance.Compiled, exceeded []allowance.Problem) metav1.Condition {
			return allowance.StatusCondition(c, exceeded...)
		},
		Less:         func(a, b *allowance.Compiled) int { return strings.Compare(a.Name, b.Name) },
		FieldManager: fieldManager,
	}, log)}
}

// Report records problems evaluations ran into, for the policies' status.
func (a *Allowances) Report(problems []allowance.EvalProblem) {
	for _, pr := range problems {
		a.Watcher.Report(pr.Policy, pr.Generation, pr.Problem)
	}
}
