package patch

import "testing"

func TestNamesVersion(t *testing.T) {
	for rv, want := range map[string]bool{"": false, "0": false, "00": false, "1": true, "100": true, "abc": true, "-1": true} {
		if got := NamesVersion(rv); got != want {
			t.Errorf("NamesVersion(%q) = %v, want %v", rv, got, want)
		}
	}
}

func TestSameVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"7", "7", true}, {"007", "7", true}, {"7", "8", false}, {"", "", true}, {"", "0", false}, {"abc", "abc", true}, {"abc", "7", false},
	} {
		if got := SameVersion(tc.a, tc.b); got != tc.want {
			t.Errorf("SameVersion(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
