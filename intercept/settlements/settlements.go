// Package settlements keeps in the cluster what the replicas learn of
// their parents' settledness (settle.Record), so that every replica, and
// one restarted a moment ago, decides a write under a parent the same way.
//
// The records of a namespace's parents are one ConfigMap in the proxy's
// namespace, a key per parent UID: a write happens only when a parent
// settles at a new spec or its spec moves after settling, and a namespace's
// writes batch into one update. Every update carries the resourceVersion it
// was computed from and merges with what another replica stored
// (settle.Merge), so two replicas that learn the same thing converge
// instead of fighting. A namespace's records are bounded in number (the
// oldest change gives way first), and so in bytes; a deleted parent's
// record is dropped.
//
// The records are read before the proxy reports ready, and each replica
// watches them: a parent a replica has not seen yet, or no longer holds,
// is read from them before its first decision.
package settlements

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

const (
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "kausality-proxy"
	componentLabel = "app.kubernetes.io/component"
	component      = "settledness"
	// clusterScoped names the record of cluster-scoped parents; a
	// namespace's record adds a dot and the namespace, which no namespace
	// name can make equal to it.
	clusterScoped = "kausality-settledness"
	// DefaultMaxPerNamespace bounds the records of one namespace's
	// parents: a record is under 120 bytes, so a ConfigMap stays far below
	// the 1 MiB kube-apiserver accepts.
	DefaultMaxPerNamespace = 5000
	// conflictRetries bounds the re-reads of one batch whose
	// resourceVersion another replica moved; then it is queued again.
	conflictRetries = 5
	// sweepEvery is how often the records of deleted namespaces are
	// looked for.
	sweepEvery = 10 * time.Minute
)

// Name is the ConfigMap that holds the records of the parents in
// namespace ("" for cluster-scoped parents).
func Name(namespace string) string {
	if namespace == "" {
		return clusterScoped
	}
	return clusterScoped + "." + namespace
}

// Store reads and writes the records. It implements settle.Durable.
type Store struct {
	configMaps      corev1client.ConfigMapInterface
	namespaces      corev1client.NamespaceInterface
	namespace       string
	maxPerNamespace int
	now             func() time.Time
	log             *zap.Logger

	factory informers.SharedInformerFactory
	records cache.SharedIndexInformer
	queue   workqueue.TypedRateLimitingInterface[string]

	memory *settle.Memory

	mu sync.Mutex
	// pending holds, per parents' namespace, the parents whose record is
	// to be written (true) or dropped (false).
	pending map[string]map[types.UID]bool
}

// New returns a Store of the records in namespace, the proxy's own.
func New(client kubernetes.Interface, namespace string, log *zap.Logger) *Store {
	if log == nil {
		log = zap.NewNop()
	}
	selector := labels.SelectorFromSet(labels.Set{managedByLabel: managedBy, componentLabel: component}).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector }))
	return &Store{
		configMaps: client.CoreV1().ConfigMaps(namespace), namespaces: client.CoreV1().Namespaces(), namespace: namespace,
		maxPerNamespace: DefaultMaxPerNamespace, now: time.Now, log: log,
		factory: factory, records: factory.Core().V1().ConfigMaps().Informer(),
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "settledness"}),
		pending: map[string]map[types.UID]bool{},
	}
}

// Attach makes m keep what it learns here and read back what it does not
// know. Call it once, before Run.
func (s *Store) Attach(m *settle.Memory) {
	s.memory = m
	m.SetDurable(s)
	_, _ = s.records.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.adopt,
		UpdateFunc: func(_, obj interface{}) { s.adopt(obj) },
	})
}

// adopt merges what another replica wrote into the parents m holds.
func (s *Store) adopt(obj interface{}) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || s.memory == nil {
		return
	}
	for uid, data := range cm.Data {
		if r, err := settle.DecodeRecord(data); err == nil {
			s.memory.Merge(types.UID(uid), r)
		}
	}
}

// Run watches the records and writes what the memory learns until ctx is
// done; every sweepEvery, it deletes the records of deleted namespaces.
func (s *Store) Run(ctx context.Context) {
	s.factory.Start(ctx.Done())
	go func() {
		// Not at the start: a replica that starts is busy enough, and a
		// namespace's records are worth keeping a while anyway.
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait.Jitter(sweepEvery, 0.2)):
		}
		wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
			if s.records.HasSynced() {
				s.Sweep(ctx)
			}
		}, sweepEvery, 0.2, false)
	}()
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	go func() {
		for s.next(ctx) {
		}
	}()
}

// HasSynced reports whether the records have been read: until then a
// replica would decide as one that knows nothing.
func (s *Store) HasSynced() bool { return s.records.HasSynced() }

// Lookup returns the stored record of the parent uid in namespace.
func (s *Store) Lookup(namespace string, uid types.UID) (settle.Record, bool) {
	obj, ok, err := s.records.GetStore().GetByKey(s.namespace + "/" + Name(namespace))
	if err != nil || !ok {
		return settle.Record{}, false
	}
	cm, _ := obj.(*corev1.ConfigMap)
	if cm == nil {
		return settle.Record{}, false
	}
	data, ok := cm.Data[string(uid)]
	if !ok {
		return settle.Record{}, false
	}
	r, err := settle.DecodeRecord(data)
	if err != nil {
		return settle.Record{}, false
	}
	return r, true
}

// Changed queues the record of uid for writing.
func (s *Store) Changed(namespace string, uid types.UID) { s.mark(namespace, uid, true) }

// Gone queues the record of uid for removal.
func (s *Store) Gone(namespace string, uid types.UID) { s.mark(namespace, uid, false) }

func (s *Store) mark(namespace string, uid types.UID, write bool) {
	s.mu.Lock()
	p := s.pending[namespace]
	if p == nil {
		p = map[types.UID]bool{}
		s.pending[namespace] = p
	}
	p[uid] = write
	s.mu.Unlock()
	s.queue.Add(namespace)
}

// next writes one namespace's pending records.
func (s *Store) next(ctx context.Context) bool {
	namespace, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(namespace)
	s.mu.Lock()
	batch := s.pending[namespace]
	delete(s.pending, namespace)
	s.mu.Unlock()
	if len(batch) == 0 {
		s.queue.Forget(namespace)
		return true
	}
	if err := s.write(ctx, namespace, batch); err != nil {
		s.log.Warn("cannot record what this replica learned of parents' settledness; retrying. Until it is recorded, another replica, or this one restarted, may allow a controller's revert of a person's edit as a spec change being carried out",
			zap.String("namespace", s.namespace), zap.String("configMap", Name(namespace)), zap.Error(err))
		s.mu.Lock()
		p := s.pending[namespace]
		if p == nil {
			p = map[types.UID]bool{}
			s.pending[namespace] = p
		}
		for uid, w := range batch {
			if _, newer := p[uid]; !newer {
				p[uid] = w
			}
		}
		s.mu.Unlock()
		s.queue.AddRateLimited(namespace)
		return true
	}
	s.queue.Forget(namespace)
	return true
}

// write merges batch into the stored ConfigMap of namespace's parents,
// with the resourceVersion it read as the precondition, re-reading on a
// conflict. A ConfigMap left without records is deleted, under the same
// precondition: namespaces come and go (one per pull request), and every
// replica reads every ConfigMap before it is ready.
func (s *Store) write(ctx context.Context, namespace string, batch map[types.UID]bool) error {
	var err error
	for range conflictRetries {
		var stored *corev1.ConfigMap
		stored, err = s.configMaps.Get(ctx, Name(namespace), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			stored = nil
		case err != nil:
			return err
		}
		var data map[string]string
		if stored != nil {
			data = stored.Data
		}
		next, changed := s.apply(data, batch)
		if !changed {
			return nil
		}
		if stored == nil {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: Name(namespace), Namespace: s.namespace,
				Labels: map[string]string{managedByLabel: managedBy, componentLabel: component}}, Data: next}
			_, err = s.configMaps.Create(ctx, cm, metav1.CreateOptions{FieldManager: managedBy})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return err
		}
		if len(next) == 0 {
			err = s.configMaps.Delete(ctx, stored.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
				UID: &stored.UID, ResourceVersion: &stored.ResourceVersion}})
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case apierrors.IsConflict(err):
				continue
			}
			return err
		}
		cm := stored.DeepCopy()
		cm.Data = next
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels[managedByLabel], cm.Labels[componentLabel] = managedBy, component
		_, err = s.configMaps.Update(ctx, cm, metav1.UpdateOptions{FieldManager: managedBy})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Changed or deleted (emptied) by another replica since it
			// was read.
			continue
		}
		return err
	}
	return err
}

// apply returns data with batch merged in, and whether that changed it.
func (s *Store) apply(data map[string]string, batch map[types.UID]bool) (map[string]string, bool) {
	next := make(map[string]string, len(data)+len(batch))
	for k, v := range data {
		next[k] = v
	}
	now := s.now().Unix()
	for uid, write := range batch {
		key := string(uid)
		if !write {
			delete(next, key)
			continue
		}
		_, mine, ok := s.memory.Record(uid)
		if !ok {
			continue
		}
		merged := mine
		if old, err := settle.DecodeRecord(next[key]); err == nil {
			merged = settle.Merge(old, mine)
			if merged == old {
				continue
			}
		}
		merged.Changed = now
		next[key] = merged.Encode()
	}
	Bound(next, s.maxPerNamespace)
	if len(next) != len(data) {
		return next, true
	}
	for k, v := range next {
		if data[k] != v {
			return next, true
		}
	}
	return next, false
}

// Sweep deletes the ConfigMaps of namespaces that no longer exist. A
// replica removes a record when it sees its parent deleted; it does not
// see what was deleted while no replica ran, nor the deletion of a parent
// of a kind it has no cache of since it started. Each ConfigMap is deleted
// under the resourceVersion and UID it was read at: a namespace created
// again meanwhile, whose parents another replica has recorded, keeps its
// records.
func (s *Store) Sweep(ctx context.Context) {
	for _, obj := range s.records.GetStore().List() {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		namespace, ok := strings.CutPrefix(cm.Name, clusterScoped+".")
		if !ok {
			continue
		}
		_, err := s.namespaces.Get(ctx, namespace, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			continue
		}
		err = s.configMaps.Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
			UID: &cm.UID, ResourceVersion: &cm.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			s.log.Warn("cannot delete the settledness records of a deleted namespace; trying again later",
				zap.String("namespace", s.namespace), zap.String("configMap", cm.Name), zap.Error(err))
		}
	}
}

// Bound drops from data the records that changed longest ago, and those
// that cannot be read, until at most limit remain.
func Bound(data map[string]string, limit int) {
	if len(data) <= limit {
		return
	}
	type aged struct {
		key     string
		changed int64
	}
	all := make([]aged, 0, len(data))
	for k, v := range data {
		r, err := settle.DecodeRecord(v)
		if err != nil {
			delete(data, k)
			continue
		}
		all = append(all, aged{k, r.Changed})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].changed != all[j].changed {
			return all[i].changed < all[j].changed
		}
		return all[i].key < all[j].key
	})
	for i := 0; len(data) > limit && i < len(all); i++ {
		delete(data, all[i].key)
	}
}
