package trace

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

var ts = time.Date(2026, 1, 24, 10, 30, 0, 0, time.UTC)

func deployHop() Hop {
	return Hop{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Generation: 5, User: "alice@example.com", Timestamp: ts}
}

func rsHop() Hop {
	return Hop{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9", Generation: 1,
		User: "system:serviceaccount:kube-system:deployment-controller", Timestamp: ts.Add(5 * time.Second),
		Labels: map[string]string{"ticket": "JIRA-123", "pr": "567"}}
}

func TestOrigin(t *testing.T) {
	h := deployHop()
	got := Origin(&h)
	want := `[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":5,"user":"alice@example.com","timestamp":"2026-01-24T10:30:00Z"}]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestEncodeMatchesStdlibAndRoundTrips(t *testing.T) {
	tr := Trace{deployHop(), rsHop()}
	got := tr.Encode()
	want := `[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":5,"user":"alice@example.com","timestamp":"2026-01-24T10:30:00Z"},` +
		`{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9","generation":1,"user":"system:serviceaccount:kube-system:deployment-controller","timestamp":"2026-01-24T10:30:05Z","labels":{"pr":"567","ticket":"JIRA-123"}}]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	std, _ := json.Marshal(tr)
	if string(std) != got {
		t.Errorf("differs from encoding/json:\n%s\n%s", std, got)
	}
	back, err := Parse(got)
	if err != nil || !reflect.DeepEqual(back, tr) {
		t.Errorf("round trip: %v %#v", err, back)
	}
	if (Trace{}).Encode() != "[]" {
		t.Error("empty trace must encode as []")
	}
}

func TestEscaping(t *testing.T) {
	for _, s := range []string{"plain", `q"uote`, `back\slash`, "new\nline\ttab\r", "\x01ctl", "ünï©ødé", "bad\xffutf8", "sep\u2028x\u2029", "<html>&"} {
		h := Hop{Name: s, User: s, Labels: map[string]string{s: s}, Timestamp: ts}
		got := AppendHop(nil, &h)
		var back Hop
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("%q: invalid JSON %s: %v", s, got, err)
			continue
		}
		std, _ := json.Marshal(s)
		var stdBack string
		_ = json.Unmarshal(std, &stdBack)
		if back.Name != stdBack || back.User != stdBack || back.Labels[stdBack] != stdBack {
			t.Errorf("%q: decoded %q, encoding/json gives %q", s, back.Name, stdBack)
		}
	}
}

func TestParse(t *testing.T) {
	if tr, err := Parse(""); tr != nil || err != nil {
		t.Errorf("empty: %v %v", tr, err)
	}
	pretty := "[\n  {\n    \"apiVersion\": \"example.com/v1alpha1\",\n    \"kind\": \"EKSCluster\",\n    \"name\": \"prod\",\n    \"generation\": 5,\n    \"user\": \"hans@example.com\",\n    \"timestamp\": \"2026-01-24T10:30:00Z\"\n  }\n]"
	tr, err := Parse(pretty)
	if err != nil || len(tr) != 1 || tr[0].Kind != "EKSCluster" || !tr[0].Timestamp.Equal(ts) {
		t.Errorf("pretty: %v %#v", err, tr)
	}
	if _, err := Parse("[{"); err == nil {
		t.Error("broken trace must fail")
	}
}

func TestLabels(t *testing.T) {
	got := Labels(map[string]string{
		"kausality.io/trace-ticket": "JIRA-123",
		"kausality.io/trace-":       "skipped",
		"kausality.io/trace":        "[]",
		"kausality.io/mode":         "log",
		"other/trace-x":             "no",
	})
	if want := map[string]string{"ticket": "JIRA-123"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v", got)
	}
	if Labels(map[string]string{"a": "b"}) != nil {
		t.Error("no labels must be nil")
	}
}

func TestExtend(t *testing.T) {
	d, r := deployHop(), rsHop()
	origin := Origin(&d)
	twoHops := `[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":5,"user":"alice@example.com","timestamp":"2026-01-24T10:30:00Z"},` +
		`{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9","generation":1,"user":"system:serviceaccount:kube-system:deployment-controller","timestamp":"2026-01-24T10:30:05Z","labels":{"pr":"567","ticket":"JIRA-123"}}]`
	rsOnly := Origin(&r)
	tests := []struct {
		name, parent, want string
		malformed          bool
	}{
		{name: "empty parent", parent: "", want: rsOnly},
		{name: "empty array", parent: " [] ", want: rsOnly},
		{name: "compact parent", parent: origin, want: twoHops},
		{name: "pretty parent is compacted", parent: "[\n {\"apiVersion\": \"apps/v1\", \"kind\": \"Deployment\", \"name\": \"web\", \"generation\": 5, \"user\": \"alice@example.com\", \"timestamp\": \"2026-01-24T10:30:00Z\"}\n]", want: twoHops},
		{name: "keeps unknown fields verbatim", parent: `[{"apiVersion":"v1","kind":"X","name":"x","generation":1,"user":"u","requestUID":"r","timestamp":"2026-01-24T10:30:00.123Z"}]`,
			want: `[{"apiVersion":"v1","kind":"X","name":"x","generation":1,"user":"u","requestUID":"r","timestamp":"2026-01-24T10:30:00.123Z"},` + rsOnly[1:]},
		{name: "broken JSON", parent: `[{"apiVersion":`, want: rsOnly, malformed: true},
		{name: "not an array", parent: `{"apiVersion":"v1"}`, want: rsOnly, malformed: true},
		{name: "array of scalars", parent: `[1,2]`, want: rsOnly, malformed: true},
		{name: "second element not an object", parent: `[{"a":"x,y"},"s"]`, want: rsOnly, malformed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Extend(tt.parent, &r)
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if (err != nil) != tt.malformed || (err != nil && !errors.Is(err, ErrMalformed)) {
				t.Errorf("err = %v, malformed %v", err, tt.malformed)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("invalid JSON: %s", got)
			}
		})
	}
}

var sink string

func BenchmarkOrigin(b *testing.B) {
	h := rsHop()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		sink = Origin(&h)
	}
}

func BenchmarkOriginEncodingJSON(b *testing.B) {
	h := rsHop()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		out, _ := json.Marshal([]Hop{h})
		sink = string(out)
	}
}

func BenchmarkExtend3Hops(b *testing.B) {
	d, r := deployHop(), rsHop()
	parent := Trace{d, r, r}.Encode()
	pod := Hop{APIVersion: "v1", Kind: "Pod", Name: "web-7d9-abcde", Generation: 1, User: "system:serviceaccount:kube-system:replicaset-controller", Timestamp: ts}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		sink, _ = Extend(parent, &pod)
	}
}

func BenchmarkExtend3HopsDecodeEncodeJSON(b *testing.B) {
	d, r := deployHop(), rsHop()
	parent := Trace{d, r, r}.Encode()
	pod := Hop{APIVersion: "v1", Kind: "Pod", Name: "web-7d9-abcde", Generation: 1, User: "system:serviceaccount:kube-system:replicaset-controller", Timestamp: ts}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var t Trace
		_ = json.Unmarshal([]byte(parent), &t)
		out, _ := json.Marshal(append(t, pod))
		sink = string(out)
	}
}

// A trace keeps its last MaxHops hops: the oldest give way to the new one,
// whatever their fields hold (braces and quotes in a user's name).
func TestExtendKeepsTheLastHops(t *testing.T) {
	parent := Trace{}
	for i := range MaxHops + 10 {
		parent = append(parent, Hop{APIVersion: "v1", Kind: "ConfigMap", Name: "loop", Generation: int64(i),
			User: `u"{[` + string(rune('a'+i%26)) + `\]}`, Timestamp: ts})
	}
	raw, err := json.Marshal(parent)
	if err != nil {
		t.Fatal(err)
	}
	r := rsHop()
	got, err := Extend(string(raw), &r)
	if err != nil {
		t.Fatal(err)
	}
	hops, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(hops) != MaxHops {
		t.Fatalf("%d hops, want %d", len(hops), MaxHops)
	}
	if want := append(append(Trace{}, parent[len(parent)-MaxHops+1:]...), r); !reflect.DeepEqual(hops, want) {
		t.Fatalf("kept %+v\nwant the last %d hops and the new one", hops, MaxHops-1)
	}
}
