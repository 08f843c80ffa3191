package patch

import "testing"

func TestNamesVersion(t *testing.T) {
	for rv, want := range map[string]bool{"": false, "0": false, "00": false, "1": true, "100": true, "abc": true, "-1": true} {
		if got := NamesVersion(rv); got != want {
			t.Errorf("NamesVersion(%q) = %v, want %v", rv, got, want)
		}
	}
}
