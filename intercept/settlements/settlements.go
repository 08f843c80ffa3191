// Package settlements keeps in the cluster what the replicas learn of
// their parents' settledness (settle.Record), so that every replica, and
// one restarted a moment ago, decides a write under a parent the same way.
//
// The records of a namespace's parents are ConfigMaps in the proxy's
// namespace, a key per parent UID: a write happens only when a parent
// settles at a new spec or its spec moves after settling, and a namespace's
// writes batch into one update of each ConfigMap they touch. Every update
// carries the resourceVersion it was computed from and merges with what
// another replica stored (settle.Merge), so two replicas that learn the
// same thing converge instead of fighting. A ConfigMap holds at most
// DefaultMaxPerConfigMap records; a namespace's records fill its first
// ConfigMap, then spill into further ones, up to MaxShards, so that
// namespaces of a few parents keep one ConfigMap and one of many thousands
// keeps every record. Only when MaxShards ConfigMaps are full does a
// record give way: the last ConfigMap's that changed longest ago. A
// deleted parent's record is dropped from every ConfigMap of its
// namespace.
//
// The records are read before the proxy reports ready, and each replica
// watches them: a parent a replica has not seen yet, or no longer holds,
// is read from them before its first decision.
package settlements

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// DefaultMaxPerConfigMap bounds the records of one ConfigMap: a
	// record is under 120 bytes, so a ConfigMap stays far below the 1 MiB
	// kube-apiserver accepts.
	DefaultMaxPerConfigMap = 5000
	// MaxShards bounds the ConfigMaps of one namespace's parents, and so
	// its records (80,000 by default: 8,000 Deployments, each with the
	// default history of ten ReplicaSets, which are parents of their
	// pods).
	MaxShards = 16
	// byParentsNamespace indexes the ConfigMaps by the namespace of the
	// parents they hold the records of.
	byParentsNamespace = "parentsNamespace"
	// conflictRetries bounds the re-reads of one batch whose
	// resourceVersion another replica moved; then it is queued again.
	conflictRetries = 5
	// sweepEvery is how often the records of deleted namespaces are
	// looked for.
	sweepEvery = 10 * time.Minute
)

// Name is the first ConfigMap that holds the records of the parents in
// namespace ("" for cluster-scoped parents).
func Name(namespace string) string {
	if namespace == "" {
		return clusterScoped
	}
	return clusterScoped + "." + namespace
}

// ShardName is the ConfigMap of the parents in namespace numbered shard;
// the first is Name. A namespace's name holds no dot, so ".<n>" after it,
// or "-<n>" after the cluster-scoped parents' name, which holds no dot
// either, names no other namespace's.
func ShardName(namespace string, shard int) string {
	switch {
	case shard == 0:
		return Name(namespace)
	case namespace == "":
		return clusterScoped + "-" + strconv.Itoa(shard)
	}
	return Name(namespace) + "." + strconv.Itoa(shard)
}

// NamespaceOf is the namespace of the parents whose records the ConfigMap
// name holds, ok false when name is none of ShardName's.
func NamespaceOf(name string) (namespace string, ok bool) {
	if name == clusterScoped {
		return "", true
	}
	if n, isShard := strings.CutPrefix(name, clusterScoped+"-"); isShard {
		return "", isShardNumber(n)
	}
	rest, ok := strings.CutPrefix(name, clusterScoped+".")
	if !ok || rest == "" {
		return "", false
	}
	namespace, n, sharded := strings.Cut(rest, ".")
	if sharded && !isShardNumber(n) {
		return "", false
	}
	return namespace, true
}

func isShardNumber(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < MaxShards && strconv.Itoa(n) == s
}

// LabelSelector selects the ConfigMaps of the records.
const LabelSelector = managedByLabel + "=" + managedBy + "," + componentLabel + "=" + component

// Store reads and writes the records. It implements settle.Durable.
type Store struct {
	configMaps      corev1client.ConfigMapInterface
	namespaces      corev1client.NamespaceInterface
	namespace       string
	maxPerConfigMap int
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
	selector := LabelSelector
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector }))
	records := factory.Core().V1().ConfigMaps().Informer()
	_ = records.AddIndexers(cache.Indexers{byParentsNamespace: func(obj interface{}) ([]string, error) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return nil, nil
		}
		if ns, ok := NamespaceOf(cm.Name); ok {
			return []string{ns}, nil
		}
		return nil, nil
	}})
	return &Store{
		configMaps: client.CoreV1().ConfigMaps(namespace), namespaces: client.CoreV1().Namespaces(), namespace: namespace,
		maxPerConfigMap: DefaultMaxPerConfigMap, now: time.Now, log: log,
		factory: factory, records: records,
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

// Lookup returns the stored record of the parent uid in namespace. Two
// replicas that placed one parent's record at once may have put it into
// two ConfigMaps: the records found are merged.
func (s *Store) Lookup(namespace string, uid types.UID) (settle.Record, bool) {
	var out settle.Record
	found := false
	for _, cm := range s.shards(namespace) {
		if cm == nil {
			continue
		}
		data, ok := cm.Data[string(uid)]
		if !ok {
			continue
		}
		r, err := settle.DecodeRecord(data)
		if err != nil {
			continue
		}
		if found {
			out = settle.Merge(out, r)
		} else {
			out, found = r, true
		}
	}
	return out, found
}

// shards are the ConfigMaps of namespace's parents the informer holds, by
// shard number (nil where there is none).
func (s *Store) shards(namespace string) []*corev1.ConfigMap {
	out := make([]*corev1.ConfigMap, MaxShards)
	objs, _ := s.records.GetIndexer().ByIndex(byParentsNamespace, namespace)
	for _, obj := range objs {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		for i := range MaxShards {
			if cm.Name == ShardName(namespace, i) {
				out[i] = cm
			}
		}
	}
	return out
}

// place shares batch out among namespace's ConfigMaps, by name, as the
// informer shows them: a write goes where the record is; a removal goes
// to every ConfigMap a namespace may have, since the informer may not show
// yet one this replica has just spilled the record into (a ConfigMap that
// does not exist costs a read that finds nothing). fresh are the records
// to write that no ConfigMap shows yet.
func (s *Store) place(namespace string, batch map[types.UID]bool) (placed map[string]map[types.UID]bool, fresh []types.UID) {
	shards := s.shards(namespace)
	placed = map[string]map[types.UID]bool{}
	put := func(shard int, uid types.UID, write bool) {
		name := ShardName(namespace, shard)
		if placed[name] == nil {
			placed[name] = map[types.UID]bool{}
		}
		placed[name][uid] = write
	}
	uids := make([]types.UID, 0, len(batch))
	for uid := range batch {
		uids = append(uids, uid)
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	for _, uid := range uids {
		if !batch[uid] {
			for shard := range MaxShards {
				put(shard, uid, false)
			}
			continue
		}
		held := false
		for i, cm := range shards {
			if cm == nil {
				continue
			}
			if _, ok := cm.Data[string(uid)]; ok {
				put(i, uid, true)
				held = true
				break
			}
		}
		if !held {
			fresh = append(fresh, uid)
		}
	}
	return placed, fresh
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
			zap.String("namespace", s.namespace), zap.String("parentsNamespace", namespace), zap.Error(err))
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

// write merges batch into the stored ConfigMaps of namespace's parents:
// the records they hold where they are (place), the new ones into the
// first ConfigMap with room as it is stored, spilling into the next.
func (s *Store) write(ctx context.Context, namespace string, batch map[types.UID]bool) error {
	placed, fresh := s.place(namespace, batch)
	var errs []error
	names := make([]string, 0, len(placed))
	for name := range placed {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		part := placed[name]
		var moved []types.UID
		err := s.writeConfigMap(ctx, name, func(stored map[string]string) map[types.UID]bool {
			// A record the informer showed here may have left it
			// meanwhile: written here, it would take room that is not
			// there. It is placed anew instead.
			moved = moved[:0]
			out := make(map[types.UID]bool, len(part))
			for uid, write := range part {
				if _, ok := stored[string(uid)]; write && !ok {
					moved = append(moved, uid)
					continue
				}
				out[uid] = write
			}
			return out
		})
		if err != nil {
			errs = append(errs, err)
		}
		fresh = append(fresh, moved...)
	}
	shards := s.shards(namespace)
	for shard := 0; len(fresh) > 0 && shard < MaxShards; shard++ {
		last := shard == MaxShards-1
		if cm := shards[shard]; cm != nil && !last && len(cm.Data) >= s.maxPerConfigMap {
			// Full as the informer shows it: not read again for records
			// that would find no room in it.
			continue
		}
		var rest []types.UID
		err := s.writeConfigMap(ctx, ShardName(namespace, shard), func(stored map[string]string) map[types.UID]bool {
			// Decided again on each read: another replica may have
			// filled the ConfigMap meanwhile. The last takes every
			// record, its own oldest changes giving way (Bound).
			room := s.maxPerConfigMap - len(stored)
			if last {
				room = len(fresh)
			}
			part := map[types.UID]bool{}
			rest = rest[:0]
			for _, uid := range fresh {
				if _, ok := stored[string(uid)]; ok || room > 0 {
					if !ok {
						room--
					}
					part[uid] = true
					continue
				}
				rest = append(rest, uid)
			}
			return part
		})
		if err != nil {
			errs = append(errs, err)
			break
		}
		fresh = rest
	}
	return errors.Join(errs...)
}

// writeConfigMap merges the batch batchOf gives for what is stored into the
// stored ConfigMap name, with the
// resourceVersion it read as the precondition, re-reading on a conflict. A
// ConfigMap left without records is deleted, under the same precondition:
// namespaces come and go (one per pull request), and every replica reads
// every ConfigMap before it is ready.
func (s *Store) writeConfigMap(ctx context.Context, name string, batchOf func(stored map[string]string) map[types.UID]bool) error {
	var err error
	for range conflictRetries {
		var stored *corev1.ConfigMap
		stored, err = s.configMaps.Get(ctx, name, metav1.GetOptions{})
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
		next, changed := s.apply(data, batchOf(data))
		if !changed {
			return nil
		}
		if stored == nil {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace,
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
	Bound(next, s.maxPerConfigMap)
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
		namespace, ok := NamespaceOf(cm.Name)
		if !ok || namespace == "" {
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
