package testutil

import (
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// ConfigMapResourceVersions makes client's ConfigMaps carry resourceVersions
// and honour a delete's resourceVersion precondition, as kube-apiserver
// does; the fake tracker does neither, and the reservation records' claims
// rest on both.
func ConfigMapResourceVersions(client *fake.Clientset) {
	var mu sync.Mutex
	next := 0
	stamp := func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		next++
		a.(interface{ GetObject() runtime.Object }).GetObject().(*corev1.ConfigMap).ResourceVersion = strconv.Itoa(next)
		return false, nil, nil
	}
	client.PrependReactor("create", "configmaps", stamp)
	client.PrependReactor("update", "configmaps", stamp)
	client.PrependReactor("delete", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		del := a.(clienttesting.DeleteAction)
		pre := del.GetDeleteOptions().Preconditions
		if pre == nil || pre.ResourceVersion == nil {
			return false, nil, nil
		}
		obj, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), del.GetNamespace(), del.GetName())
		if err != nil {
			return false, nil, nil
		}
		if rv := obj.(*corev1.ConfigMap).ResourceVersion; rv != *pre.ResourceVersion {
			return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), del.GetName(),
				fmt.Errorf("the resourceVersion in the precondition (%s) does not match the stored one (%s)", *pre.ResourceVersion, rv))
		}
		return false, nil, nil
	})
}
