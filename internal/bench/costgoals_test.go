package main

import (
	"strings"
	"testing"
	"time"
)

func TestCostGoals(t *testing.T) {
	row := func(section, name string, kind goalKind, onDirect, onBare, onKausality float64, use *UpstreamUse) Row {
		r := Row{Section: section, Name: name, Kind: kind, Upstream: use}
		r.S[direct].P50, r.S[bare].P50, r.S[kausality].P50 = onDirect, onBare, onKausality
		return r
	}
	once := &UpstreamUse{Calls: 10, Forwarded: 10}
	withGet := &UpstreamUse{Calls: 10, Forwarded: 10, Own: map[string]int64{"get replicasets": 10}}
	withReview := &UpstreamUse{Calls: 100, Forwarded: 100, Own: map[string]int64{"create subjectaccessreviews": 1, "watch replicasets": 1}}
	load := func(title string, bareCPU, kausalityCPU time.Duration) Load {
		l := Load{Name: "merge PATCH, " + title}
		l.Requests[bare], l.Requests[kausality] = 1000, 1000
		l.CPU[bare], l.CPU[kausality] = bareCPU*time.Millisecond, kausalityCPU*time.Millisecond
		return l
	}
	res := &Results{
		Rows: []Row{
			row("Reads", "GET", goalRead, 1, 2, 2.02, nil),
			row(scExpected.title, "PATCH merge-patch", goalInterceptedWrite, 3, 4, 4.3, once),
			row(scExpected.title, "UPDATE ReplicaSet (JSON)", goalInterceptedWrite, 3, 4, 4.8, once),
			row(scExpected.title, "PATCH json-patch", goalInterceptedWrite, 3, 4, 4.2, withReview),
			row(scOrigin.title, "UPDATE ReplicaSet (JSON)", goalInterceptedWrite, 3, 4, 8, withGet),
			row(scDrift.title, driftConfirmedRowTitle, goalNone, 3, 4, 5.9, nil),
			row(scDrift.title, driftFloorRowTitle, goalNone, 5.4, 7.2, 6, nil),
		},
		Loads: []Load{load(scExpected.title, 500, 700), load(scPass.title, 500, 600)},
	}
	want := map[string]string{
		"reads ≤ 1.05× bare p50":                                                             "met",
		"Expected writes ≤ 1.10× bare p50":                                                   "missed worst 1.20× (UPDATE ReplicaSet (JSON))",
		"CPU of an Expected write ≤ 1.5× bare":                                               "met",
		"CPU of a pass-through write ≤ 1.1× bare":                                            "missed",
		"Expected and NewOrigin writes: one forwarded request (reviews of the caller aside)": "missed 3 of 4 rows",
		"drift path with confirmation ≤ 2× direct p50":                                       "met 1.97× (UPDATE ReplicaSet (JSON)); a dry run and the write, one after the other: 1.80× direct, 2.40× through the bare proxy; kausality-proxy 0.83× that",
	}
	got := costGoals(res)
	if len(got) != len(want) {
		t.Fatalf("%d goals, want %d: %+v", len(got), len(want), got)
	}
	for _, g := range got {
		w, ok := want[g.goal]
		if !ok {
			t.Errorf("unexpected goal %q", g.goal)
			continue
		}
		if g.met == nil {
			t.Errorf("%s: not judged", g.goal)
			continue
		}
		verdict := "met"
		if !*g.met {
			verdict = "missed"
		}
		wantVerdict, wantMeasured, _ := strings.Cut(w, " ")
		if verdict != wantVerdict || !strings.HasPrefix(g.measured, wantMeasured) {
			t.Errorf("%s: %s (%s), want %s (%s…)", g.goal, verdict, g.measured, wantVerdict, wantMeasured)
		}
	}

	empty := costGoals(&Results{})
	for _, g := range empty {
		if g.met != nil {
			t.Errorf("%s judged on a run that measured nothing: %s", g.goal, g.measured)
		}
	}
}
