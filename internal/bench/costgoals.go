package main

import (
	"fmt"
	"strings"
)

// The cost goals: what a write or a read may cost beyond the bare reverse
// proxy (or direct, for the drift path), from this one run.
const (
	goalReadVsBareP50      = 1.05
	goalExpectedVsBareP50  = 1.10
	goalExpectedVsBareCPU  = 1.5
	goalPassVsBareCPU      = 1.1
	goalDriftVsDirectP50   = 2.0
	driftConfirmedRowTitle = "UPDATE ReplicaSet (JSON)"
	// driftFloorRowTitle is the drift row again, with direct and the bare
	// proxy sending a dry run of the write before it.
	driftFloorRowTitle = "UPDATE ReplicaSet (JSON), after a dry run of it (kausality: once)"
)

// costGoal is one goal judged on the run.
type costGoal struct {
	goal, measured string
	// met is nil when the run has nothing to judge the goal by.
	met *bool
}

// costGoals judges the run against the cost goals.
func costGoals(res *Results) []costGoal {
	var out []costGoal
	judge := func(goal string, measured string, met bool, have bool) {
		g := costGoal{goal: goal, measured: measured}
		if have {
			g.met = &met
		} else {
			g.measured = "not measured in this run"
		}
		out = append(out, g)
	}

	worst, worstName, have := 0.0, "", false
	for _, r := range res.Rows {
		if r.Kind != goalRead {
			continue
		}
		if v := ratio(r.S[kausality].P50, r.S[bare].P50); !have || v > worst {
			worst, worstName, have = v, r.Name, true
		}
	}
	judge(fmt.Sprintf("reads ≤ %.2f× bare p50", goalReadVsBareP50), fmt.Sprintf("worst %s× (%s)", f2(worst), worstName), worst <= goalReadVsBareP50, have)

	worst, worstName, have = 0, "", false
	for _, r := range rowsOf(res, scExpected.title) {
		if v := ratio(r.S[kausality].P50, r.S[bare].P50); !have || v > worst {
			worst, worstName, have = v, r.Name, true
		}
	}
	judge(fmt.Sprintf("Expected writes ≤ %.2f× bare p50", goalExpectedVsBareP50), fmt.Sprintf("worst %s× (%s)", f2(worst), worstName), worst <= goalExpectedVsBareP50, have)

	for _, c := range []struct {
		title string
		what  string
		goal  float64
	}{
		{scExpected.title, "an Expected write", goalExpectedVsBareCPU},
		{scPass.title, "a pass-through write", goalPassVsBareCPU},
	} {
		l, ok := loadOf(res, c.title)
		v := 0.0
		if ok {
			v = ratio(l.CPUPer1000(kausality), l.CPUPer1000(bare))
		}
		measured := fmt.Sprintf("%s× (%s ms against %s ms per 1,000)", f2(v), f0(l.CPUPer1000(kausality)), f0(l.CPUPer1000(bare)))
		if lo, hi, spread := l.RoundRatios(); spread && len(l.RoundCPU[kausality]) > 1 {
			measured += fmt.Sprintf("; its %d rounds %s–%s×", len(l.RoundCPU[kausality]), f2(lo), f2(hi))
		}
		judge(fmt.Sprintf("CPU of %s ≤ %.1f× bare", c.what, c.goal), measured, v <= c.goal, ok)
	}

	var forwardedOnce, rows []string
	for _, title := range []string{scExpected.title, scOrigin.title} {
		for _, r := range rowsOf(res, title) {
			name := shortSection(title) + " " + r.Name
			rows = append(rows, name)
			if u := r.Upstream; u != nil && readsOfTheDecision(u) == 0 && u.Forwarded <= int64(u.Calls) {
				forwardedOnce = append(forwardedOnce, name)
			}
		}
	}
	measured := fmt.Sprintf("%d of %d rows", len(forwardedOnce), len(rows))
	if missing := without(rows, forwardedOnce); len(missing) > 0 {
		measured += "; more in: " + strings.Join(missing, ", ")
	}
	judge("Expected and NewOrigin writes: one forwarded request (reviews of the caller aside)", measured, len(forwardedOnce) == len(rows), len(rows) > 0)

	drift, ok := rowNamed(res, scDrift.title, driftConfirmedRowTitle)
	v := ratio(drift.S[kausality].P50, drift.S[direct].P50)
	measured = fmt.Sprintf("%s× (%s)", f2(v), driftConfirmedRowTitle)
	if floor, ok := rowNamed(res, scDrift.title, driftFloorRowTitle); ok {
		measured += fmt.Sprintf("; a dry run and the write, one after the other: %s× direct, %s× through the bare proxy; kausality-proxy %s× that",
			f2(ratio(floor.S[direct].P50, drift.S[direct].P50)), f2(ratio(floor.S[bare].P50, drift.S[direct].P50)), f2(ratio(floor.S[kausality].P50, floor.S[bare].P50)))
	}
	judge(fmt.Sprintf("drift path with confirmation ≤ %.0f× direct p50", goalDriftVsDirectP50), measured, v <= goalDriftVsDirectP50, ok)
	return out
}

func writeCostGoals(b *strings.Builder, res *Results) {
	fmt.Fprintln(b, "| goal | this run | |")
	fmt.Fprintln(b, "|---|---|---|")
	for _, g := range costGoals(res) {
		v := "–"
		if g.met != nil {
			v = "❌ missed"
			if *g.met {
				v = "✅ met"
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", g.goal, g.measured, v)
	}
}

func rowsOf(res *Results, section string) []Row {
	var out []Row
	for _, r := range res.Rows {
		if r.Section == section {
			out = append(out, r)
		}
	}
	return out
}

func rowNamed(res *Results, section, name string) (Row, bool) {
	for _, r := range rowsOf(res, section) {
		if r.Name == name {
			return r, true
		}
	}
	return Row{}, false
}

func loadOf(res *Results, title string) (Load, bool) {
	for _, l := range res.Loads {
		if strings.HasSuffix(l.Name, title) {
			return l, true
		}
	}
	return Load{}, false
}

func without(all, some []string) []string {
	var out []string
	for _, a := range all {
		found := false
		for _, s := range some {
			found = found || s == a
		}
		if !found {
			out = append(out, a)
		}
	}
	return out
}

// readsOfTheDecision are the proxy's own requests during a row but the
// TokenReviews and SubjectAccessReviews that refresh its caches of who the
// caller is and what it may do: those run once per cache lifetime
// (--authorization-cache-ttl), not once per decided write.
func readsOfTheDecision(u *UpstreamUse) int64 {
	n := u.OwnTotal()
	for _, review := range []string{"create subjectaccessreviews", "create tokenreviews"} {
		n -= u.Own[review]
	}
	return n
}
