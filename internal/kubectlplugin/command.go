package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
)

// options are the flags every command shares.
type options struct {
	out         io.Writer
	loading     *clientcmd.ClientConfigLoadingRules
	overrides   *clientcmd.ConfigOverrides
	output      string
	defaultMode string
	now         func() time.Time
	// proxyConfigFile and proxyConfigMap say where the proxy's
	// configuration is, for the child kinds it leaves ungated.
	proxyConfigFile string
	proxyConfigMap  string
	// proxyNamespace holds the proxy's settledness records.
	proxyNamespace string
}

// NewCommand returns `kubectl kausality` writing to out. Errors are
// returned, not printed: main prints them and exits 1.
func NewCommand(out io.Writer) *cobra.Command {
	o := &options{
		out:         out,
		loading:     clientcmd.NewDefaultClientConfigLoadingRules(),
		overrides:   &clientcmd.ConfigOverrides{},
		defaultMode: string(annotations.ModeLog),
		now:         time.Now,
	}
	cmd := &cobra.Command{
		Use:   "kubectl-kausality",
		Short: "Explain and steer kausality-proxy's drift decisions",
		Long: `kubectl kausality explains what kausality-proxy decides about a child object's
writes and edits the parent annotations that steer it: approvals,
rejections, freeze and snooze. It lists an object's allowances and their
trace. It works against kube-apiserver directly or through the proxy.

Exit codes: 0 success, 1 error (nothing was written).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kausality"},
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.loading.ExplicitPath, "kubeconfig", "", "Path to the kubeconfig file.")
	clientcmd.BindOverrideFlags(o.overrides, pf, clientcmd.RecommendedConfigOverrideFlags(""))
	pf.StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (default: text).")
	cmd.AddCommand(o.whyCommand(), o.traceCommand(), o.approveCommand(), o.rejectCommand(),
		o.freezeCommand(), o.unfreezeCommand(), o.snoozeCommand(), o.unsnoozeCommand(), o.resetControllersCommand(), o.driftsCommand(), o.allowancesCommand())
	return cmd
}

func (o *options) cluster() (*cluster, error) {
	switch o.output {
	case "", "json", "yaml":
	default:
		return nil, fmt.Errorf("--output must be json or yaml, not %q", o.output)
	}
	return newCluster(clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loading, o.overrides))
}

// print writes v as JSON or YAML when asked, else calls text.
func (o *options) print(v any, text func(io.Writer)) error {
	switch o.output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.out, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = o.out.Write(b)
		return err
	}
	text(printableWriter{o.out})
	return nil
}

// printableWriter escapes what a terminal would act on instead of showing
// (see annotations.PrintableLines) in text output: freeze and snooze
// messages, approval reasons and user names come from annotations anybody
// who may edit the parent wrote. JSON and YAML escape it themselves.
type printableWriter struct{ w io.Writer }

func (p printableWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, annotations.PrintableLines(string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (o *options) whyCommand() *cobra.Command {
	var controller, fieldManager string
	cmd := &cobra.Command{
		Use:   "why KIND/NAME",
		Short: "Explain what the proxy decides about a controller's write of this child, and what would unblock it",
		Long: `why shows the child's parent, the parent's lifecycle phase and settledness,
who the parent's controller is and how that is known, the drift mode and
where it comes from, the approvals, rejections, freeze and snooze that
apply, the trace, and what the proxy would decide for a desired-state write
of the child by its controller now (computed with the proxy's own decision
engine), with what would unblock it.

When allowances are on for the parent (kausality.io/allowance-mode), why
also says which check such a write gets, the parent's allowances for the
child's kind and whether the controller can use them, what nothing covers,
and the AllowancePolicies that name the controller.

The plugin cannot see the proxy's memory of where each parent last settled;
when the parent does not look settled now, why also says what the proxy
decides if it remembers the parent settled at its current spec.

Which child kinds the proxy traces without gating (ungatedChildKinds) comes
from the proxy's configuration: the file --proxy-config names, else the
ConfigMap --proxy-config-map names (the one the deployed proxy's --config
is mounted from). When neither can be read, why says so and assumes the
defaults.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, t, err := o.resolve(args[0])
			if err != nil {
				return err
			}
			ex, err := o.explain(cmd.Context(), c, t, controller, fieldManager)
			if err != nil {
				return err
			}
			return o.print(ex, func(w io.Writer) { RenderWhy(w, ex, args[0]) })
		},
	}
	cmd.Flags().StringVar(&controller, "controller", "", "The controller's user name, when the plugin cannot find it (the proxy records only hashes).")
	cmd.Flags().StringVar(&fieldManager, "field-manager", "", "The controller's field manager (default: the owner of the parent's status.observedGeneration).")
	cmd.Flags().StringVar(&o.defaultMode, "default-mode", o.defaultMode, "The proxy's --default-mode (log or enforce), which the plugin cannot read.")
	cmd.Flags().StringVar(&o.proxyConfigFile, "proxy-config", "", "The proxy's --config file, for a proxy whose configuration is not in the cluster.")
	cmd.Flags().StringVar(&o.proxyNamespace, "proxy-namespace", "kausality-system",
		"The proxy's namespace, where it keeps the settledness records that consume allowances (its --drift-namespace).")
	cmd.Flags().StringVar(&o.proxyConfigMap, "proxy-config-map", defaultProxyConfigMap,
		"NAMESPACE/NAME of the ConfigMap holding the proxy's --config file (key "+proxyConfigKey+"), read unless --proxy-config is set.")
	return cmd
}

// explain gathers what why needs about the child t, live, and explains it.
func (o *options) explain(ctx context.Context, c *cluster, t target, controller, fieldManager string) (Explanation, error) {
	mode, set, w := annotations.ParseMode(o.defaultMode)
	if !set || w != nil {
		return Explanation{}, fmt.Errorf("--default-mode must be log or enforce, not %q", o.defaultMode)
	}
	child, err := c.get(ctx, t)
	if err != nil {
		return Explanation{}, err
	}
	configMap := o.proxyConfigMap
	if configMap == "" {
		configMap = defaultProxyConfigMap
	}
	kinds, source, err := c.proxyUngatedKinds(ctx, o.proxyConfigFile, configMap)
	if err != nil {
		return Explanation{}, err
	}
	f := Facts{Child: child, DefaultMode: mode, Controller: controller, FieldManager: fieldManager,
		UngatedKinds: kinds, UngatedSource: source, Now: o.now(),
		PoliciesFor: func(user string) ([]*unstructured.Unstructured, error) { return c.policiesFor(ctx, user) }}
	nsMode, nsOK := c.namespaceMode(ctx, child.GetNamespace(), annotations.Mode)
	f.NamespaceMode, f.NamespaceUnknown = nsMode, !nsOK
	f.NamespaceAllowanceMode, _ = c.namespaceMode(ctx, child.GetNamespace(), annotations.AllowanceMode)
	f.NamespaceModesBy, _ = c.namespaceMode(ctx, child.GetNamespace(), annotations.ModesBy)
	if f.AllowancePolicies, err = c.allowancePolicies(ctx); err != nil {
		f.AllowancePoliciesError = err.Error()
	}
	f.Settledness = c.settlednessRecords(ctx, o.proxyNamespace)
	if pt, ok, err := c.parentOf(child); err != nil {
		f.ParentError = err.Error()
	} else if ok {
		if f.Parent, err = c.get(ctx, pt); err != nil {
			f.Parent, f.ParentError = nil, err.Error()
		}
	}
	return Explain(f), nil
}

func (o *options) traceCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "trace KIND/NAME",
		Short: "Print the causal chain (kausality.io/trace) of an object as a tree",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, t, err := o.resolve(args[0])
			if err != nil {
				return err
			}
			obj, err := c.get(cmd.Context(), t)
			if err != nil {
				return err
			}
			tr, err := trace.Parse(obj.GetAnnotations()[annotations.Trace])
			if err != nil {
				return fmt.Errorf("%s has a malformed %s: %w", t, annotations.Trace, err)
			}
			ref := decision.RefOf(obj)
			return o.print(struct {
				Object decision.ObjectRef `json:"object"`
				Trace  trace.Trace        `json:"trace"`
			}{ref, tr}, func(w io.Writer) { RenderTrace(w, ref, tr) })
		},
	}
}

// result is what an editing command did.
type result struct {
	Target decision.ObjectRef `json:"target"`
	User   string             `json:"user"`
	At     time.Time          `json:"at"`
	Edit   annotations.Edit   `json:"edit"`
}

func (o *options) printResult(r result) error {
	return o.print(r, func(w io.Writer) {
		verb := "updated"
		if r.Edit.Unchanged {
			verb = "unchanged"
		}
		fmt.Fprintf(w, "%s %s: %s (by %s at %s)\n", r.Target, verb, r.Edit.Summary, orUnknown(r.User), r.At.UTC().Format(time.RFC3339))
	})
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown user"
	}
	return s
}

// editParentOf runs an edit of the child's parent.
func (o *options) editParentOf(ctx context.Context, arg string, compute func(child, parent *unstructured.Unstructured, st annotations.Stamp) (annotations.Edit, error)) error {
	c, t, err := o.resolve(arg)
	if err != nil {
		return err
	}
	child, err := c.get(ctx, t)
	if err != nil {
		return err
	}
	pt, ok, err := c.parentOf(child)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s has no controller ownerReference: the proxy never holds its writes as drift, there is nothing to approve or reject", t)
	}
	return o.applyEdit(ctx, c, pt, func(p *unstructured.Unstructured, st annotations.Stamp) (annotations.Edit, error) {
		return compute(child, p, st)
	})
}

// editObject runs an edit of the named object itself (a parent).
func (o *options) editObject(ctx context.Context, arg string, compute func(obj *unstructured.Unstructured, st annotations.Stamp) (annotations.Edit, error)) error {
	c, t, err := o.resolve(arg)
	if err != nil {
		return err
	}
	return o.applyEdit(ctx, c, t, compute)
}

// resolve connects and resolves KIND/NAME.
func (o *options) resolve(arg string) (*cluster, target, error) {
	c, err := o.cluster()
	if err != nil {
		return nil, target{}, err
	}
	t, err := c.resolve(arg)
	return c, t, err
}

// applyEdit writes compute's edit of t, stamped with who and when, and
// prints what was written.
func (o *options) applyEdit(ctx context.Context, c *cluster, t target, compute func(obj *unstructured.Unstructured, st annotations.Stamp) (annotations.Edit, error)) error {
	st := annotations.Stamp{User: c.whoami(ctx), At: o.now()}
	edit, obj, err := c.update(ctx, t, func(p *unstructured.Unstructured) (annotations.Edit, error) { return compute(p, st) })
	if err != nil {
		return err
	}
	return o.printResult(result{Target: decision.RefOf(obj), User: st.User, At: st.At, Edit: edit})
}

func (o *options) approveCommand() *cobra.Command {
	var mode string
	cmd := &cobra.Command{
		Use:   "approve KIND/NAME",
		Short: "Approve the controller's drift of this child on its parent (kausality.io/approvals)",
		Long: `approve adds to the child's parent the approval the proxy suggests in its
denial: apiVersion, kind and name of the child, and for once and generation
approvals the parent's current generation. once admits one write,
generation every write while the parent keeps its spec, always every write.
Entries already there are kept as written; a concurrent edit is never lost.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m := annotations.ApprovalMode(mode)
			if m != annotations.ApprovalOnce && m != annotations.ApprovalGeneration && m != annotations.ApprovalAlways {
				return fmt.Errorf("--mode must be once, generation or always, not %q", mode)
			}
			return o.editParentOf(cmd.Context(), args[0], func(child, parent *unstructured.Unstructured, st annotations.Stamp) (annotations.Edit, error) {
				return approveEdit(decision.RefOf(child), parent, m, st)
			})
		},
	}
	cmd.Flags().StringVar(&mode, "mode", string(annotations.ApprovalOnce), "once, generation or always.")
	return cmd
}

func (o *options) rejectCommand() *cobra.Command {
	var reason string
	var thisGeneration bool
	cmd := &cobra.Command{
		Use:   "reject KIND/NAME --reason TEXT",
		Short: "Reject the controller's drift of this child on its parent (kausality.io/rejections); beats any approval",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.editParentOf(cmd.Context(), args[0], func(child, parent *unstructured.Unstructured, st annotations.Stamp) (annotations.Edit, error) {
				return rejectEdit(decision.RefOf(child), parent, reason, thisGeneration, st)
			})
		},
	}
	cmd.PreRunE = requireReason(&reason)
	cmd.Flags().StringVar(&reason, "reason", "", "Why (shown in every denial). Required.")
	cmd.Flags().BoolVar(&thisGeneration, "this-generation", false, "Reject only while the parent keeps its current spec (default: until removed).")
	return cmd
}

// approveEdit adds to parent the approval of the child's drift in mode m;
// once and generation approvals are for the parent's generation as read.
func approveEdit(child decision.ObjectRef, parent *unstructured.Unstructured, m annotations.ApprovalMode, st annotations.Stamp) (annotations.Edit, error) {
	c := approval.ChildOf(child.APIVersion, child.Kind, child.Namespace, child.Name, parent.GetNamespace())
	a := annotations.Approval{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, Namespace: c.Namespace, Mode: m}
	if m != annotations.ApprovalAlways {
		a.Generation = parent.GetGeneration()
	}
	return annotations.AddApprovalTo(parent.GetAnnotations(), a, st)
}

// rejectEdit adds to parent the rejection of the child's drift.
func rejectEdit(child decision.ObjectRef, parent *unstructured.Unstructured, reason string, thisGeneration bool, st annotations.Stamp) (annotations.Edit, error) {
	c := approval.ChildOf(child.APIVersion, child.Kind, child.Namespace, child.Name, parent.GetNamespace())
	r := annotations.Rejection{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, Namespace: c.Namespace, Reason: reason}
	if thisGeneration {
		r.Generation = parent.GetGeneration()
	}
	return annotations.AddRejection(parent.GetAnnotations()[annotations.Rejections], r, st)
}

// parentCommand is a command that edits the named parent's annotations.
func (o *options) parentCommand(use, short string, edit func(p *unstructured.Unstructured, st annotations.Stamp) (annotations.Edit, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.editObject(cmd.Context(), args[0], edit)
		},
	}
}

func (o *options) freezeCommand() *cobra.Command {
	var reason string
	cmd := o.parentCommand("freeze PARENT --reason TEXT", "Freeze a parent: every desired-state write of its children is denied (kausality.io/freeze)",
		func(p *unstructured.Unstructured, st annotations.Stamp) (annotations.Edit, error) {
			return annotations.SetFreeze(p.GetAnnotations()[annotations.Freeze], reason, st)
		})
	cmd.PreRunE = requireReason(&reason)
	cmd.Flags().StringVar(&reason, "reason", "", "Why (shown in every denial). Required.")
	return cmd
}

// requireReason fails a command before it connects when --reason is
// missing: the proxy shows the reason in every denial it causes.
func requireReason(reason *string) func(*cobra.Command, []string) error {
	return func(*cobra.Command, []string) error {
		if strings.TrimSpace(*reason) == "" {
			return errors.New("--reason is required: the proxy shows it in every denial")
		}
		return nil
	}
}

func (o *options) unfreezeCommand() *cobra.Command {
	return o.parentCommand("unfreeze PARENT", "Lift a parent's freeze",
		func(p *unstructured.Unstructured, _ annotations.Stamp) (annotations.Edit, error) {
			return annotations.Unfreeze(p.GetAnnotations()[annotations.Freeze]), nil
		})
}

func (o *options) resetControllersCommand() *cobra.Command {
	cmd := o.parentCommand("reset-controllers PARENT",
		"Forget who the parent's controller is (kausality.io/controllers), for a controller that changed identity",
		func(p *unstructured.Unstructured, _ annotations.Stamp) (annotations.Edit, error) {
			return annotations.ResetControllers(p.GetAnnotations()[annotations.Controllers]), nil
		})
	cmd.Long = `reset-controllers empties the parent's kausality.io/controllers record. The
proxy records a parent's controller from the status writes that advance its
observedGeneration, up to five users, and never lets a newcomer push one of
them out; a controller that now runs as another user is recorded only after
a person resets the record. Until the next status write that advances
observedGeneration records the controller again, the owner of the parent's
status.observedGeneration in managedFields decides who the controller is.`
	return cmd
}

func (o *options) snoozeCommand() *cobra.Command {
	var d time.Duration
	var message string
	cmd := o.parentCommand("snooze PARENT --for DURATION",
		"Suppress drift notifications of a parent for a while (kausality.io/snooze-until); decisions are unchanged",
		func(_ *unstructured.Unstructured, st annotations.Stamp) (annotations.Edit, error) {
			return annotations.SetSnooze(d, message, st)
		})
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if d <= 0 {
			return errors.New("--for is required and must be positive (for example --for 2h)")
		}
		return nil
	}
	cmd.Flags().DurationVar(&d, "for", 0, "How long, for example 2h.")
	cmd.Flags().StringVar(&message, "reason", "", "Why (recorded with the snooze).")
	return cmd
}

func (o *options) unsnoozeCommand() *cobra.Command {
	return o.parentCommand("unsnooze PARENT", "End a parent's snooze",
		func(p *unstructured.Unstructured, _ annotations.Stamp) (annotations.Edit, error) {
			return annotations.Unsnooze(p.GetAnnotations()), nil
		})
}
