package notify

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// Redacted replaces every value of a Secret in a report.
const Redacted = desired.Redacted

// lastApplied is where kubectl apply keeps the whole object it applied, the
// values of a Secret included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// redactSecrets makes a report about a Secret carry none of its values:
// webhook receivers (chat, ticket systems, logs) are not where Secrets
// belong, and whoever reads them may not read the Secret. The keys stay,
// so that the report still says what drifted. The objects of sp are
// replaced by redacted copies, never changed in place: they belong to the
// write path (and may be the informer cache's). It runs before the id is
// computed, so that the id, a hash of the changes, is no guessing oracle
// for the values either.
func redactSecrets(sp *v1alpha1.DriftReportSpec) {
	secret := isSecret(sp.Child.APIVersion, sp.Child.Kind)
	for _, e := range [...]*runtime.RawExtension{&sp.OldObject, &sp.NewObject} {
		if redactObject(e) {
			secret = true
		}
	}
	if secret {
		sp.Changes = redactChanges(sp.Changes)
	}
}

func isSecret(apiVersion, kind string) bool { return apiVersion == "v1" && kind == "Secret" }

// redactObject replaces e by a redacted copy when it holds a Secret, and
// reports whether it does.
func redactObject(e *runtime.RawExtension) bool {
	switch o := e.Object.(type) {
	case nil:
	case *unstructured.Unstructured:
		if o == nil || !isSecret(o.GetAPIVersion(), o.GetKind()) {
			return false
		}
		e.Object = &unstructured.Unstructured{Object: redactSecretObject(o.Object)}
		return true
	default:
		// A typed object: its JSON is what would be sent.
		raw, err := json.Marshal(o)
		if err != nil {
			// Unsendable anyway: the report fails to serialize. Drop
			// the object rather than guess what it holds.
			*e = runtime.RawExtension{}
			return false
		}
		*e = runtime.RawExtension{Raw: raw}
	}
	if len(e.Raw) == 0 {
		return false
	}
	var obj map[string]any
	if err := json.Unmarshal(e.Raw, &obj); err != nil {
		return false // not an object: the report fails to serialize
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if !isSecret(apiVersion, kind) {
		return false
	}
	raw, err := json.Marshal(redactSecretObject(obj))
	if err != nil {
		*e = runtime.RawExtension{}
		return true
	}
	e.Raw = raw
	return true
}

// redactSecretObject returns a copy of a Secret with every value of data
// and stringData replaced by Redacted, and the last applied configuration,
// which repeats them, too. Only what it changes is copied.
func redactSecretObject(obj map[string]any) map[string]any {
	out := maps.Clone(obj)
	for _, field := range [...]string{"data", "stringData"} {
		if v, ok := obj[field]; ok && v != nil {
			out[field] = redactValues(v)
		}
	}
	md, _ := obj["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	if _, ok := ann[lastApplied]; ok {
		md, ann = maps.Clone(md), maps.Clone(ann)
		ann[lastApplied] = Redacted
		md["annotations"] = ann
		out["metadata"] = md
	}
	return out
}

// redactValues keeps the keys of a data map; anything else (the API
// server accepts only maps) is redacted whole.
func redactValues(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return Redacted
	}
	out := make(map[string]any, len(m))
	for k := range m {
		out[k] = Redacted
	}
	return out
}

// redactChanges redacts the rendered values of changes under data and
// stringData. The desired-state diff already redacts them; this keeps
// reports safe whatever built their changes. An absent value stays
// "<unset>": that a key was added or removed is no secret. changes is
// copied before it is changed: it is shared with the write path.
func redactChanges(changes []desired.Change) []desired.Change {
	var out []desired.Change
	for i, c := range changes {
		if !secretDataPath(c.Path) {
			continue
		}
		r := desired.Change{Path: c.Path, Old: redactRendered(c.Old), New: redactRendered(c.New)}
		if r == c {
			continue
		}
		if out == nil {
			out = slices.Clone(changes)
		}
		out[i] = r
	}
	if out == nil {
		return changes
	}
	return out
}

func redactRendered(s string) string {
	if s == "" || s == desired.Unset {
		return s
	}
	return Redacted
}

// secretDataPath reports whether a change path (as desired renders it:
// "data", "data.key", `data["a.b"]`) is under data or stringData.
func secretDataPath(path string) bool {
	for _, top := range [...]string{"data", "stringData"} {
		if rest, ok := strings.CutPrefix(path, top); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			return true
		}
	}
	return false
}
