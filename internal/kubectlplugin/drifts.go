package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
	"github.com/kausality-io/kausality-proxy/report/drifts"
	"github.com/kausality-io/kausality-proxy/report/escalation"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

// DriftRow is one open drift as `drifts` shows it.
type DriftRow struct {
	ID string `json:"id"`
	// Parent is the parent as it was when the drift was detected, at
	// ParentGeneration.
	Parent           decision.ObjectRef `json:"parent"`
	ParentGeneration int64              `json:"parentGeneration"`
	// ParentUID and ParentSpecHash name the parent object and its spec at
	// detection: a decision taken here lands only on that object, and an
	// approval only while its spec is unchanged.
	ParentUID      string             `json:"parentUID,omitempty"`
	ParentSpecHash string             `json:"parentSpecHash,omitempty"`
	Child          decision.ObjectRef `json:"child"`
	// Controller is the user whose write drifted.
	Controller string                `json:"controller"`
	Changes    []desired.Change      `json:"changes,omitempty"`
	DetectedAt time.Time             `json:"detectedAt"`
	Mode       annotations.DriftMode `json:"mode,omitempty"`
	// Held: the write was denied, and the controller retries it until a
	// person decides. Otherwise the drift was only reported.
	Held       bool        `json:"held"`
	Trace      trace.Trace `json:"trace,omitempty"`
	TraceError string      `json:"traceError,omitempty"`
	// Allowances are the mutations no allowance on the parent covered,
	// when the allowance check reported the write.
	Allowances *v1alpha1.AllowanceVerdict `json:"allowances,omitempty"`
}

// State is how the row reads in the list: held, reported or shadow.
func (r DriftRow) State() string {
	switch {
	case r.Held:
		return "held"
	case r.Mode == annotations.ModeShadow:
		return "shadow"
	default:
		return "reported"
	}
}

// Approval is the approval entry that lets the drifted write through
// once, at the generation the drift was detected at.
func (r DriftRow) Approval() annotations.Approval {
	c := approval.ChildOf(r.Child.APIVersion, r.Child.Kind, r.Child.Namespace, r.Child.Name, r.Parent.Namespace)
	return annotations.Approval{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, Namespace: c.Namespace,
		Generation: r.ParentGeneration, Mode: annotations.ApprovalOnce}
}

// driftFilter is what the person asked to see.
type driftFilter struct {
	namespace  string // "" for all namespaces
	controller string
	mode       annotations.DriftMode
}

func (f driftFilter) scope() string {
	var parts []string
	if f.namespace == "" {
		parts = append(parts, "all namespaces")
	} else {
		parts = append(parts, "namespace "+f.namespace)
	}
	if f.controller != "" {
		parts = append(parts, "controller ~ "+f.controller)
	}
	if f.mode != "" {
		parts = append(parts, "mode "+string(f.mode))
	}
	return strings.Join(parts, ", ")
}

func (f driftFilter) keeps(r DriftRow) bool {
	return (f.namespace == "" || r.Child.Namespace == f.namespace) &&
		(f.controller == "" || strings.Contains(r.Controller, f.controller)) &&
		(f.mode == "" || r.Mode == f.mode)
}

// rowsOf turns the drift records among cms into the rows f keeps, oldest
// first. A ConfigMap that is not a readable record is a problem line, not
// an error: one bad record must not hide the others.
func rowsOf(cms []*corev1.ConfigMap, f driftFilter) (rows []DriftRow, problems []string) {
	for _, cm := range cms {
		rec, err := drifts.DecodeRecord(cm)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if rec.State.Resolved != nil {
			continue
		}
		row := rowOf(rec)
		if f.keeps(row) {
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, func(a, b DriftRow) int {
		if c := a.DetectedAt.Compare(b.DetectedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	slices.Sort(problems)
	return rows, problems
}

func rowOf(rec *drifts.Record) DriftRow {
	s := rec.Report.Spec
	row := DriftRow{
		ID: s.ID, Parent: notify.ParentObject(s.Parent), ParentGeneration: s.Parent.Generation, Child: notify.ChildObject(s.Child),
		ParentUID: string(s.Parent.UID), ParentSpecHash: rec.State.ParentSpecHash,
		Controller: s.Request.User, Changes: s.Changes, DetectedAt: rec.State.DetectedAt.Time,
		Mode: rec.State.Mode, Held: rec.State.Held, Allowances: s.Allowances,
	}
	// The record keeps the last hops of the written object's trace.
	if obj := rawObject(s.NewObject); obj != nil {
		if v := obj.GetAnnotations()[annotations.Trace]; v != "" {
			t, err := trace.Parse(v)
			if err != nil {
				row.TraceError = err.Error()
			}
			row.Trace = t
		}
	}
	return row
}

func rawObject(e runtime.RawExtension) *unstructured.Unstructured {
	if len(e.Raw) == 0 {
		return nil
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(e.Raw); err != nil {
		return nil
	}
	return u
}

// shortUser drops the service-account prefix every controller shares.
func shortUser(u string) string {
	return strings.TrimPrefix(u, "system:serviceaccount:")
}

func changesText(cs []desired.Change) string {
	if len(cs) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		if c.Old == "" && c.New == "" {
			parts = append(parts, c.Path)
			continue
		}
		parts = append(parts, c.Path+": "+c.Old+" → "+c.New)
	}
	return strings.Join(parts, "; ")
}

func objectText(r decision.ObjectRef) string { return r.Kind + " " + r.Name }

// namespacedText names r's namespace too: where an action is asked for, or
// where drifts of several namespaces are listed, "Deployment web" may be
// two objects.
func namespacedText(r decision.ObjectRef) string {
	if r.Namespace == "" {
		return objectText(r)
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return duration.HumanDuration(now.Sub(t))
}

func modeText(m annotations.DriftMode) string {
	if m == "" {
		return "?"
	}
	return string(m)
}

// printDriftTable is the list for scripts: one line per drift, the same
// columns as the terminal UI.
func printDriftTable(w io.Writer, rows []DriftRow, problems []string, allNamespaces bool, now time.Time) {
	tw := tabwriter.NewWriter(printableWriter{w}, 0, 4, 2, ' ', 0)
	header := "STATE\tMODE\tPARENT\tCHILD\tCONTROLLER\tCHANGES\tAGE"
	if allNamespaces {
		header = "NAMESPACE\t" + header
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		cells := []string{r.State(), modeText(r.Mode), objectText(r.Parent), objectText(r.Child),
			shortUser(r.Controller), changesText(r.Changes), age(now, r.DetectedAt)}
		if allNamespaces {
			cells = append([]string{r.Child.Namespace}, cells...)
		}
		// Each cell escaped on its own: a tab or a newline in a name or a
		// path would otherwise be a column or a row of its own.
		for i, c := range cells {
			cells[i] = annotations.Printable(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
	for _, p := range problems {
		fmt.Fprintf(printableWriter{w}, "unreadable: %s\n", p)
	}
}

// driftList is the JSON and YAML form of the list.
type driftList struct {
	Drifts     []DriftRow `json:"drifts"`
	Unreadable []string   `json:"unreadable,omitempty"`
}

func (o *options) driftsCommand() *cobra.Command {
	var allNamespaces bool
	var recordNamespace, controller, mode string
	cmd := &cobra.Command{
		Use:   "drifts",
		Short: "Show the open drifts, live, and approve, reject, snooze or freeze them by key",
		Long: `drifts shows the open drifts the proxy recorded (ConfigMaps in its namespace)
and follows them live: each drift's parent, child, controller, changed
fields, age, mode and whether the write is held (enforce) or only reported.
Enter opens a drift: the changes, the trace, the approval that unblocks it
and what why explains. Keys act on the selected drift after a confirmation:
a approve once, g approve for this generation, r reject, s snooze the
parent, f freeze the parent, u unfreeze it. q or Ctrl-C quits.

When stdout is not a terminal, or with -o table|json|yaml, drifts prints
the list once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.output {
			case "", "table", "json", "yaml":
			default:
				return fmt.Errorf("--output must be table, json or yaml, not %q", o.output)
			}
			m := annotations.DriftMode(mode)
			if m != "" && m != annotations.ModeLog && m != annotations.ModeEnforce && m != annotations.ModeShadow {
				return fmt.Errorf("--mode must be log, enforce or shadow, not %q", mode)
			}
			c, err := newCluster(clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loading, o.overrides))
			if err != nil {
				return err
			}
			f := driftFilter{controller: controller, mode: m}
			if !allNamespaces {
				f.namespace = c.namespace
			}
			src := &driftSource{c: c, namespace: recordNamespace, filter: f}
			if o.output != "" || !isTerminal(o.out) {
				return o.printDriftsOnce(cmd.Context(), src, allNamespaces)
			}
			return o.runDriftsUI(cmd.Context(), c, src)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Show the drifts of every namespace.")
	cmd.Flags().StringVar(&recordNamespace, "drift-namespace", "kausality-system", "The proxy's namespace, where it keeps the drift records (its --drift-namespace).")
	cmd.Flags().StringVar(&controller, "controller", "", "Only drifts written by a user whose name contains this.")
	cmd.Flags().StringVar(&mode, "mode", "", "Only drifts decided in this mode: log, enforce or shadow.")
	return cmd
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (o *options) printDriftsOnce(ctx context.Context, src *driftSource, allNamespaces bool) error {
	cms, err := src.list(ctx)
	if err != nil {
		return err
	}
	rows, problems := rowsOf(cms, src.filter)
	return o.printDriftRows(rows, problems, allNamespaces)
}

func (o *options) printDriftRows(rows []DriftRow, problems []string, allNamespaces bool) error {
	var err error
	switch o.output {
	case "json", "yaml":
		v := driftList{Drifts: rows, Unreadable: problems}
		if v.Drifts == nil {
			v.Drifts = []DriftRow{}
		}
		var b []byte
		if o.output == "json" {
			b, err = json.MarshalIndent(v, "", "  ")
			b = append(b, '\n')
		} else {
			b, err = yaml.Marshal(v)
		}
		if err != nil {
			return err
		}
		_, err = o.out.Write(b)
		return err
	}
	printDriftTable(o.out, rows, problems, allNamespaces, o.now())
	return nil
}

// driftSource reads the drift records of the proxy's namespace.
type driftSource struct {
	c         *cluster
	namespace string
	filter    driftFilter
}

func (s *driftSource) listOptions(opts *metav1.ListOptions) {
	opts.LabelSelector = drifts.RecordSelector().String()
}

func (s *driftSource) list(ctx context.Context) ([]*corev1.ConfigMap, error) {
	opts := metav1.ListOptions{}
	s.listOptions(&opts)
	list, err := s.c.kube.CoreV1().ConfigMaps(s.namespace).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("reading the drift records in namespace %s: %w", s.namespace, err)
	}
	out := make([]*corev1.ConfigMap, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// watch follows the records with an informer and sends the list of rows
// to send after every change, and every interval (ages, and a watch error
// that cleared). It returns when ctx ends.
func (s *driftSource) watch(ctx context.Context, interval time.Duration, send func(tea.Msg)) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			s.listOptions(&opts)
			return s.c.kube.CoreV1().ConfigMaps(s.namespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			s.listOptions(&opts)
			return s.c.kube.CoreV1().ConfigMaps(s.namespace).Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	var mu sync.Mutex
	var lastErr string
	_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		mu.Lock()
		lastErr = fmt.Sprintf("reading the drift records in namespace %s: %v", s.namespace, err)
		mu.Unlock()
		send(s.snapshot(inf, lastErr))
	})
	changed := func() {
		mu.Lock()
		lastErr = ""
		mu.Unlock()
		send(s.snapshot(inf, ""))
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	go inf.RunWithContext(ctx)
	wait.UntilWithContext(ctx, func(context.Context) {
		mu.Lock()
		e := lastErr
		mu.Unlock()
		if e == "" && !inf.HasSynced() {
			return
		}
		send(s.snapshot(inf, e))
	}, interval)
}

func (s *driftSource) snapshot(inf cache.SharedIndexInformer, errText string) recordsMsg {
	var cms []*corev1.ConfigMap
	for _, o := range inf.GetStore().List() {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			cms = append(cms, cm)
		}
	}
	rows, problems := rowsOf(cms, s.filter)
	return recordsMsg{rows: rows, problems: problems, err: errText, synced: inf.HasSynced()}
}

// driftActor applies the person's decisions to the parents, with the same
// annotation edits as approve, reject, snooze, freeze and unfreeze.
type driftActor struct {
	o    *options
	c    *cluster
	user string
}

func (a *driftActor) apply(ctx context.Context, req actionRequest) (string, error) {
	gv, err := schema.ParseGroupVersion(req.row.Parent.APIVersion)
	if err != nil {
		return "", err
	}
	m, err := a.c.mapper.RESTMapping(gv.WithKind(req.row.Parent.Kind).GroupKind(), gv.Version)
	if err != nil {
		return "", err
	}
	t := target{mapping: m, ns: req.row.Parent.Namespace, name: req.row.Parent.Name}
	st := annotations.Stamp{User: a.user, At: a.o.now()}
	edit, _, err := a.c.update(ctx, t, func(p *unstructured.Unstructured) (annotations.Edit, error) {
		// As a click in Slack: the decision is about this drift, under
		// the parent it was detected under.
		if err := escalation.SameParent(p, req.row.ParentUID); err != nil {
			return annotations.Edit{}, err
		}
		if req.action.approves {
			if _, err := escalation.ApprovableGeneration(p, req.row.ParentGeneration, req.row.ParentSpecHash); err != nil {
				return annotations.Edit{}, err
			}
		}
		return req.action.edit(req.row.Child, p, req.input, st)
	})
	if err != nil {
		return "", err
	}
	verb := "updated"
	if edit.Unchanged {
		verb = "unchanged"
	}
	return fmt.Sprintf("%s %s: %s", t, verb, edit.Summary), nil
}

// explain runs why for the drift's child, live.
func (a *driftActor) explain(ctx context.Context, row DriftRow) (string, error) {
	gv, err := schema.ParseGroupVersion(row.Child.APIVersion)
	if err != nil {
		return "", err
	}
	m, err := a.c.mapper.RESTMapping(gv.WithKind(row.Child.Kind).GroupKind(), gv.Version)
	if err != nil {
		return "", err
	}
	t := target{mapping: m, ns: row.Child.Namespace, name: row.Child.Name}
	ex, err := a.o.explain(ctx, a.c, t, row.Controller, "")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	RenderWhy(printableWriter{&b}, ex, resourceArg(row.Child))
	return b.String(), nil
}

func (o *options) runDriftsUI(ctx context.Context, c *cluster, src *driftSource) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	actor := &driftActor{o: o, c: c, user: c.whoami(ctx)}
	m := newDriftsModel(src.filter.scope(), o.now)
	m.allNamespaces = src.filter.namespace == ""
	m.apply = func(req actionRequest) tea.Cmd {
		return func() tea.Msg {
			actx, acancel := context.WithTimeout(ctx, 30*time.Second)
			defer acancel()
			summary, err := actor.apply(actx, req)
			return actionDoneMsg{summary: summary, err: err}
		}
	}
	m.explain = func(row DriftRow) tea.Cmd {
		return func() tea.Msg {
			ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
			defer ecancel()
			text, err := actor.explain(ectx, row)
			return explainedMsg{id: row.ID, text: text, err: err}
		}
	}
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithAltScreen(), tea.WithOutput(o.out))
	go src.watch(ctx, 2*time.Second, p.Send)
	_, err := p.Run()
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
