package settlements

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

const proxyNamespace = "kausality-system"

// preconditionedUpdates makes the fake refuse an update whose
// resourceVersion is not the stored one, as kube-apiserver does, and
// stamp a new one; conflicts counts the refusals.
func preconditionedUpdates(client *fake.Clientset) *int {
	var mu sync.Mutex
	next, conflicts := 1000, 0
	client.PrependReactor("update", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		cm := a.(clienttesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		stored, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), cm.Namespace, cm.Name)
		if err == nil && stored.(*corev1.ConfigMap).ResourceVersion != cm.ResourceVersion {
			conflicts++
			return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), cm.Name, fmt.Errorf("resourceVersion %s is not the stored one", cm.ResourceVersion))
		}
		next++
		cm.ResourceVersion = strconv.Itoa(next)
		return false, nil, nil
	})
	return &conflicts
}

// deployment is Deployment name (uid) in ns at generation gen running
// image, Current when settled.
func deployment(ns, name, image string, gen int64, settled bool) *unstructured.Unstructured {
	updated := int64(1)
	if settled {
		updated = 3
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]interface{}{"name": name, "namespace": ns, "uid": "uid-" + name, "generation": gen},
		"spec":     map[string]interface{}{"replicas": int64(3), "template": map[string]interface{}{"spec": map[string]interface{}{"image": image}}},
		"status": map[string]interface{}{"observedGeneration": gen, "replicas": int64(3), "updatedReplicas": updated,
			"readyReplicas": updated, "availableReplicas": updated,
			"conditions": []interface{}{map[string]interface{}{"type": "Available", "status": "True"}}},
	}}
}

// replica is one proxy replica's memory and store on the shared client,
// learning from Deployments as the write path makes it once their
// controller's writes are decided.
func replica(t *testing.T, ctx context.Context, client *fake.Clientset) (*settle.Memory, *Store) {
	t.Helper()
	m, s := replicaNotLearning(t, ctx, client)
	m.AddParentKind(schema.GroupKind{Group: "apps", Kind: "Deployment"})
	return m, s
}

// replicaNotLearning is a replica that has decided no write for a
// Deployment's controller yet: it learns from no kind.
func replicaNotLearning(t *testing.T, ctx context.Context, client *fake.Clientset) (*settle.Memory, *Store) {
	t.Helper()
	m := settle.NewMemory(0, time.Now)
	s := New(client, proxyNamespace, nil)
	s.Attach(m)
	s.Run(ctx)
	testutil.Eventually(t, 10*time.Second, "the records are read", func() error {
		if !s.HasSynced() {
			return fmt.Errorf("not synced")
		}
		return nil
	})
	return m, s
}

// Replicas learning different parents of one namespace at once converge on
// one ConfigMap holding all of them, through conflicts; a replica started
// afterwards is not lenient about any of them; a deleted parent's record
// goes.
func TestReplicasConvergeAndARestartedReplicaReadsTheRecords(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	testutil.ConfigMapResourceVersions(client)
	conflicts := preconditionedUpdates(client)
	one, _ := replica(t, ctx, client)
	two, _ := replica(t, ctx, client)

	const parents = 20
	var wg sync.WaitGroup
	for i := range parents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := one
			if i%2 == 1 {
				m = two
			}
			m.Assess(deployment("apps", "web"+strconv.Itoa(i), "v1", 1, true))
		}()
	}
	wg.Wait()
	testutil.Eventually(t, 20*time.Second, "every settlement recorded", func() error {
		cm, err := client.CoreV1().ConfigMaps(proxyNamespace).Get(ctx, Name("apps"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(cm.Data) != parents {
			return fmt.Errorf("%d records, want %d (%d conflicts so far)", len(cm.Data), parents, *conflicts)
		}
		return nil
	})

	t.Logf("%d updates refused for a stale resourceVersion, and retried", *conflicts)
	restarted, _ := replica(t, ctx, client)
	for i := range parents {
		name := "web" + strconv.Itoa(i)
		// A person scaled its ReplicaSet: not Current now.
		if f := restarted.Assess(deployment("apps", name, "v1", 2, false)); !f.AtCurrentSpec || f.SpecSince != 1 {
			t.Fatalf("%s on a restarted replica: %+v, want settled at its spec since generation 1", name, f)
		}
	}
	// A replica that learns from no kind yet assesses on the records too,
	// and writes nothing of its own.
	unlearned, _ := replicaNotLearning(t, ctx, client)
	if f := unlearned.Assess(deployment("apps", "web0", "v1", 2, false)); !f.AtCurrentSpec || f.SpecSince != 1 {
		t.Fatalf("on a replica that learns from no kind: %+v, want settled at its spec since generation 1", f)
	}
	if _, _, ok := unlearned.Record("uid-web0"); ok {
		t.Fatal("a replica kept what it assessed of a parent of a kind it learns nothing from")
	}
	without := settle.NewMemory(0, time.Now)
	if f := without.Assess(deployment("apps", "web0", "v1", 2, false)); f.AtCurrentSpec {
		t.Fatalf("without the records the test shows nothing: %+v", f)
	}

	// A spec change one replica sees reaches the others' entries.
	one.Assess(deployment("apps", "web1", "v2", 3, false))
	testutil.Eventually(t, 10*time.Second, "the spec move reaches replica two", func() error {
		if _, r, ok := two.Record("uid-web1"); !ok || r.Current != settle.SpecHash(deployment("apps", "web1", "v2", 3, false)) {
			return fmt.Errorf("replica two knows %+v", r)
		}
		return nil
	})

	one.Forget("uid-web0")
	testutil.Eventually(t, 10*time.Second, "the deleted parent's record goes", func() error {
		cm, err := client.CoreV1().ConfigMaps(proxyNamespace).Get(ctx, Name("apps"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, ok := cm.Data["uid-web0"]; ok {
			return fmt.Errorf("still recorded")
		}
		return nil
	})
}

func TestBound(t *testing.T) {
	data := map[string]string{
		"old":    settle.Record{Current: "a", Since: 1, Changed: 10}.Encode(),
		"newer":  settle.Record{Current: "a", Since: 1, Changed: 30}.Encode(),
		"middle": settle.Record{Current: "a", Since: 1, Changed: 20}.Encode(),
		"broken": "{",
	}
	Bound(data, 2)
	if len(data) != 2 || data["newer"] == "" || data["middle"] == "" {
		t.Fatalf("kept %v, want the two changed last", data)
	}
	Bound(data, 5)
	if len(data) != 2 {
		t.Fatalf("a bound not reached dropped records: %v", data)
	}
}

func TestName(t *testing.T) {
	if Name("") == Name("cluster-scoped") || Name("") == Name("")+"." {
		t.Fatal("cluster-scoped parents share a record with a namespace")
	}
	if got := Name("apps"); got != "kausality-settledness.apps" {
		t.Fatalf("Name(apps) = %q", got)
	}
	// Every ConfigMap of every namespace (namespaces named like shard
	// numbers included) has a name of its own, and tells its namespace.
	seen := map[string]string{}
	for _, ns := range []string{"", "apps", "1", "apps-1", "apps.1", "s1"} {
		for shard := range MaxShards {
			name := ShardName(ns, shard)
			if strings.Contains(ns, ".") {
				continue // no namespace is named so
			}
			if other, dup := seen[name]; dup {
				t.Fatalf("%s names the ConfigMaps of %q and of %q", name, ns, other)
			}
			seen[name] = ns
			if got, ok := NamespaceOf(name); !ok || got != ns {
				t.Errorf("NamespaceOf(%q) = %q, %v; want %q", name, got, ok, ns)
			}
		}
	}
	for _, name := range []string{"kausality-settledness.", "kausality-settledness.apps.0", "kausality-settledness.apps.16",
		"kausality-settledness.apps.01", "kausality-settledness-0", "kausality-settledness-x", "other", "kausality-settledness.apps.x"} {
		if ns, ok := NamespaceOf(name); ok {
			t.Errorf("NamespaceOf(%q) = %q: not a name of ShardName's", name, ns)
		}
	}
}

// A namespace whose parents outgrow one ConfigMap keeps every record: they
// spill into further ConfigMaps, which a restarted replica reads, and a
// deleted parent's record goes from wherever it is.
func TestAFullConfigMapSpillsIntoTheNext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	testutil.ConfigMapResourceVersions(client)
	one, store := replica(t, ctx, client)
	store.maxPerConfigMap = 5

	const parents = 12
	for i := range parents {
		one.Assess(deployment("apps", "web"+strconv.Itoa(i), "v1", 1, true))
	}
	counts := func() ([]int, error) {
		var out []int
		for shard := range 4 {
			cm, err := client.CoreV1().ConfigMaps(proxyNamespace).Get(ctx, ShardName("apps", shard), metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				out = append(out, 0)
			case err != nil:
				return nil, err
			default:
				out = append(out, len(cm.Data))
			}
		}
		return out, nil
	}
	waitFor := func(what string, want ...int) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, what, func() error {
			got, err := counts()
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("records per ConfigMap %v, want %v", got, want)
			}
			return nil
		})
	}
	waitFor("every settlement recorded, five to a ConfigMap", 5, 5, 2, 0)
	restarted, _ := replica(t, ctx, client)
	for i := range parents {
		name := "web" + strconv.Itoa(i)
		if f := restarted.Assess(deployment("apps", name, "v1", 2, false)); !f.AtCurrentSpec || f.SpecSince != 1 {
			t.Fatalf("%s on a restarted replica: %+v, want settled at its spec since generation 1", name, f)
		}
	}
	cm, err := client.CoreV1().ConfigMaps(proxyNamespace).Get(ctx, ShardName("apps", 1), metav1.GetOptions{})
	mustNot(t, err)
	var spilled string
	for uid := range cm.Data {
		spilled = uid
	}
	one.Forget(types.UID(spilled))
	waitFor("the deleted parent's record goes from the ConfigMap it spilled into", 5, 4, 2, 0)
}

func mustNot(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// preconditionedDeletes makes the fake refuse a delete whose
// preconditions do not hold, as kube-apiserver does; before each delete,
// meanwhile runs (another replica's write). It returns the deletes that
// named no resourceVersion.
func preconditionedDeletes(client *fake.Clientset, meanwhile func()) *int {
	var mu sync.Mutex
	unconditional := 0
	client.PrependReactor("delete", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if meanwhile != nil {
			meanwhile()
			meanwhile = nil
		}
		del := a.(clienttesting.DeleteActionImpl)
		pre := del.GetDeleteOptions().Preconditions
		if pre == nil || pre.ResourceVersion == nil || pre.UID == nil {
			unconditional++
			return false, nil, nil
		}
		stored, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), del.Namespace, del.Name)
		if err != nil {
			return false, nil, nil
		}
		cm := stored.(*corev1.ConfigMap)
		if cm.ResourceVersion != *pre.ResourceVersion || cm.UID != *pre.UID {
			return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), del.Name, fmt.Errorf("the preconditions do not hold"))
		}
		return false, nil, nil
	})
	return &unconditional
}

// Namespaces come and go (one per pull request): once a namespace's last
// parent is gone, its ConfigMap goes too, or the proxy's namespace, which
// every replica reads before it is ready, would grow with every namespace
// it ever saw.
func TestTheRecordsOfANamespaceWithoutParentsGo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	preconditionedUpdates(client)
	unconditional := preconditionedDeletes(client, nil)
	m, _ := replica(t, ctx, client)
	for i := range 20 {
		ns := fmt.Sprintf("pr-%d", i)
		d := deployment(ns, "web", "v1", 1, true)
		m.Assess(d)
		testutil.Eventually(t, 10*time.Second, "recorded", func() error {
			_, err := client.CoreV1().ConfigMaps(proxyNamespace).Get(ctx, Name(ns), metav1.GetOptions{})
			return err
		})
		m.Forget(d.GetUID())
	}
	testutil.Eventually(t, 10*time.Second, "every ConfigMap deleted", func() error {
		cms, err := client.CoreV1().ConfigMaps(proxyNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if n := len(cms.Items); n > 0 {
			return fmt.Errorf("%d ConfigMaps stay", n)
		}
		return nil
	})
	if *unconditional > 0 {
		t.Errorf("%d deletes without a resourceVersion and UID precondition", *unconditional)
	}
}

// A replica that removes the last record it read never deletes a record
// another replica added meanwhile.
func TestEmptyingTheRecordsKeepsOneAddedMeanwhile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	preconditionedUpdates(client)
	other := settle.Record{Settled: "h1", SettledAt: 1, Current: "h1", Since: 1}.Encode()
	preconditionedDeletes(client, func() {
		stored, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), proxyNamespace, Name("team"))
		if err != nil {
			t.Errorf("reading the ConfigMap: %v", err)
			return
		}
		cm := stored.(*corev1.ConfigMap).DeepCopy()
		cm.Data["uid-other"] = other
		cm.ResourceVersion += "0"
		if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, proxyNamespace); err != nil {
			t.Errorf("another replica's write: %v", err)
		}
	})
	m, _ := replica(t, ctx, client)
	d := deployment("team", "web", "v1", 1, true)
	m.Assess(d)
	testutil.Eventually(t, 10*time.Second, "recorded", func() error {
		_, err := client.CoreV1().ConfigMaps(proxyNamespace).Get(ctx, Name("team"), metav1.GetOptions{})
		return err
	})
	m.Forget(d.GetUID())
	testutil.Eventually(t, 10*time.Second, "the forgotten record removed, the other kept", func() error {
		cm, err := client.CoreV1().ConfigMaps(proxyNamespace).Get(ctx, Name("team"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, ok := cm.Data["uid-web"]; ok {
			return fmt.Errorf("uid-web is still recorded")
		}
		if cm.Data["uid-other"] != other {
			return fmt.Errorf("the other replica's record is %q", cm.Data["uid-other"])
		}
		return nil
	})
}

// The records of a namespace deleted while no replica saw its parents go
// are deleted by the sweep; those of a namespace that exists, of
// cluster-scoped parents, and of a namespace recorded again since the
// sweep read them stay.
func TestSweepDeletesTheRecordsOfDeletedNamespaces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	record := settle.Record{Settled: "h1", SettledAt: 1, Current: "h1", Since: 1}.Encode()
	recorded := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: proxyNamespace, UID: types.UID("uid-" + name), ResourceVersion: "5",
			Labels: map[string]string{managedByLabel: managedBy, componentLabel: component}}, Data: map[string]string{"uid-p": record}}
	}
	client := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "alive"}},
		recorded(Name("alive")), recorded(Name("gone")), recorded(Name("")), recorded(Name("recreated")))
	// Another replica records a parent of a namespace created again
	// after the sweep read the records.
	unconditional := preconditionedDeletes(client, func() {
		cm := recorded(Name("recreated"))
		cm.ResourceVersion = "6"
		if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, proxyNamespace); err != nil {
			t.Errorf("another replica's write: %v", err)
		}
	})
	_, s := replica(t, ctx, client)
	s.Sweep(ctx)
	for name, want := range map[string]bool{Name("alive"): true, Name("gone"): false, Name(""): true, Name("recreated"): true} {
		_, err := client.CoreV1().ConfigMaps(proxyNamespace).Get(ctx, name, metav1.GetOptions{})
		if got := err == nil; got != want {
			t.Errorf("%s stays: %v, want %v (%v)", name, got, want, err)
		}
	}
	if *unconditional > 0 {
		t.Errorf("%d deletes without a resourceVersion and UID precondition", *unconditional)
	}
}
