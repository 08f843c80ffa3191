package allowance

import (
	"reflect"
	"testing"
)

func TestParsePath(t *testing.T) {
	tests := []struct {
		in      string
		want    string // rendered back; "" when it must not parse
		segs    int
		wantErr bool
	}{
		{in: "spec.replicas", want: "spec.replicas", segs: 2},
		{in: "spec.template.spec.containers[0].image", want: "spec.template.spec.containers[0].image", segs: 6},
		{in: "spec.template.spec.containers[*].image", want: "spec.template.spec.containers[*].image", segs: 6},
		{in: "metadata.annotations[jira]", want: "metadata.annotations.jira", segs: 3},
		{in: "metadata.annotations[example.com/ticket]", want: "metadata.annotations[example.com/ticket]", segs: 3},
		{in: "spec.selector.matchLabels[app.kubernetes.io/name]", want: "spec.selector.matchLabels[app.kubernetes.io/name]", segs: 4},
		{in: "create", want: "create", segs: 1},
		{in: "", wantErr: true},
		{in: ".spec", wantErr: true},
		{in: "spec.", wantErr: true},
		{in: "spec..replicas", want: "spec.replicas", segs: 2},
		{in: "spec[0", wantErr: true},
		{in: "spec]", wantErr: true},
		{in: "spec[]", wantErr: true},
		{in: "spec[0]x", wantErr: true},
	}
	for _, tt := range tests {
		segs, err := parsePath(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parsePath(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if got := render(segs); got != tt.want || len(segs) != tt.segs {
			t.Errorf("parsePath(%q) = %q (%d segments), want %q (%d)", tt.in, got, len(segs), tt.want, tt.segs)
		}
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"spec.replicas", "spec.replicas", true},
		{"spec.template", "spec.template.spec.containers[0].image", true},
		{"spec.template.spec.containers[*].image", "spec.template.spec.containers[3].image", true},
		{"spec.template.spec.containers[*].image", "spec.template.spec.containers[3].env[0].value", false},
		{"spec.template.spec.containers[1].image", "spec.template.spec.containers[0].image", false},
		// Adding a whole container is more than changing an image.
		{"spec.template.spec.containers[*].image", "spec.template.spec.containers[1]", false},
		{"spec.replicas", "spec.template.spec.replicas", false},
		{"spec.replicas", "spec", false},
		{"metadata.annotations[jira]", "metadata.annotations.jira", true},
		{"spec[", "spec", false},
	}
	for _, tt := range tests {
		if got := Covers(tt.pattern, tt.path); got != tt.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}

func TestChangedPaths(t *testing.T) {
	dep := func(replicas any, images ...string) map[string]any {
		var cs []any
		for i, img := range images {
			cs = append(cs, map[string]any{"name": "c" + string(rune('0'+i)), "image": img})
		}
		return map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "web", "annotations": map[string]any{"a": "b"}},
			"spec":     map[string]any{"replicas": replicas, "template": map[string]any{"spec": map[string]any{"containers": cs}}},
			"status":   map[string]any{"replicas": int64(1)},
		}
	}
	withMeta := dep(int64(1), "nginx:1")
	withMeta["metadata"] = map[string]any{"name": "web", "labels": map[string]any{"x": "y"}}
	withMeta["status"] = map[string]any{"replicas": int64(7)}
	tests := []struct {
		name     string
		old, new map[string]any
		want     []string
	}{
		{"no change", dep(int64(1), "nginx:1"), dep(int64(1), "nginx:1"), nil},
		{"metadata and status are not desired state", dep(int64(1), "nginx:1"), withMeta, nil},
		{"numbers compare by value", dep(int64(3), "nginx:1"), dep(float64(3), "nginx:1"), nil},
		{"scale", dep(int64(1), "nginx:1"), dep(int64(3), "nginx:1"), []string{"spec.replicas"}},
		{"image of the second container, with its index", dep(int64(1), "a", "b"), dep(int64(1), "a", "c"),
			[]string{"spec.template.spec.containers[1].image"}},
		{"a container added is named by its leaves", dep(int64(1), "a"), dep(int64(1), "a", "b"),
			[]string{"spec.template.spec.containers[1].image", "spec.template.spec.containers[1].name"}},
		{"create names every leaf", nil, map[string]any{"spec": map[string]any{"replicas": int64(1), "paused": false}},
			[]string{"spec.paused", "spec.replicas"}},
		{"delete names every leaf", map[string]any{"data": map[string]any{"k": "v"}}, nil, []string{"data.k"}},
		{"spec-less kinds: data", map[string]any{"data": map[string]any{"k": "v"}}, map[string]any{"data": map[string]any{"k": "w"}}, []string{"data.k"}},
		{"an empty map appears", map[string]any{"spec": map[string]any{}}, map[string]any{"spec": map[string]any{"selector": map[string]any{}}},
			[]string{"spec.selector"}},
		{"an empty list appears", map[string]any{"spec": map[string]any{}}, map[string]any{"spec": map[string]any{"ports": []any{}}},
			[]string{"spec.ports"}},
		{"a type changes", map[string]any{"spec": map[string]any{"x": "1"}}, map[string]any{"spec": map[string]any{"x": map[string]any{"y": "1"}}},
			[]string{"spec.x"}},
		{"keys that are no plain names are bracketed", map[string]any{"spec": map[string]any{"selector": map[string]any{"app.kubernetes.io/name": "a"}}},
			map[string]any{"spec": map[string]any{"selector": map[string]any{"app.kubernetes.io/name": "b"}}},
			[]string{"spec.selector[app.kubernetes.io/name]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ChangedPaths(tt.old, tt.new)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ChangedPaths = %q, want %q", got, tt.want)
			}
			// A changed path is read back as itself: policies and
			// allowances name exactly the fields the diff reports.
			for _, p := range got {
				if !Covers(p, p) {
					t.Errorf("changed path %q does not read back", p)
				}
			}
		})
	}
}

func TestLookup(t *testing.T) {
	obj := map[string]any{"metadata": map[string]any{"annotations": map[string]any{"jira": "INFRA-1", "example.com/n": "x"}},
		"spec": map[string]any{"replicas": int64(3), "list": []any{"a"}}}
	tests := []struct {
		path string
		want string
		ok   bool
	}{
		{"metadata.annotations[jira]", "INFRA-1", true},
		{"metadata.annotations[example.com/n]", "x", true},
		{"spec.replicas", "3", true},
		{"spec.list[0]", "a", true},
		{"spec.list[1]", "", false},
		{"spec.missing", "", false},
		{"spec.replicas.x", "", false},
	}
	for _, tt := range tests {
		segs, err := parsePath(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := lookup(obj, segs); got != tt.want || ok != tt.ok {
			t.Errorf("lookup(%q) = %q, %v; want %q, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}
