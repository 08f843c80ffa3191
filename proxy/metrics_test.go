package proxy

import "testing"

func TestBoundedLabels(t *testing.T) {
	b := newBoundedLabels(2)
	steps := []struct {
		resource, subresource string
		admit                 bool
		want                  string
	}{
		{"pods", "", false, "other"}, // an unserved request adds nothing
		{"pods", "", true, "pods"},   // a served one does
		{"pods", "", false, "pods"},  // and then errors to it keep the label
		{"made-up-by-anyone", "", false, "other"},
		{"", "", false, ""},                  // non-resource paths share one value
		{"pods", "exec", true, "pods/exec"},  // the second admitted value
		{"pods", "exec", false, "pods/exec"}, // kept with its subresource
		{"configmaps", "", true, "other"},    // beyond the bound
		{"pods", "status", true, "other"},    // a new subresource counts too
	}
	for i, s := range steps {
		if got := b.value(s.resource, s.subresource, s.admit); got != s.want {
			t.Errorf("step %d: value(%q, %q, %v) = %q, want %q", i, s.resource, s.subresource, s.admit, got, s.want)
		}
	}
}

func TestMetricVerb(t *testing.T) {
	for verb, want := range map[string]string{
		"get": "get", "deletecollection": "deletecollection", "post": "post",
		"frobnicate": "other", "": "other",
	} {
		if got := metricVerb(verb); got != want {
			t.Errorf("metricVerb(%q) = %q, want %q", verb, got, want)
		}
	}
}
