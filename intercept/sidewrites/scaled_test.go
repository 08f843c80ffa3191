package sidewrites

import (
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// TestRestorePatch: what was written ahead of a failed write is put back,
// but a key written since is left as it is.
func TestRestorePatch(t *testing.T) {
	const key = "kausal.io/allowances"
	written := decision.AnnotationChanges{Set: map[string]string{key: "new"}}
	str := func(s string) *string { return &s }
	tests := []struct {
		name    string
		current map[string]string
		written decision.AnnotationChanges
		before  map[string]string
		want    map[string]*string
	}{
		{name: "set over an older value: put back", current: map[string]string{key: "new"}, written: written,
			before: map[string]string{key: "old"}, want: map[string]*string{key: str("old")}},
		{name: "set where there was none: removed", current: map[string]string{key: "new"}, written: written,
			want: map[string]*string{key: nil}},
		{name: "written since: left alone", current: map[string]string{key: "newer"}, written: written,
			before: map[string]string{key: "old"}, want: map[string]*string{}},
		{name: "a removal put back", current: map[string]string{}, written: decision.AnnotationChanges{Remove: []string{key}},
			before: map[string]string{key: "old"}, want: map[string]*string{key: str("old")}},
		{name: "a removal, set again since: left alone", current: map[string]string{key: "other"},
			written: decision.AnnotationChanges{Remove: []string{key}}, before: map[string]string{key: "old"}, want: map[string]*string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := restorePatch(tt.current, tt.written, tt.before)
			if len(got) != len(tt.want) {
				t.Fatalf("restorePatch = %v, want %v", got, tt.want)
			}
			for k, w := range tt.want {
				g, ok := got[k]
				if !ok || (g == nil) != (w == nil) || g != nil && *g != *w {
					t.Errorf("%s: got %v, want %v", k, g, w)
				}
			}
		})
	}
}
