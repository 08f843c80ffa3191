package settlements

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

// frozenWatch makes the informer list once and then hear of nothing: a
// replica whose view lags behind the cluster.
func frozenWatch(client *fake.Clientset) {
	client.PrependWatchReactor("configmaps", func(clienttesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
}

// storedData is what the ConfigMap of shard holds, nil when there is none.
func storedData(t *testing.T, client *fake.Clientset, namespace string, shard int) map[string]string {
	t.Helper()
	obj, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), proxyNamespace, ShardName(namespace, shard))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*corev1.ConfigMap).Data
}

// A replica whose informer has not shown it the ConfigMap it spilled a
// record into still removes the record from there when the parent goes.
func TestAGoneParentsRecordLeavesTheConfigMapTheInformerDoesNotShowYet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	testutil.ConfigMapResourceVersions(client)
	frozenWatch(client)
	m, s := replica(t, ctx, client)
	s.maxPerConfigMap = 2
	for i := range 3 {
		m.Assess(deployment("apps", "web"+strconv.Itoa(i), "v1", 1, true))
	}
	testutil.Eventually(t, 10*time.Second, "three records, one spilled", func() error {
		if n, spilled := len(storedData(t, client, "apps", 0)), len(storedData(t, client, "apps", 1)); n != 2 || spilled != 1 {
			return fmt.Errorf("%d and %d records", n, spilled)
		}
		return nil
	})
	var spilled string
	for uid := range storedData(t, client, "apps", 1) {
		spilled = uid
	}
	m.Forget(types.UID(spilled))
	testutil.Eventually(t, 10*time.Second, "the gone parent's record leaves the ConfigMap it spilled into", func() error {
		if data := storedData(t, client, "apps", 1); data[spilled] != "" {
			return fmt.Errorf("still there: %v", data)
		}
		return nil
	})
}

// A record the informer shows in a full ConfigMap it has left meanwhile
// is placed anew: it does not push out a record there while another
// ConfigMap has room.
func TestARecordThatLeftAFullConfigMapIsPlacedAnew(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	record := func(changed int64) string {
		return settle.Record{Settled: "h", SettledAt: 1, Current: "h", Since: 1, Changed: changed}.Encode()
	}
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: Name("apps"), Namespace: proxyNamespace, ResourceVersion: "1",
		Labels: map[string]string{managedByLabel: managedBy, componentLabel: component}},
		Data: map[string]string{"uid-web0": record(10), "uid-old": record(5)}})
	testutil.ConfigMapResourceVersions(client)
	frozenWatch(client)
	m, s := replica(t, ctx, client)
	s.maxPerConfigMap = 2
	// Another replica removed web0 and gave its room to z; this one has
	// not heard of it.
	cm, err := client.CoreV1().ConfigMaps(proxyNamespace).Get(ctx, Name("apps"), metav1.GetOptions{})
	mustNot(t, err)
	cm.Data = map[string]string{"uid-old": record(5), "uid-z": record(20)}
	_, err = client.CoreV1().ConfigMaps(proxyNamespace).Update(ctx, cm, metav1.UpdateOptions{})
	mustNot(t, err)
	m.Assess(deployment("apps", "web0", "v2", 2, true))
	testutil.Eventually(t, 10*time.Second, "web0 recorded in the next ConfigMap", func() error {
		if storedData(t, client, "apps", 1)["uid-web0"] == "" {
			return fmt.Errorf("ConfigMaps hold %v and %v", storedData(t, client, "apps", 0), storedData(t, client, "apps", 1))
		}
		return nil
	})
	if data := storedData(t, client, "apps", 0); data["uid-old"] == "" || data["uid-z"] == "" {
		t.Fatalf("the first ConfigMap holds %v: a record gave way while the next had room", data)
	}
}
