package allowance

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func allowanceFor(kind, mutation string, generation int64, field string) Allowance {
	return Allowance{Kind: kind, Mutation: mutation, Generation: generation, Initiator: "hans@example.com", Policy: "p",
		Trace: []Hop{{Kind: "Deployment", Name: "foo", Generation: generation, Field: field}}}
}

func TestParse(t *testing.T) {
	rs := allowanceFor("ReplicaSet", "spec.replicas", 7, "spec.replicas")
	rsJSON := `{"kind":"ReplicaSet","mutation":"spec.replicas","generation":7,"initiator":"hans@example.com","policy":"p","trace":[{"kind":"Deployment","name":"foo","generation":7,"field":"spec.replicas"}]}`
	future := `{"kind":"ReplicaSet","mutation":"spec.replicas","generation":7,"initiator":"x","policy":"p","trace":[{"kind":"D","name":"f","generation":7,"field":"spec"}],"expires":"2030-01-01T00:00:00Z"}`
	tests := []struct {
		name    string
		in      string
		want    []Allowance
		unknown int
		err     string
	}{
		{name: "empty", in: ""},
		{name: "blank", in: " \n"},
		{name: "null", in: "null"},
		{name: "one", in: "[" + rsJSON + "]", want: []Allowance{rs}},
		{name: "broken JSON is an error naming the annotation", in: `[{"kind":`, err: "kausal.io/allowances is not a JSON array of allowances"},
		{name: "not an array", in: `{"kind":"ReplicaSet"}`, err: "kausal.io/allowances is not a JSON array"},
		{name: "an entry of a later version is kept, not used", in: "[" + rsJSON + "," + future + "]", want: []Allowance{rs}, unknown: 1},
		{name: "an entry without what is needed is kept, not used", in: `[{"kind":"ReplicaSet"}, 3]`, unknown: 2},
		{name: "too long", in: "[" + strings.Repeat(" ", MaxAnnotationBytes) + "]", err: "more than"},
		{name: "too many", in: "[" + strings.Repeat("1,", MaxEntries) + "1]", err: "entries, more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "counted as no allowances") {
					t.Fatalf("Parse error = %v, want one containing %q", err, tt.err)
				}
				if len(s.Allowances) != 0 || len(s.Unknown) != 0 {
					t.Errorf("a broken annotation gave allowances: %+v", s)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(s.Allowances, tt.want) || len(s.Unknown) != tt.unknown {
				t.Errorf("Parse = %+v, %d unknown; want %+v, %d", s.Allowances, len(s.Unknown), tt.want, tt.unknown)
			}
		})
	}
}

func TestStringRoundTrip(t *testing.T) {
	in := `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":7,"initiator":"x","policy":"p","trace":[{"kind":"D","name":"f","generation":7,"field":"spec"}],"expires":"2030"}]`
	s, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	s = s.Add(allowanceFor("ReplicaSet", "spec.template", 8, "spec.template"), allowanceFor("ReplicaSet", "create", 8, "spec.template"))
	out, err := s.String()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Allowances) != 2 || len(back.Unknown) != 1 || string(back.Unknown[0]) != string(s.Unknown[0]) {
		t.Fatalf("round trip lost entries: %s", out)
	}
	// Sorted by trace, then generation, policy, mutation: create before spec.template.
	if back.Allowances[0].Mutation != "create" || back.Allowances[1].Mutation != "spec.template" {
		t.Errorf("not sorted: %s", out)
	}
	if !strings.HasSuffix(out, `"expires":"2030"}]`) {
		t.Errorf("the unknown entry is not kept verbatim at the end: %s", out)
	}
	if empty, err := (Set{}).String(); empty != "" || err != nil {
		t.Errorf("empty set = %q, %v", empty, err)
	}
}

func TestStringBounds(t *testing.T) {
	var s Set
	for i := 0; i <= MaxEntries; i++ {
		s.Allowances = append(s.Allowances, allowanceFor("ReplicaSet", "spec.x"+strings.Repeat("y", i), 1, "spec"))
	}
	if _, err := s.String(); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too many entries: err = %v", err)
	}
	big := Set{Allowances: []Allowance{allowanceFor("ReplicaSet", "spec.replicas", 1, strings.Repeat("f", MaxAnnotationBytes))}}
	if _, err := big.String(); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too long: err = %v", err)
	}
}

func TestAdd(t *testing.T) {
	g5 := allowanceFor("ReplicaSet", "spec.replicas", 5, "spec.replicas")
	g6 := allowanceFor("ReplicaSet", "spec.replicas", 6, "spec.replicas")
	other := allowanceFor("ReplicaSet", "create", 6, "spec.template")
	tests := []struct {
		name string
		have []Allowance
		add  []Allowance
		want []Allowance
	}{
		{"into nothing", nil, []Allowance{g5}, []Allowance{g5}},
		{"a newer generation of the same grant replaces it", []Allowance{g5}, []Allowance{g6}, []Allowance{g6}},
		{"an older one does not", []Allowance{g6}, []Allowance{g5}, []Allowance{g6}},
		{"another grant is added", []Allowance{g5}, []Allowance{other}, []Allowance{g5, other}},
	}
	for _, tt := range tests {
		got := Set{Allowances: tt.have}.Add(tt.add...)
		if !reflect.DeepEqual(got.Allowances, tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.name, got.Allowances, tt.want)
		}
	}
}
