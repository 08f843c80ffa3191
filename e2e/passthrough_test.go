package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Writes answered at once on one HTTP/2 connection each get their own
// answer, whole: the proxy reads every write's answer into a buffer it
// reuses, and writes it out without a flush per copy. Checked for writes
// passed through (a namespace excluded from interception) and intercepted
// ones, with answers from a few bytes to larger than the buffers kept.
func TestConcurrentWriteAnswersArriveWholeAndApart(t *testing.T) {
	ctx := context.Background()
	passed := newNamespace(t, "pass")
	intercepted := newNamespace(t, "intercepted")
	setConfig(t, fmt.Sprintf("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nexcludedNamespaces: [kube-system, %s]\n", passed))
	admin, err := cluster.UserThroughProxy("answers-admin", "system:masters")
	mustf(t, err, "admin")
	c := clientFor(t, admin)
	direct := clientFor(t, cluster.Direct())
	sizes := []int{1, 100, 4 << 10, 64 << 10, 300 << 10, 900 << 10}
	for _, ns := range []string{passed, intercepted} {
		for i := range sizes {
			_, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("answer-%d", i)}}, metav1.CreateOptions{})
			mustf(t, err, "creating answer-%d in %s", i, ns)
		}
	}
	for _, ns := range []string{passed, intercepted} {
		t.Run(ns, func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan error, 4*len(sizes))
			for round := range 4 {
				for i, size := range sizes {
					wg.Go(func() {
						name := fmt.Sprintf("answer-%d", i)
						value := strings.Repeat(string(rune('a'+round)), size)
						patch := fmt.Sprintf(`{"data":{"v":%q}}`, value)
						got, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
						switch {
						case err != nil:
							errs <- fmt.Errorf("%s: %w", name, err)
						case got.Name != name || got.Namespace != ns:
							errs <- fmt.Errorf("the patch of %s/%s was answered with %s/%s", ns, name, got.Namespace, got.Name)
						case got.Data["v"] != value:
							errs <- fmt.Errorf("the patch of %s/%s was answered with a value of %d bytes, want the %d it set", ns, name, len(got.Data["v"]), size)
						}
					})
				}
				wg.Wait()
			}
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}
