package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/intercept/settlements"
)

func (o *options) allowancesCommand() *cobra.Command {
	var proxyNamespace string
	cmd := &cobra.Command{
		Use:   "allowances KIND/NAME | allowances KIND NAME",
		Short: "List an object's allowances (kausal.io/allowances), their trace, and those its children carry from it",
		Long: `allowances lists what the object's controller may change in its children
because of a change of the object: the child kind and mutation, the
generation the change produced, the initiator, the AllowancePolicy and the
trace (each hop with the field that led on and the attestations captured),
and whether it is consumed. An allowance is consumed once the object has
settled at or after its generation, as the proxy judges it: settled at its
current spec now, else the proxy's settledness record in its namespace
(ConfigMap kausality-settledness.NAMESPACE); when that cannot be read,
consumption is unknown.

It then lists the allowances the object's children carry that came from
it. An annotation that cannot be read is an error line naming the object;
the rest is still listed.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := args[0]
			if len(args) == 2 {
				arg = args[0] + "/" + args[1]
			}
			c, t, err := o.resolve(arg)
			if err != nil {
				return err
			}
			r, err := c.allowances(cmd.Context(), t, proxyNamespace)
			if err != nil {
				return err
			}
			return o.print(r, func(w io.Writer) { RenderAllowances(w, r) })
		},
	}
	cmd.Flags().StringVar(&proxyNamespace, "proxy-namespace", "kausality-system",
		"The proxy's namespace, where it keeps the settledness records (its --drift-namespace).")
	return cmd
}

// allowances reads what `allowances` reports about t.
func (c *cluster) allowances(ctx context.Context, t target, proxyNamespace string) (AllowancesReport, error) {
	obj, err := c.get(ctx, t)
	if err != nil {
		return AllowancesReport{}, err
	}
	f := AllowanceFacts{Object: obj, Settledness: c.settlednessRecords(ctx, proxyNamespace)}
	if ns := obj.GetNamespace(); ns != "" {
		n, err := c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			f.NamespaceUnknown = true
		} else {
			f.NamespaceAnnotations = n.Annotations
		}
	}
	kinds, err := c.childKinds(ctx, obj)
	if err != nil {
		f.ChildrenErrors = append(f.ChildrenErrors, err.Error())
	}
	for _, kind := range kinds {
		children, err := c.childrenOf(ctx, obj, kind)
		if err != nil {
			f.ChildrenErrors = append(f.ChildrenErrors, fmt.Sprintf("the %s children of %s could not be listed: %v", kind, t, err))
			continue
		}
		f.Children = append(f.Children, children...)
	}
	return ExplainAllowances(f), nil
}

// allowancePolicies reads every AllowancePolicy; a cluster without the
// kind has none.
func (c *cluster) allowancePolicies(ctx context.Context) ([]*unstructured.Unstructured, error) {
	list, err := c.dyn.Resource(v1alpha1.AllowancePoliciesGVR).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	out := make([]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// settlednessRecords reads the proxy's settledness records once and looks
// objects up in them, in whichever of its namespace's ConfigMaps holds it.
func (c *cluster) settlednessRecords(ctx context.Context, proxyNamespace string) func(*unstructured.Unstructured) SettlednessLookup {
	var (
		read    bool
		byNS    map[string][]corev1.ConfigMap
		readErr string
	)
	return func(obj *unstructured.Unstructured) SettlednessLookup {
		if !read {
			read = true
			list, err := c.kube.CoreV1().ConfigMaps(proxyNamespace).List(ctx, metav1.ListOptions{LabelSelector: settlements.LabelSelector})
			if err != nil {
				readErr = fmt.Sprintf("the ConfigMaps %s in %s: %v", settlements.LabelSelector, proxyNamespace, err)
			} else {
				byNS = map[string][]corev1.ConfigMap{}
				for _, cm := range list.Items {
					if ns, ok := settlements.NamespaceOf(cm.Name); ok {
						byNS[ns] = append(byNS[ns], cm)
					}
				}
			}
		}
		ns := obj.GetNamespace()
		l := SettlednessLookup{Source: "ConfigMap " + proxyNamespace + "/" + settlements.Name(ns), Error: readErr}
		// Read merged, as the proxy reads them: two replicas may have
		// placed one parent's record in two ConfigMaps at once.
		var sources []string
		for _, cm := range byNS[ns] {
			v, ok := cm.Data[string(obj.GetUID())]
			if !ok {
				continue
			}
			rec, err := settle.DecodeRecord(v)
			if err != nil {
				l.Error = err.Error()
				continue
			}
			sources = append(sources, "ConfigMap "+proxyNamespace+"/"+cm.Name)
			if l.Record != nil {
				rec = settle.Merge(*l.Record, rec)
			}
			l.Record = &rec
		}
		if l.Record != nil {
			l.Source, l.Error = strings.Join(sources, ", "), ""
		}
		return l
	}
}

// childKinds are the kinds of children obj may pass allowances to: those
// its own allowances name, and those the policies for its kind allow.
func (c *cluster) childKinds(ctx context.Context, obj *unstructured.Unstructured) ([]string, error) {
	seen := map[string]bool{}
	set, _ := allowance.Parse(obj.GetAnnotations()[allowance.Annotation])
	for _, a := range set.Allowances {
		seen[a.Kind] = true
	}
	var listErr error
	policies, err := c.allowancePolicies(ctx)
	if err != nil {
		listErr = fmt.Errorf("the AllowancePolicies could not be read (%v): only the child kinds %s names are listed", err, allowance.Annotation)
	}
	for _, u := range policies {
		var p v1alpha1.AllowancePolicy
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p) != nil || p.Spec.Match.Kind != obj.GetKind() {
			continue
		}
		for _, a := range p.Spec.Allow {
			seen[a.Kind] = true
		}
	}
	kinds := make([]string, 0, len(seen))
	for k := range seen {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds, listErr
}

// childrenOf lists the objects of kind in obj's namespace whose controller
// is obj.
func (c *cluster) childrenOf(ctx context.Context, obj *unstructured.Unstructured, kind string) ([]*unstructured.Unstructured, error) {
	t, err := c.resolve(kind + "/-")
	if err != nil {
		return nil, err
	}
	t.ns = obj.GetNamespace()
	list, err := t.resource(c).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for i := range list.Items {
		for _, ref := range list.Items[i].GetOwnerReferences() {
			if ref.Controller != nil && *ref.Controller && ref.UID == obj.GetUID() {
				out = append(out, &list.Items[i])
				break
			}
		}
	}
	return out, nil
}
