package v1alpha1

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestAllowancePolicyCRDMatchesTypes: the CRD's schema has exactly the
// fields of the Go types, of the same types, required where the Go field
// is not omitempty, so that what the proxy reads is what kube-apiserver
// validates and stores.
func TestAllowancePolicyCRDMatchesTypes(t *testing.T) {
	raw, err := os.ReadFile("../../manifests/base/crds/kausal.io_allowancepolicies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != AllowanceGroup || crd.Spec.Names.Kind != AllowancePolicyKind ||
		crd.Spec.Names.Plural != AllowancePoliciesGVR.Resource || crd.Spec.Scope != apiextensionsv1.ClusterScoped ||
		crd.Name != AllowancePoliciesGVR.Resource+"."+AllowanceGroup {
		t.Errorf("CRD names %s %s/%s %s %s, want %s %s/%s cluster-scoped", crd.Name, crd.Spec.Group, crd.Spec.Names.Kind,
			crd.Spec.Names.Plural, crd.Spec.Scope, AllowancePoliciesGVR, AllowanceGroup, AllowancePolicyKind)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != AllowancePolicyGroupVersion.Version ||
		crd.Spec.Versions[0].Subresources == nil || crd.Spec.Versions[0].Subresources.Status == nil {
		t.Fatalf("CRD versions %+v, want one, %s, with the status subresource", crd.Spec.Versions, AllowancePolicyGroupVersion.Version)
	}
	compareSchema(t, "AllowancePolicy", reflect.TypeOf(AllowancePolicy{}), *crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
}

var timeType = reflect.TypeOf(metav1.Time{})

func compareSchema(t *testing.T, at string, typ reflect.Type, s apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	switch {
	case typ == timeType:
		if s.Type != "string" {
			t.Errorf("%s: a time is a string in the schema, not %q", at, s.Type)
		}
	case typ.Kind() == reflect.Struct:
		if s.Type != "object" {
			t.Errorf("%s: %s is an object, not %q", at, typ, s.Type)
			return
		}
		fields, required := jsonFields(typ)
		var want, got []string
		for name := range fields {
			want = append(want, name)
		}
		for name := range s.Properties {
			got = append(got, name)
		}
		sort.Strings(want)
		sort.Strings(got)
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s: the schema's properties %v, the type's fields %v", at, got, want)
		}
		req := append([]string(nil), s.Required...)
		sort.Strings(req)
		if len(req) == 0 {
			req = nil
		}
		if !reflect.DeepEqual(req, required) {
			t.Errorf("%s: the schema requires %v, the type's fields without omitempty are %v", at, req, required)
		}
		for name, ft := range fields {
			if name == "metadata" {
				continue
			}
			if p, ok := s.Properties[name]; ok {
				compareSchema(t, at+"."+name, ft, p)
			}
		}
	case typ.Kind() == reflect.Slice:
		if s.Type != "array" || s.Items == nil || s.Items.Schema == nil {
			t.Errorf("%s: a slice is an array with items, not %q", at, s.Type)
			return
		}
		compareSchema(t, at+"[]", typ.Elem(), *s.Items.Schema)
	case typ.Kind() == reflect.String:
		if s.Type != "string" {
			t.Errorf("%s: a string, not %q", at, s.Type)
		}
	case typ.Kind() == reflect.Bool:
		if s.Type != "boolean" {
			t.Errorf("%s: a bool is a boolean, not %q", at, s.Type)
		}
	case typ.Kind() == reflect.Int64 || typ.Kind() == reflect.Int32:
		if s.Type != "integer" {
			t.Errorf("%s: an integer, not %q", at, s.Type)
		}
	default:
		t.Errorf("%s: no schema check for %s", at, typ)
	}
}

// jsonFields are the JSON fields of a struct, inline ones flattened, and
// the sorted names of those without omitempty.
func jsonFields(typ reflect.Type) (map[string]reflect.Type, []string) {
	fields := map[string]reflect.Type{}
	var required []string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			inner, req := jsonFields(f.Type)
			for k, v := range inner {
				fields[k] = v
			}
			required = append(required, req...)
			continue
		}
		fields[name] = f.Type
		if !strings.Contains(opts, "omitempty") {
			required = append(required, name)
		}
	}
	sort.Strings(required)
	return fields, required
}
