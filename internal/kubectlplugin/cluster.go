package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
)

// cluster is the plugin's view of the API: whatever the kubeconfig points
// at, kube-apiserver or the proxy.
type cluster struct {
	config    clientcmd.ClientConfig
	namespace string
	dyn       dynamic.Interface
	kube      kubernetes.Interface
	mapper    meta.RESTMapper
}

func newCluster(cc clientcmd.ClientConfig) (*cluster, error) {
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, err
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, err
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
	return &cluster{config: cc, namespace: ns, dyn: dyn, kube: kube, mapper: mapper}, nil
}

// target is a resolved object.
type target struct {
	mapping *meta.RESTMapping
	ns      string
	name    string
}

func (t target) resource(c *cluster) dynamic.ResourceInterface {
	if t.mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(t.mapping.Resource).Namespace(t.ns)
	}
	return c.dyn.Resource(t.mapping.Resource)
}

func (t target) String() string {
	s := t.mapping.GroupVersionKind.Kind + " "
	if t.ns != "" && t.mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		s += t.ns + "/"
	}
	return s + t.name
}

// resolve turns KIND/NAME (replicaset/web, rs/web, deployments.apps/web,
// Deployment/web) into a mapping, as kubectl does.
func (c *cluster) resolve(arg string) (target, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
		return target{}, fmt.Errorf("want KIND/NAME (for example replicaset/web-6d4), not %q", arg)
	}
	res := strings.ToLower(kind)
	var gvr schema.GroupVersionResource
	var err error
	if full, gr := schema.ParseResourceArg(res); full != nil {
		gvr, err = c.mapper.ResourceFor(*full)
		if err != nil {
			gvr, err = c.mapper.ResourceFor(gr.WithVersion(""))
		}
	} else {
		gvr, err = c.mapper.ResourceFor(gr.WithVersion(""))
	}
	if err != nil {
		return target{}, fmt.Errorf("resource type %q: %w", kind, err)
	}
	gvk, err := c.mapper.KindFor(gvr)
	if err != nil {
		return target{}, err
	}
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return target{}, err
	}
	return target{mapping: m, ns: c.namespace, name: name}, nil
}

func (c *cluster) get(ctx context.Context, t target) (*unstructured.Unstructured, error) {
	return t.resource(c).Get(ctx, t.name, metav1.GetOptions{})
}

// parentOf resolves the controller owner of child; ok is false when it has
// none, or when it names child itself, which the proxy decides as an
// object without parent.
func (c *cluster) parentOf(child *unstructured.Unstructured) (target, bool, error) {
	for _, o := range child.GetOwnerReferences() {
		if o.Controller == nil || !*o.Controller {
			continue
		}
		if uid := child.GetUID(); uid != "" && o.UID == uid {
			return target{}, false, nil
		}
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err != nil {
			return target{}, true, err
		}
		m, err := c.mapper.RESTMapping(gv.WithKind(o.Kind).GroupKind(), gv.Version)
		if err != nil {
			return target{}, true, err
		}
		return target{mapping: m, ns: child.GetNamespace(), name: o.Name}, true, nil
	}
	return target{}, false, nil
}

// namespaceMode reads kausality.io/mode of ns; ok is false when the
// namespace cannot be read (a user without access to namespaces).
func (c *cluster) namespaceMode(ctx context.Context, ns, key string) (string, bool) {
	if ns == "" {
		return "", true
	}
	obj, err := c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	return obj.Annotations[key], true
}

// whoami is the caller's user name as the API server authenticated it,
// else the kubeconfig's user entry.
func (c *cluster) whoami(ctx context.Context) string {
	r, err := c.kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err == nil && r.Status.UserInfo.Username != "" {
		return r.Status.UserInfo.Username
	}
	raw, err := c.config.RawConfig()
	if err != nil {
		return ""
	}
	if ctxName := raw.CurrentContext; ctxName != "" {
		if kc, ok := raw.Contexts[ctxName]; ok {
			return kc.AuthInfo
		}
	}
	return ""
}

// update applies the edit that compute derives from the object as read,
// with a resourceVersion precondition, and recomputes it from a fresh read
// after a conflict: a concurrent edit of the same annotation is never lost.
func (c *cluster) update(ctx context.Context, t target, compute func(obj *unstructured.Unstructured) (annotations.Edit, error)) (annotations.Edit, *unstructured.Unstructured, error) {
	var edit annotations.Edit
	var out *unstructured.Unstructured
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := c.get(ctx, t)
		if err != nil {
			return err
		}
		edit, err = compute(obj)
		if err != nil {
			return err
		}
		if edit.Unchanged {
			out = obj
			return nil
		}
		ann := map[string]any{}
		for k, v := range edit.Set {
			ann[k] = v
		}
		for _, k := range edit.Remove {
			ann[k] = nil
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": obj.GetResourceVersion(), "annotations": ann}})
		if err != nil {
			return err
		}
		out, err = t.resource(c).Patch(ctx, t.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-kausality"})
		return err
	})
	if apierrors.IsConflict(err) {
		err = fmt.Errorf("%s kept changing; nothing was written: %w", t, err)
	}
	return edit, out, err
}

// policiesFor reads the approval policies that apply to a controller user,
// as the proxy selects them: the ApprovalPolicy named after its service
// account in its namespace, and the ClusterApprovalPolicies that list it.
// A cluster without the policy kinds has none.
func (c *cluster) policiesFor(ctx context.Context, user string) ([]*unstructured.Unstructured, error) {
	sa, ok := policy.ServiceAccountOf(user)
	if !ok {
		return nil, nil
	}
	var out []*unstructured.Unstructured
	p, err := c.dyn.Resource(v1alpha1.ApprovalPoliciesGVR).Namespace(sa.Namespace).Get(ctx, sa.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		out = append(out, p)
	case !apierrors.IsNotFound(err):
		return out, err
	}
	list, err := c.dyn.Resource(v1alpha1.ClusterApprovalPoliciesGVR).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return out, nil
	case err != nil:
		return out, err
	}
	for i := range list.Items {
		for _, ref := range policy.Compile(&list.Items[i]).ServiceAccounts {
			if ref == sa {
				out = append(out, &list.Items[i])
				break
			}
		}
	}
	return out, nil
}

const (
	// defaultProxyConfigMap is where the shipped manifests keep the
	// proxy's --config file.
	defaultProxyConfigMap = "kausality-system/kausality-proxy-config"
	proxyConfigKey        = "config.yaml"
)

// proxyUngatedKinds returns the proxy's ungatedChildKinds and where they
// were read: from file when set (an error when it cannot be read: it was
// asked for), else from the ConfigMap named configMap. A ConfigMap that
// cannot be read or parsed gives the defaults, with the reason in the
// source, so that why still explains the rest.
func (c *cluster) proxyUngatedKinds(ctx context.Context, file, configMap string) ([]decision.UngatedKind, string, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, "", fmt.Errorf("--proxy-config: %w", err)
		}
		cfg, err := config.Parse(data)
		if err != nil {
			return nil, "", fmt.Errorf("--proxy-config %s: %w", file, err)
		}
		return cfg.UngatedChildKinds, "the file " + file, nil
	}
	ns, name, ok := strings.Cut(configMap, "/")
	if !ok || ns == "" || name == "" {
		return nil, "", fmt.Errorf("--proxy-config-map must be NAMESPACE/NAME, not %q", configMap)
	}
	defaults := func(why string) ([]decision.UngatedKind, string, error) {
		return config.DefaultUngatedChildKinds, "the defaults: " + why + "; pass --proxy-config or --proxy-config-map", nil
	}
	cm, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return defaults(fmt.Sprintf("the proxy's configuration, ConfigMap %s, cannot be read (%v)", configMap, err))
	}
	data, ok := cm.Data[proxyConfigKey]
	if !ok {
		return defaults(fmt.Sprintf("ConfigMap %s has no key %s", configMap, proxyConfigKey))
	}
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		return defaults(fmt.Sprintf("ConfigMap %s does not parse as the proxy's configuration (%v)", configMap, err))
	}
	return cfg.UngatedChildKinds, "ConfigMap " + configMap, nil
}
