package config

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NamedKind is a kind the config file names: its group and kind, the field
// that names it and the line of that field.
type NamedKind struct {
	Path string
	Line int
	Kind schema.GroupKind
}

// KindProblem is a kind the file names that kube-apiserver does not
// serve: an entry that matches nothing, which in enforce mode may mean a
// write refused that its author meant to let through.
type KindProblem struct {
	NamedKind
	// Suggestion is a served kind of the same group that the entry likely
	// means (spelt in another case); its Kind is "" when there is none.
	Suggestion schema.GroupKind
}

func (p KindProblem) String() string {
	out := fmt.Sprintf("line %d: %s: kube-apiserver serves no kind %s", p.Line, p.Path, describeGroupKind(p.Kind))
	if p.Suggestion.Kind != "" {
		return out + fmt.Sprintf("; kinds are case-sensitive: did you mean %q?", p.Suggestion.Kind)
	}
	return out + "; the entry matches nothing until its kind is served (is its CustomResourceDefinition installed, and are group and kind spelt as in the resource's apiVersion and kind?)"
}

func describeGroupKind(gk schema.GroupKind) string {
	if gk.Group == "" {
		return fmt.Sprintf("%q of the core group", gk.Kind)
	}
	return fmt.Sprintf("%q in group %q", gk.Kind, gk.Group)
}

// UnservedKinds returns the kinds of kinds that mapper, kube-apiserver's
// discovery, does not know. An error other than "no such kind" (discovery
// failed) is returned as it is: nothing can be said then.
func UnservedKinds(kinds []NamedKind, mapper meta.RESTMapper) ([]KindProblem, error) {
	var problems []KindProblem
	for _, k := range kinds {
		mapping, err := mapper.RESTMapping(k.Kind)
		switch {
		case err == nil:
			// Discovery maps a kind in lower case too (kubectl's
			// convenience); decisions compare kinds as spelt.
			if gvk, err := mapper.KindFor(mapping.Resource); err == nil && gvk.Kind != k.Kind.Kind {
				problems = append(problems, KindProblem{NamedKind: k, Suggestion: gvk.GroupKind()})
			}
			continue
		case !meta.IsNoMatchError(err):
			return nil, err
		}
		p := KindProblem{NamedKind: k}
		// Discovery finds a resource by its lower-case singular name,
		// which a kind spelt in another case still gives.
		// An empty group matches any group there: only a kind of the
		// entry's own group is the one it likely means.
		if gvk, err := mapper.KindFor(schema.GroupVersionResource{Group: k.Kind.Group, Resource: strings.ToLower(k.Kind.Kind)}); err == nil &&
			gvk.Group == k.Kind.Group && gvk.Kind != k.Kind.Kind {
			p.Suggestion = gvk.GroupKind()
		}
		problems = append(problems, p)
	}
	return problems, nil
}
