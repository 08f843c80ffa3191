package kubectlplugin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/intercept/settlements"
)

// A namespace's records may have spilled into further ConfigMaps: the
// plugin finds a parent's record in whichever holds it.
func TestSettlednessRecordsAreReadFromEveryConfigMapOfTheNamespace(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/managed-by": "kausality-proxy", "app.kubernetes.io/component": "settledness"}
	configMap := func(name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kausality-system", Labels: labels}, Data: data}
	}
	first := settle.Record{Settled: "a", SettledAt: 1, Current: "a", Since: 1}
	spilled := settle.Record{Settled: "b", SettledAt: 4, Current: "b", Since: 4}
	kube := fake.NewClientset(
		configMap(settlements.Name("shop"), map[string]string{"uid-first": first.Encode()}),
		configMap(settlements.ShardName("shop", 1), map[string]string{"uid-spilled": spilled.Encode()}),
		configMap(settlements.Name("other"), map[string]string{"uid-elsewhere": first.Encode()}),
		configMap(settlements.ShardName("shop", 2), map[string]string{"uid-twice": first.Encode()}),
		configMap(settlements.ShardName("shop", 10), map[string]string{"uid-twice": spilled.Encode()}),
	)
	lookup := (&cluster{kube: kube}).settlednessRecords(t.Context(), "kausality-system")
	object := func(uid string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetNamespace("shop")
		u.SetUID(types.UID(uid))
		return u
	}
	for _, tc := range []struct {
		uid    string
		want   *settle.Record
		source string
	}{
		{"uid-first", &first, settlements.Name("shop")},
		{"uid-spilled", &spilled, settlements.ShardName("shop", 1)},
		{"uid-elsewhere", nil, settlements.Name("shop")},
		{"uid-twice", ptrToRecord(settle.Merge(first, spilled)), settlements.ShardName("shop", 10) + ", ConfigMap kausality-system/" + settlements.ShardName("shop", 2)},
	} {
		l := lookup(object(tc.uid))
		if l.Error != "" || l.Source != "ConfigMap kausality-system/"+tc.source {
			t.Errorf("%s: source %q, error %q", tc.uid, l.Source, l.Error)
		}
		if (l.Record == nil) != (tc.want == nil) || l.Record != nil && *l.Record != *tc.want {
			t.Errorf("%s: record %+v, want %+v", tc.uid, l.Record, tc.want)
		}
	}
}

func ptrToRecord(r settle.Record) *settle.Record { return &r }
