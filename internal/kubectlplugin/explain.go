// Package kubectlplugin is `kubectl kausality`: it explains what the proxy
// decides about a child object and edits the parent annotations that steer
// those decisions (approvals, rejections, freeze, snooze).
//
// The explanation runs the proxy's own decision engine (intercept/decision)
// on what the plugin can read from the cluster, and every edit is checked
// with the parsers the proxy reads the annotations with before it is
// written. What the plugin cannot see (the proxy's memory of where a parent
// last settled, its --config, its --default-mode) is said, not guessed.
package kubectlplugin

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/lifecycle"
	"github.com/kausality-io/kausality-proxy/intercept/policy"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/intercept/trace"
)

// Facts is what `why` read from the cluster.
type Facts struct {
	Child *unstructured.Unstructured
	// Parent is the controller owner; nil when the child has none or it
	// could not be read (ParentError says why).
	Parent      *unstructured.Unstructured
	ParentError string
	// NamespaceMode is the kausality.io/mode annotation of the child's
	// namespace; NamespaceUnknown when the namespace could not be read.
	NamespaceMode    string
	NamespaceUnknown bool
	// NamespaceModesBy is the namespace's kausality.io/modes-by: who set
	// its mode through the proxy.
	NamespaceModesBy string
	// DefaultMode is the proxy's --default-mode as the user says it is.
	DefaultMode annotations.DriftMode
	// Controller and FieldManager override who the controller is.
	Controller   string
	FieldManager string
	// UngatedKinds are the proxy's ungatedChildKinds, read from
	// UngatedSource.
	UngatedKinds  []decision.UngatedKind
	UngatedSource string
	// PoliciesFor reads the ApprovalPolicies and ClusterApprovalPolicies
	// that apply to a controller user, as the proxy selects them; nil
	// reads none.
	PoliciesFor func(user string) ([]*unstructured.Unstructured, error)
	Now         time.Time
	// NamespaceAllowanceMode is the kausality.io/allowance-mode annotation
	// of the child's namespace.
	NamespaceAllowanceMode string
	// AllowancePolicies are the AllowancePolicies as read;
	// AllowancePoliciesError says why they could not be read.
	AllowancePolicies      []*unstructured.Unstructured
	AllowancePoliciesError string
	// Settledness looks up the proxy's settledness record of the parent.
	Settledness func(*unstructured.Unstructured) SettlednessLookup
}

// Explanation is the output of `why`.
type Explanation struct {
	Child      decision.ObjectRef      `json:"child"`
	Parent     *ParentView             `json:"parent,omitempty"`
	Controller *ControllerView         `json:"controller,omitempty"`
	Mode       *ModeView               `json:"mode,omitempty"`
	Approvals  []EntryView             `json:"approvals,omitempty"`
	Rejections []EntryView             `json:"rejections,omitempty"`
	Freeze     *annotations.FreezeInfo `json:"freeze,omitempty"`
	Snooze     *SnoozeView             `json:"snooze,omitempty"`
	Policies   []PolicyView            `json:"policies,omitempty"`
	// Ungated says whether the child's kind is one the proxy traces but
	// does not gate, and from which configuration that is known.
	Ungated    *UngatedView `json:"ungated,omitempty"`
	Trace      trace.Trace  `json:"trace,omitempty"`
	TraceError string       `json:"traceError,omitempty"`
	// Verdict is the decision on a desired-state write by the controller
	// now, with settledness as the parent reports it.
	Verdict *Verdict `json:"verdict,omitempty"`
	// Allowances explains the allowance check of that write.
	Allowances *AllowanceExplanation `json:"allowances,omitempty"`
	// IfRemembered is the decision when the proxy remembers the parent
	// settled at its current spec, which the plugin cannot see; set only
	// when it differs from Verdict.
	IfRemembered *Verdict `json:"ifRemembered,omitempty"`
	Warnings     []string `json:"warnings,omitempty"`
	Notes        []string `json:"notes,omitempty"`
}

// UngatedView says whether writes of the child's kind by its controller
// under a settled parent are traced rather than gated.
type UngatedView struct {
	Kind    schema.GroupKind `json:"kind"`
	Ungated bool             `json:"ungated"`
	// Source is where the list was read: the proxy's configuration, or
	// the defaults when it could not be read.
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// ungatedView explains the child's kind, under its parent's, against the
// configured list.
func ungatedView(child, parent *unstructured.Unstructured, kinds []decision.UngatedKind, source string) *UngatedView {
	gk := child.GroupVersionKind().GroupKind()
	parentKind := parent.GroupVersionKind().GroupKind()
	entry, ungated := decision.UngatedBy(kinds, gk, parentKind)
	v := &UngatedView{Kind: gk, Ungated: ungated, Source: source}
	switch {
	case ungated && entry.Parent.Kind != "":
		v.Reason = gk.Kind + " children of " + parentKind.Kind + " parents are attempts their controller makes by design (on a timer or after a failure; ungated as " +
			entry.String() + "): its writes are traced, not gated, even under a settled parent"
	case ungated:
		v.Reason = gk.Kind + " children are attempts their controller makes by design (on a timer or after a failure): its writes are traced, not gated, even under a settled parent"
	default:
		v.Reason = gk.Kind + " under parent kind " + parentKind.String() + " is not in ungatedChildKinds: its controller's writes under a settled parent are gated"
	}
	return v
}

// PolicyView is an approval policy that applies to the controller, and
// the rules of it that can never match.
type PolicyView struct {
	Policy   policy.Ref       `json:"policy"`
	Problems []policy.Problem `json:"problems,omitempty"`
}

// ParentView describes the parent.
type ParentView struct {
	Ref                      decision.ObjectRef `json:"ref"`
	Generation               int64              `json:"generation"`
	ObservedGeneration       int64              `json:"observedGeneration,omitempty"`
	ObservedGenerationSource string             `json:"observedGenerationSource,omitempty"`
	Phase                    lifecycle.Phase    `json:"phase"`
	PhaseReason              string             `json:"phaseReason"`
	Settled                  bool               `json:"settled"`
	SettledReason            string             `json:"settledReason"`
}

// ControllerView says who the parent's controller is and how that is known.
type ControllerView struct {
	// User is the controller's user name; "" when the plugin cannot name
	// it (the proxy records hashes only).
	User         string              `json:"user,omitempty"`
	FieldManager string              `json:"fieldManager,omitempty"`
	Method       controllerid.Method `json:"method,omitempty"`
	Determined   bool                `json:"determined"`
	Recorded     []string            `json:"recorded,omitempty"`
	Managers     []string            `json:"managers,omitempty"`
	Reason       string              `json:"reason"`
}

// ModeView is the drift mode and where it comes from.
type ModeView struct {
	Mode   annotations.DriftMode `json:"mode"`
	Source decision.ModeSource   `json:"source"`
	Detail string                `json:"detail"`
}

// EntryView is an approval or rejection entry as written, and what it
// means for this child.
type EntryView struct {
	Entry json.RawMessage `json:"entry"`
	// Applies: it matches this child and is in force at the parent's
	// generation.
	Applies bool   `json:"applies"`
	Note    string `json:"note"`
}

// SnoozeView is the parent's snooze.
type SnoozeView struct {
	Until      time.Time `json:"until"`
	Active     bool      `json:"active"`
	User       string    `json:"user,omitempty"`
	Message    string    `json:"message,omitempty"`
	Annotation string    `json:"annotation"`
}

// Verdict is one run of decision.Decide.
type Verdict struct {
	Assumption string              `json:"assumption"`
	Result     decision.Result     `json:"result"`
	Category   decision.Category   `json:"category"`
	Reason     string              `json:"reason"`
	Message    string              `json:"message,omitempty"`
	Approval   *approval.Approval  `json:"approval,omitempty"`
	Consumes   bool                `json:"consumes,omitempty"`
	Suggested  *approval.Approval  `json:"suggested,omitempty"`
	Unblock    []Unblock           `json:"unblock,omitempty"`
	Rejection  *approval.Rejection `json:"rejection,omitempty"`
}

// Unblock is what the proxy says to do about a denial.
type Unblock struct {
	Field  string `json:"field"`
	Action string `json:"action"`
}

// conventionalControllers are the service accounts kube-controller-manager
// gives its controllers, by the kind they own: the proxy records
// controllers as hashes, and these are the names worth trying first.
var conventionalControllers = map[string]string{
	"Deployment":            "deployment-controller",
	"ReplicaSet":            "replicaset-controller",
	"StatefulSet":           "statefulset-controller",
	"DaemonSet":             "daemon-set-controller",
	"Job":                   "job-controller",
	"CronJob":               "cronjob-controller",
	"ReplicationController": "replication-controller",
}

// Explain builds the explanation of f.
//
//nolint:funlen // one explanation, line by line, in the order the user reads it
func Explain(f Facts) Explanation {
	now := f.Now
	if now.IsZero() {
		now = time.Now()
	}
	child := f.Child
	ex := Explanation{Child: decision.RefOf(child)}
	if t, err := trace.Parse(child.GetAnnotations()[annotations.Trace]); err != nil {
		ex.TraceError = err.Error()
	} else {
		ex.Trace = t
	}
	if f.Parent == nil {
		if f.ParentError != "" {
			ex.Notes = append(ex.Notes, "the parent could not be read: "+f.ParentError)
		} else {
			ex.Notes = append(ex.Notes, "no controller ownerReference: every write of this object is a new causal origin")
		}
		return ex
	}
	p := f.Parent
	pann := p.GetAnnotations()

	current, why := settle.Current(p)
	lc := lifecycle.Detect(p)
	pv := &ParentView{Ref: decision.RefOf(p), Generation: p.GetGeneration(), Phase: lc.Phase, PhaseReason: lc.Reason,
		Settled: current, SettledReason: why}
	if g, src, ok := lifecycle.ObservedGeneration(p); ok {
		pv.ObservedGeneration, pv.ObservedGenerationSource = g, src
	}
	ex.Parent = pv
	ex.Ungated = ungatedView(child, p, f.UngatedKinds, f.UngatedSource)

	cv, decideParent := identifyController(f)
	ex.Controller = cv
	var policies []*policy.Compiled
	if f.PoliciesFor != nil && cv.User != "" {
		objs, err := f.PoliciesFor(cv.User)
		if err != nil {
			ex.Notes = append(ex.Notes, "the approval policies could not be read: "+err.Error())
		}
		for _, u := range objs {
			c := policy.Compile(u)
			policies = append(policies, c)
			ex.Policies = append(ex.Policies, PolicyView{Policy: c.Ref, Problems: c.Problems})
		}
	}

	win := approval.At(p.GetGeneration())
	c := approval.ChildOf(child.GetAPIVersion(), child.GetKind(), child.GetNamespace(), child.GetName(), p.GetNamespace())
	entries, aws, ok := annotations.ParseApprovalEntries(pann[annotations.Approvals])
	// Named as the decision engine names them, so that its warnings about
	// the same annotations are not shown twice.
	parentObj := "parent " + pv.Ref.String()
	for _, w := range aws {
		w.Object = parentObj
		ex.Warnings = append(ex.Warnings, w.String())
	}
	if ok {
		writers := annotations.ParseWriters(pann[annotations.ApprovalsBy])
		recorded := controllerid.ParseHashes(pann[annotations.Controllers])
		var controllerHash string
		if cv.User != "" {
			controllerHash = controllerid.LongHash(cv.User)
		}
		onlyTheController := func(u string) bool { return u == controllerHash || controllerid.ContainsHash(recorded, u) }
		for _, e := range entries {
			v := approvalView(e, c, win)
			if e.Valid && writers.OnlyBy(e.Raw, onlyTheController) {
				v.Applies = false
				v.Note = "given by the parent's own controller: approves none of its drift; a person must approve"
			}
			ex.Approvals = append(ex.Approvals, v)
		}
	}
	if v := pann[annotations.Rejections]; strings.TrimSpace(v) != "" {
		if _, rw := annotations.ParseRejections(v); rw != nil {
			rw.Object = parentObj
			ex.Warnings = append(ex.Warnings, rw.String())
		} else {
			var raws []json.RawMessage
			_ = json.Unmarshal([]byte(v), &raws)
			for _, raw := range raws {
				var r annotations.Rejection
				_ = json.Unmarshal(raw, &r)
				ex.Rejections = append(ex.Rejections, rejectionView(raw, r, c, win))
			}
		}
	}
	fz, fw := annotations.ParseFreeze(pann[annotations.Freeze])
	if fw != nil {
		fw.Object = parentObj
		ex.Warnings = append(ex.Warnings, fw.String())
	}
	ex.Freeze = fz
	sn, sw := annotations.ParseSnooze(pann)
	if sw != nil {
		sw.Object = parentObj
		ex.Warnings = append(ex.Warnings, sw.String())
	}
	if sn != nil {
		ex.Snooze = &SnoozeView{Until: sn.Until, Active: sn.ActiveAt(now), User: sn.User, Message: sn.Message, Annotation: sn.Annotation}
	}

	facts := settle.Facts{AtCurrentSpec: current, SpecSince: p.GetGeneration()}
	if current {
		facts.Reason = "is settled at its current spec (" + why + ")"
	} else {
		facts.Reason = "is not settled now (" + why + ")"
	}
	d := decide(f, cv, decideParent, facts, policies, now)
	ex.Mode = modeView(d, f)
	ex.Verdict = verdictOf(d, "settledness as the parent reports it now (settle.Current)")
	controllerName := cv.User
	if f.Controller != "" {
		controllerName = f.Controller
	}
	ex.Allowances = explainAllowances(f, controllerName, d)
	for _, w := range d.Warnings {
		if !slices.Contains(ex.Warnings, w) {
			ex.Warnings = append(ex.Warnings, w)
		}
	}
	if !current {
		remembered := settle.Facts{AtCurrentSpec: true, Known: true, SpecSince: p.GetGeneration(),
			Reason: "has not changed its spec since it last settled (now " + why + ")"}
		r := decide(f, cv, decideParent, remembered, policies, now)
		if r.Category != d.Category || r.Result != d.Result {
			ex.IfRemembered = verdictOf(r, "the proxy remembers the parent settled at its current spec (a person's edit of a child makes a settled parent look busy)")
		}
		ex.Notes = append(ex.Notes, "the plugin has no memory of the parent's earlier states; the proxy remembers the spec each parent last settled at, so it may decide as if the parent were settled")
	}
	if d.ModeSource == decision.ModeFromDefault {
		ex.Notes = append(ex.Notes, "per-controller modes in the proxy's --config are not visible to the plugin")
	}
	return ex
}

// identifyController finds the controller's name among the users the
// plugin can think of, since the proxy records only hashes. It returns the
// parent to decide with: when the record names a hash no candidate has, a
// copy whose record also holds a stand-in's hash, so that the decision is
// still the one on a write by the recorded controller.
func identifyController(f Facts) (*ControllerView, *unstructured.Unstructured) {
	p := f.Parent
	recorded := controllerid.ParseHashes(p.GetAnnotations()[annotations.Controllers])
	managers, _ := controllerid.ObservedGenerationManagers(p)
	cv := &ControllerView{Recorded: recorded, Managers: managers, FieldManager: f.FieldManager}
	if cv.FieldManager == "" && len(managers) > 0 {
		cv.FieldManager = managers[0]
	}

	name := f.Controller
	if name == "" {
		cands := candidates(f)
		switch {
		case len(recorded) > 0:
			for _, n := range cands {
				if controllerid.UserOf(n).In(recorded) {
					name = n
					break
				}
			}
		case len(managers) > 0:
			if sa, ok := conventionalControllers[p.GetKind()]; ok && slices.Contains(managers, "kube-controller-manager") {
				name = "system:serviceaccount:kube-system:" + sa
			}
		}
	}
	cv.User = name
	decideParent := p
	if name == "" && len(recorded) > 0 {
		stand := "controller with hash " + recorded[0]
		decideParent = p.DeepCopy()
		ann := decideParent.GetAnnotations()
		ann[annotations.Controllers] = controllerid.UserOf(stand).Long + "," + ann[annotations.Controllers]
		decideParent.SetAnnotations(ann)
	}
	id := controllerid.Identify(p, cv.FieldManager, controllerid.UserOf(name))
	if name == "" && len(recorded) > 0 {
		id = controllerid.Identify(decideParent, cv.FieldManager, controllerid.UserOf("controller with hash "+recorded[0]))
	}
	cv.Method, cv.Determined, cv.Reason = id.Method, id.Determined, id.Reason
	switch {
	case id.Method == controllerid.MethodStatusWriters && name == "":
		cv.Reason = "recorded in " + annotations.Controllers + " as user hash " + recorded[0] + " (the plugin cannot name it; --controller=USER names it)"
	case id.Method == controllerid.MethodStatusWriters && id.IsController:
		cv.Reason = "its status writes advanced the parent's observedGeneration (" + annotations.Controllers + ")"
	case id.Method == controllerid.MethodStatusWriters:
		cv.Reason = "--controller " + name + " is not among the users recorded in " + annotations.Controllers
	case id.Method == controllerid.MethodManagedFields && id.IsController:
		cv.Reason = "no recorded status writer; field manager " + cv.FieldManager + " owns the parent's status.observedGeneration (managedFields)"
	}
	return cv, decideParent
}

// candidates are user names the controller may have: the users of the
// child's and the parent's trace hops, and kube-controller-manager's
// conventional service accounts.
func candidates(f Facts) []string {
	var out []string
	add := func(n string) {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, obj := range []*unstructured.Unstructured{f.Child, f.Parent} {
		t, _ := trace.Parse(obj.GetAnnotations()[annotations.Trace])
		for _, h := range t {
			add(h.User)
		}
	}
	if sa, ok := conventionalControllers[f.Parent.GetKind()]; ok {
		add("system:serviceaccount:kube-system:" + sa)
	}
	add("system:kube-controller-manager")
	return out
}

func decide(f Facts, cv *ControllerView, parent *unstructured.Unstructured, facts settle.Facts, policies []*policy.Compiled, now time.Time) decision.Decision {
	name := cv.User
	if name == "" && len(cv.Recorded) > 0 {
		name = "controller with hash " + cv.Recorded[0]
	}
	// Any change of the desired state: the question is whether the
	// controller may change the child at all, not which field.
	newObj := f.Child.DeepCopy()
	return decision.Decide(decision.Input{
		Operation:      decision.Update,
		Child:          decision.RefOf(f.Child),
		OldObject:      f.Child,
		NewObject:      newObj,
		DesiredChanged: true,
		Parent:         parent,
		User:           &user.DefaultInfo{Name: name},
		FieldManager:   cv.FieldManager,
		Mode:           decision.ModeInputs{Namespace: f.NamespaceMode, NamespaceModesBy: f.NamespaceModesBy, Default: f.DefaultMode},
		DryRun:         true,
		Now:            now,
		Settle:         &facts,
		Confirmed:      true,
		UngatedKinds:   f.UngatedKinds,
		Policies:       policy.NewMatcher(context.Background(), policies...),
	})
}

func verdictOf(d decision.Decision, assumption string) *Verdict {
	v := &Verdict{Assumption: assumption, Result: d.Result, Category: d.Category, Reason: d.Reason, Message: d.Message,
		Approval: d.Approval, Suggested: d.Suggested, Rejection: d.Rejection,
		Consumes: d.Approval != nil && d.Approval.EffectiveMode() == approval.Once}
	for _, c := range d.Causes {
		if c.Type == decision.CauseUnblock {
			v.Unblock = append(v.Unblock, Unblock{Field: c.Field, Action: c.Message})
		}
	}
	return v
}

func modeView(d decision.Decision, f Facts) *ModeView {
	if d.Mode == "" {
		return nil
	}
	m := &ModeView{Mode: d.Mode, Source: d.ModeSource}
	switch d.ModeSource {
	case decision.ModeFromObject:
		m.Detail = "annotation " + annotations.Mode + " on the child"
	case decision.ModeFromNamespace:
		m.Detail = "annotation " + annotations.Mode + " on namespace " + f.Child.GetNamespace()
	default:
		m.Detail = "the proxy's --default-mode, assumed " + string(f.DefaultMode) + " (--default-mode=MODE says otherwise)"
		if f.NamespaceUnknown {
			m.Detail += "; the namespace could not be read, its " + annotations.Mode + " is unknown"
		}
	}
	return m
}

func approvalView(e annotations.ApprovalEntry, c approval.Child, w approval.Window) EntryView {
	v := EntryView{Entry: json.RawMessage(e.Raw)}
	a := e.Approval
	switch {
	case !e.Valid:
		v.Note = "not readable by the proxy; ignored (kept as written)"
	case !approval.MatchesApproval(a, c):
		v.Note = "for another child"
	case approval.Valid(a, w):
		v.Applies = true
		v.Note = "applies: " + string(a.EffectiveMode())
		if a.EffectiveMode() == approval.Once {
			v.Note += " (admits one write)"
		}
	case approval.Stale(a, w):
		v.Note = "for an earlier generation: valid only if the parent's spec has not changed since (the proxy knows), else pruned"
	default:
		v.Note = "for a later generation than the parent's"
	}
	return v
}

func rejectionView(raw json.RawMessage, r annotations.Rejection, c approval.Child, w approval.Window) EntryView {
	v := EntryView{Entry: raw}
	switch {
	case !approval.MatchesRejection(r, c):
		v.Note = "for another child"
	case approval.ActiveRejection(r, w):
		v.Applies = true
		v.Note = "applies: " + r.Reason
	default:
		v.Note = "for another generation of the parent"
	}
	return v
}
