package history

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The deployment controller counts every old ReplicaSet it controls in its
// history, one without a revision annotation (adopted from elsewhere) as
// revision 0, the oldest: its cleanup of that one is history pruning too.
func TestAnUnnumberedReplicaSetCountsInHistory(t *testing.T) {
	limit := int64(1)
	d := deploymentAt(2, &limit)
	adopted := replicaSetAt("web-x", 0, 0, 0)
	adopted.SetAnnotations(nil)
	adopted.SetCreationTimestamp(metav1.NewTime(time.Unix(150, 0))) // newer than web-a, still revision 0
	a := replicaSetAt("web-a", 1, 0, 0)
	b := replicaSetAt("web-b", 2, 3, 3) // current
	owned := revisions(adopted, a, b)
	if len(owned) != 3 {
		t.Fatalf("the unnumbered ReplicaSet is not a revision: %v", owned)
	}
	// Old: web-x (0) and web-a (1); limit 1: web-x goes.
	if ok, _ := Pruning(d, adopted, owned); !ok {
		t.Errorf("the controller's cleanup of web-x (no revision annotation, revision 0) is not history pruning")
	}
	if ok, _ := Pruning(d, a, owned); ok {
		t.Errorf("web-a is kept by the controller (web-x is older by revision), yet its delete counts as pruning")
	}
}
