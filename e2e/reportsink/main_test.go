package main

import (
	"strings"
	"testing"
)

func TestCompactReport(t *testing.T) {
	got, err := compactReport(strings.NewReader("{\n  \"kind\": \"DriftReport\",\n  \"spec\": {\"id\": \"ab\"}\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"kind":"DriftReport","spec":{"id":"ab"}}`+"\n" {
		t.Fatalf("got %q", got)
	}
	for _, bad := range []string{"", "[1]", "not json", `{"a":`} {
		if _, err := compactReport(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := compactReport(strings.NewReader(`{"a":"` + strings.Repeat("x", maxReport) + `"}`)); err == nil {
		t.Error("an oversized report was accepted")
	}
}
