package v1alpha1

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The CRDs are written by hand (their descriptions, defaults and CEL rules
// are for people), so this test is what keeps them and the Go types one
// shape: every field of the schema is a field of the type with the same JSON
// name and type, and the other way round; a field is required in the schema
// exactly when the type does not omit it when empty.
func TestCRDsMatchTypes(t *testing.T) {
	tests := []struct {
		file     string
		group    string
		obj      any
		list     any
		resource string
		scope    apiextensionsv1.ResourceScope
	}{
		{"kausality.io_approvalpolicies.yaml", Group, ApprovalPolicy{}, ApprovalPolicyList{}, ApprovalPoliciesGVR.Resource, apiextensionsv1.NamespaceScoped},
		{"kausality.io_clusterapprovalpolicies.yaml", Group, ClusterApprovalPolicy{}, ClusterApprovalPolicyList{}, ClusterApprovalPoliciesGVR.Resource, apiextensionsv1.ClusterScoped},
		{"kausal.io_allowancepolicies.yaml", AllowanceGroup, AllowancePolicy{}, AllowancePolicyList{}, AllowancePoliciesGVR.Resource, apiextensionsv1.ClusterScoped},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			crd := readCRD(t, tt.file)
			kind := reflect.TypeOf(tt.obj).Name()
			if crd.Spec.Group != tt.group || crd.Spec.Names.Kind != kind || crd.Spec.Names.Plural != tt.resource ||
				crd.Spec.Names.ListKind != reflect.TypeOf(tt.list).Name() || crd.Spec.Scope != tt.scope {
				t.Fatalf("CRD names %s/%s %s (list %s, %s), want %s/%s %s (list %s, %s)",
					crd.Spec.Group, crd.Spec.Names.Plural, crd.Spec.Names.Kind, crd.Spec.Names.ListKind, crd.Spec.Scope,
					tt.group, tt.resource, kind, reflect.TypeOf(tt.list).Name(), tt.scope)
			}
			if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != Version {
				t.Fatalf("CRD versions %v, want only %s", crd.Spec.Versions, Version)
			}
			schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
			for _, problem := range compareSchema("", reflect.TypeOf(tt.obj), schema) {
				t.Error(problem)
			}
		})
	}
}

// TestCompareSchemaCatchesDrift: the comparison itself finds a field that
// only one side has, a type mismatch and a required flag out of step, so a
// passing TestCRDsMatchTypes means something.
func TestCompareSchemaCatchesDrift(t *testing.T) {
	type sample struct {
		Name  string `json:"name"`
		Count int64  `json:"count,omitempty"`
		Extra bool   `json:"extra,omitempty"`
	}
	schema := &apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"count"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name":  {Type: "integer"},
			"count": {Type: "integer"},
			"other": {Type: "string"},
		},
	}
	got := compareSchema("", reflect.TypeOf(sample{}), schema)
	want := []string{
		".count: required in the CRD but omitted when empty in Go",
		".extra: in the Go type, not in the CRD",
		".name: CRD type integer, Go type string",
		".name: required in Go (no omitempty) but optional in the CRD",
		".other: in the CRD, not in the Go type",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func readCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "base", "crds", file))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

var (
	timeType     = reflect.TypeOf(metav1.Time{})
	typeMetaType = reflect.TypeOf(metav1.TypeMeta{})
	objMetaType  = reflect.TypeOf(metav1.ObjectMeta{})
)

// compareSchema returns the differences between the Go type t and the
// schema s at path.
func compareSchema(path string, t reflect.Type, s *apiextensionsv1.JSONSchemaProps) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var problems []string
	want := openAPIType(t)
	if s.Type != want {
		return append(problems, path+": CRD type "+s.Type+", Go type "+want)
	}
	switch want {
	case "array":
		if s.Items == nil || s.Items.Schema == nil {
			return append(problems, path+": CRD array without items")
		}
		return compareSchema(path+"[]", t.Elem(), s.Items.Schema)
	case "object":
		if t == objMetaType || t.Kind() == reflect.Map {
			return nil
		}
	default:
		return nil
	}
	goFields := map[string]bool{}
	for name, field := range jsonFields(t) {
		goFields[name] = true
		fp := path + "." + name
		prop, ok := s.Properties[name]
		if !ok {
			problems = append(problems, fp+": in the Go type, not in the CRD")
			continue
		}
		required := slices.Contains(s.Required, name)
		switch {
		case required && field.omitEmpty:
			problems = append(problems, fp+": required in the CRD but omitted when empty in Go")
		case !required && !field.omitEmpty && name != "apiVersion" && name != "kind":
			problems = append(problems, fp+": required in Go (no omitempty) but optional in the CRD")
		}
		problems = append(problems, compareSchema(fp, field.typ, &prop)...)
	}
	for name := range s.Properties {
		if !goFields[name] {
			problems = append(problems, path+"."+name+": in the CRD, not in the Go type")
		}
	}
	return problems
}

type jsonField struct {
	typ       reflect.Type
	omitEmpty bool
}

// jsonFields are the fields encoding/json writes for t, inlined ones
// flattened.
func jsonFields(t reflect.Type) map[string]jsonField {
	fields := map[string]jsonField{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Type == typeMetaType {
			fields["apiVersion"] = jsonField{typ: reflect.TypeFor[string]()}
			fields["kind"] = jsonField{typ: reflect.TypeFor[string]()}
			continue
		}
		if name == "" && f.Anonymous {
			for n, inner := range jsonFields(f.Type) {
				fields[n] = inner
			}
			continue
		}
		omit := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		fields[name] = jsonField{typ: f.Type, omitEmpty: omit}
	}
	return fields
}

func openAPIType(t reflect.Type) string {
	if t == timeType {
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Slice:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	default:
		return t.Kind().String()
	}
}
