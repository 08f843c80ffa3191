package reliability

import (
	"strings"
	"testing"
)

func TestParseFuzz(t *testing.T) {
	out := `fuzz ./intercept/body FuzzDecode (140000x)
fuzz: elapsed: 0s, gathering baseline coverage: 0/120 completed
fuzz: elapsed: 3s, execs: 10234 (3411/sec), new interesting: 2 (total: 122)
fuzz: elapsed: 30s, execs: 98765 (3300/sec), new interesting: 5 (total: 125)
PASS
ok  	github.com/kausality-io/kausality-proxy/intercept/body	30.2s
fuzz ./intercept:FuzzClassify (30s)
fuzz ./intercept FuzzClassify (30s)
fuzz: elapsed: 31s, execs: 5 (0/sec), new interesting: 0 (total: 7)
`
	got, err := ParseFuzz(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("targets %+v, want 2", got)
	}
	if got[0].Package != "./intercept/body" || got[0].Name != "FuzzDecode" || got[0].Execs != 98765 || got[0].Elapsed != "30s" || got[0].Budget != "140000x" {
		t.Errorf("first target %+v", got[0])
	}
	if got[1].Name != "FuzzClassify" || got[1].Execs != 5 {
		t.Errorf("second target %+v", got[1])
	}
}

func TestRenderKeepsTheIssuesSection(t *testing.T) {
	f := &Figures{Load: &Load{Controllers: 20, Watches: 200}, Faults: []Fault{{Name: "x", Outcomes: map[string]int{"accepted": 3}}}}
	first := Render(Input{Figures: f, Command: "make test-hardening"})
	if !strings.Contains(string(first), IssuesHeading+"\n\n- ") {
		t.Fatalf("no default issues section:\n%s", first)
	}
	edited := strings.Replace(string(first), "- (to be filled in)", "- the lead's entry", 1)
	second := Render(Input{Figures: f, Command: "make test-hardening", Previous: []byte(edited)})
	if !strings.Contains(string(second), "- the lead's entry") || strings.Contains(string(second), "(to be filled in)") {
		t.Fatalf("the issues section was not kept:\n%s", second)
	}
	if strings.Count(string(second), IssuesHeading) != 1 {
		t.Fatalf("the issues section appears more than once:\n%s", second)
	}
	for _, want := range []string{"| watches held", "accepted 3", "## Fuzzing"} {
		if !strings.Contains(string(second), want) {
			t.Errorf("missing %q", want)
		}
	}
}
