package settle

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestMerge(t *testing.T) {
	settledV1 := Record{Settled: "v1", SettledAt: 3, Current: "v1", Since: 2, Changed: 10}
	tests := []struct {
		name string
		a, b Record
		want Record
	}{
		{"equal records", settledV1, settledV1, settledV1},
		{"a later settlement wins", settledV1,
			Record{Settled: "v2", SettledAt: 5, Current: "v2", Since: 5, Changed: 20},
			Record{Settled: "v2", SettledAt: 5, Current: "v2", Since: 5, Changed: 20}},
		{"a spec move after settling is kept beside the settlement", settledV1,
			Record{Settled: "v1", SettledAt: 3, Current: "v2", Since: 4, Changed: 11},
			Record{Settled: "v1", SettledAt: 3, Current: "v2", Since: 4, Changed: 11}},
		{"the same spec keeps the earliest generation it was seen at", settledV1,
			Record{Settled: "v1", SettledAt: 4, Current: "v1", Since: 4},
			Record{Settled: "v1", SettledAt: 4, Current: "v1", Since: 2, Changed: 10}},
		{"a return to the settled spec after a move another replica did not see stays a move",
			Record{Settled: "v1", SettledAt: 1, Current: "v1", Since: 1},
			Record{Settled: "v1", SettledAt: 1, Current: "v1", Since: 3},
			Record{Settled: "v1", SettledAt: 1, Current: "v1", Since: 3}},
		{"equal generations, unequal hashes: the larger hash, on every replica",
			Record{Settled: "a", SettledAt: 3, Current: "a", Since: 3},
			Record{Settled: "b", SettledAt: 3, Current: "b", Since: 3},
			Record{Settled: "b", SettledAt: 3, Current: "b", Since: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Merge(tt.a, tt.b); got != tt.want {
				t.Fatalf("Merge(a, b) = %+v, want %+v", got, tt.want)
			}
			if got := Merge(tt.b, tt.a); got != tt.want {
				t.Fatalf("Merge(b, a) = %+v, want %+v: replicas would not converge", got, tt.want)
			}
			if got := Merge(tt.want, tt.b); got != tt.want {
				t.Fatalf("merging again changed the record: %+v", got)
			}
		})
	}
}

func TestRecordMoved(t *testing.T) {
	for _, tt := range []struct {
		r    Record
		want bool
	}{
		{Record{Current: "v1", Since: 1}, false},
		{Record{Settled: "v1", SettledAt: 1, Current: "v1", Since: 1}, false},
		{Record{Settled: "v1", SettledAt: 2, Current: "v1", Since: 1}, false},
		{Record{Settled: "v1", SettledAt: 1, Current: "v2", Since: 2}, true},
		{Record{Settled: "v1", SettledAt: 1, Current: "v1", Since: 3}, true},
	} {
		if got := tt.r.Moved(); got != tt.want {
			t.Errorf("%+v.Moved() = %v, want %v", tt.r, got, tt.want)
		}
	}
}

func TestDecodeRecord(t *testing.T) {
	r := Record{Settled: "v1", SettledAt: 3, Current: "v2", Since: 4, Changed: 9}
	got, err := DecodeRecord(r.Encode())
	if err != nil || got != r {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "{", `{"s":"v1"}`, `{"c":"v1","cg":-1}`} {
		if _, err := DecodeRecord(bad); err == nil {
			t.Errorf("DecodeRecord(%q) accepted", bad)
		}
	}
}

// clusterRecords is a Durable as the cluster keeps it, shared by the
// replicas of a test.
type clusterRecords struct {
	records map[types.UID]Record
	memory  []*Memory
}

func (c *clusterRecords) Lookup(_ string, uid types.UID) (Record, bool) {
	r, ok := c.records[uid]
	return r, ok
}

func (c *clusterRecords) Changed(_ string, uid types.UID) {
	for _, m := range c.memory {
		if _, r, ok := m.Record(uid); ok {
			c.records[uid] = Merge(c.records[uid], r)
		}
	}
	for _, m := range c.memory {
		m.Merge(uid, c.records[uid])
	}
}

func (c *clusterRecords) Gone(_ string, uid types.UID) { delete(c.records, uid) }

func (c *clusterRecords) replica() *Memory {
	m := newDeploymentMemory(0, time.Now)
	m.SetDurable(c)
	c.memory = append(c.memory, m)
	return m
}

// A replica restarted after the parent settled is not lenient: a person
// scaled the new ReplicaSet, so the Deployment is not Current, and the
// controller's revert is drift on the restarted replica as on the one that
// saw the settlement. The window an approval names survives too.
func TestRestartedReplicaReadsWhatTheClusterRecords(t *testing.T) {
	cluster := &clusterRecords{records: map[types.UID]Record{}}
	first := cluster.replica()
	first.Assess(deployment("v1", 4, 4, 3, 3))
	if f := first.Assess(deployment("v1", 6, 4, 3, 2)); !f.AtCurrentSpec || f.SpecSince != 4 {
		t.Fatalf("the replica that saw the settlement: %+v", f)
	}

	restarted := cluster.replica()
	if f := restarted.Assess(deployment("v1", 6, 4, 3, 2)); !f.AtCurrentSpec || !f.Known || f.SpecSince != 4 {
		t.Fatalf("a restarted replica: %+v, want settled at the current spec since generation 4", f)
	}
	without := newDeploymentMemory(0, time.Now)
	if f := without.Assess(deployment("v1", 6, 4, 3, 2)); f.AtCurrentSpec {
		t.Fatalf("without the cluster's record the test shows nothing: %+v", f)
	}

	// A spec change one replica sees is carried out on the other as well,
	// and a rollback to the settled spec stays a change until it settles.
	first.Assess(deployment("v2", 7, 7, 3, 1))
	if f := restarted.Assess(deployment("v1", 8, 8, 3, 1)); f.AtCurrentSpec {
		t.Fatalf("a rollback after a move another replica saw: %+v", f)
	}
	restarted.Assess(deployment("v1", 8, 8, 3, 3))
	if f := first.Assess(deployment("v1", 8, 8, 3, 2)); !f.AtCurrentSpec {
		t.Fatalf("a settlement another replica saw: %+v", f)
	}
}

// Only news is written: a settlement at a generation that changed no spec
// writes nothing.
func TestMemoryWritesOnlyNews(t *testing.T) {
	counting := &countingDurable{}
	m := newDeploymentMemory(0, time.Now)
	m.SetDurable(counting)
	m.Assess(deployment("v1", 1, 1, 3, 1)) // not settled: nothing to tell
	m.Assess(deployment("v1", 1, 1, 3, 3)) // settled: 1
	m.Assess(deployment("v1", 1, 1, 3, 3))
	m.Assess(deployment("v1", 2, 2, 3, 3)) // an annotation bump, settled: no news
	m.Assess(deployment("v2", 3, 3, 3, 1)) // a spec move: 2
	m.Assess(deployment("v2", 3, 3, 3, 2))
	m.Assess(deployment("v2", 3, 3, 3, 3)) // settled at v2: 3
	if counting.changed != 3 {
		t.Fatalf("%d writes, want 3", counting.changed)
	}
	m.Forget("u-1")
	if counting.gone != 1 {
		t.Fatalf("a deleted parent's record was not dropped")
	}
}

// A parent of a kind the memory does not learn from (any caller can name
// a Pod as the controller of what it writes) is assessed as it is now,
// and costs neither an entry nor a record.
func TestAParentOfAKindNotLearnedWritesNoRecord(t *testing.T) {
	counting := &countingDurable{}
	m := NewMemory(0, time.Now)
	m.SetDurable(counting)
	if f := m.Assess(deployment("v1", 1, 1, 3, 3)); !f.AtCurrentSpec {
		t.Fatalf("a settled parent of a kind not learned: %+v", f)
	}
	m.Assess(deployment("v2", 2, 2, 3, 1))
	if f := m.Assess(deployment("v2", 2, 2, 3, 1)); f.AtCurrentSpec || f.Known {
		t.Fatalf("a moving parent of a kind not learned: %+v", f)
	}
	if counting.changed != 0 || len(m.m) != 0 {
		t.Fatalf("%d records written, %d entries kept", counting.changed, len(m.m))
	}
	m.AddParentKind(schema.GroupKind{Group: "apps", Kind: "Deployment"})
	m.Assess(deployment("v2", 2, 2, 3, 3))
	if counting.changed != 1 || len(m.m) != 1 {
		t.Fatalf("once learned: %d records written, %d entries kept", counting.changed, len(m.m))
	}
}

type countingDurable struct{ changed, gone int }

func (c *countingDurable) Lookup(string, types.UID) (Record, bool) { return Record{}, false }
func (c *countingDurable) Changed(string, types.UID)               { c.changed++ }
func (c *countingDurable) Gone(string, types.UID)                  { c.gone++ }

// A person rolls a Deployment from v1 to v2 and straight back to v1. The
// replica that saw it records v1 since generation 3 after settling at
// generation 1 (one batched write: the record never said v2). A replica
// that saw only generations 1 and 3, and takes that record, must treat
// the parent as carrying the rollback out, as the first does; and the
// first must not forget it when it takes back the older record it wrote
// before (an informer event, a batched write merged with what is stored).
func TestARollbackAnotherReplicaSawIsNotForgotten(t *testing.T) {
	saw := newDeploymentMemory(0, time.Now)
	saw.Assess(deployment("v1", 1, 1, 3, 3))
	saw.Assess(deployment("v2", 2, 2, 3, 1))
	if f := saw.Assess(deployment("v1", 3, 3, 3, 2)); f.AtCurrentSpec {
		t.Fatalf("the replica that saw the rollback: %+v", f)
	}
	_, moved, _ := saw.Record("u-1")
	if !moved.Moved() || moved.SettledAt != 1 || moved.Since != 3 {
		t.Fatalf("the record of the replica that saw the rollback: %+v", moved)
	}
	older := moved
	older.Since = 1
	saw.Merge("u-1", older)
	if f := saw.Assess(deployment("v1", 3, 3, 3, 2)); f.AtCurrentSpec {
		t.Fatalf("after taking back the older record: %+v: the rollback's writes are drift", f)
	}

	other := newDeploymentMemory(0, time.Now)
	other.Assess(deployment("v1", 1, 1, 3, 3))
	other.Merge("u-1", moved)
	if f := other.Assess(deployment("v1", 3, 3, 3, 2)); f.AtCurrentSpec {
		t.Fatalf("the other replica: %+v: it denies the rollback the first one allows", f)
	}
}

// A record merged from two must not change when either is merged into it
// again: the store merges what it holds with what each replica writes, and
// each replica merges what it knows with what is stored. A replica that
// saw the parent settle at v1 (generations 1, 3, 4) and one that saw it
// settle at v2 at generation 2 and come back to v1 at 4 would otherwise
// keep v1 since 1 and v1 since 4 for good, and the record would flip
// between them with every write: an approval of generation 3 would be
// honoured on one replica and not on the other.
func TestMergeAgainChangesNothing(t *testing.T) {
	var all []Record
	for _, s := range []string{"", "v1", "v2"} {
		for sa := int64(0); sa <= 4; sa++ {
			if s == "" && sa > 0 {
				continue
			}
			for _, c := range []string{"v1", "v2"} {
				for si := int64(1); si <= 4; si++ {
					all = append(all, Record{Settled: s, SettledAt: sa, Current: c, Since: si})
				}
			}
		}
	}
	for _, a := range all {
		for _, b := range all {
			ab := Merge(a, b)
			if again := Merge(ab, a); again != ab {
				t.Fatalf("Merge(%+v, %+v) = %+v, and merging the first again gives %+v", a, b, ab, again)
			}
			if again := Merge(ab, b); again != ab {
				t.Fatalf("Merge(%+v, %+v) = %+v, and merging the second again gives %+v", a, b, ab, again)
			}
		}
	}
}
