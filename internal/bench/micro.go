package main

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// MicroResult is one line of `go test -bench` output.
type MicroResult struct {
	Pkg     string
	Name    string
	N       int64
	Metrics map[string]float64 // unit -> value: ns/op, B/op, allocs/op, MB/s, custom
	Units   []string           // in output order
}

// parseMicro reads `go test -bench -benchmem` output (several packages,
// possibly several counts per benchmark; the median is kept).
func parseMicro(r io.Reader) []MicroResult {
	var (
		pkg   string
		order []string
		byKey = map[string][]MicroResult{}
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(rest)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		res := MicroResult{Pkg: pkg, Name: trimProcs(f[0]), N: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res.Metrics[f[i+1]] = v
			res.Units = append(res.Units, f[i+1])
		}
		key := pkg + " " + res.Name
		if _, seen := byKey[key]; !seen {
			order = append(order, key)
		}
		byKey[key] = append(byKey[key], res)
	}
	out := make([]MicroResult, 0, len(order))
	for _, key := range order {
		runs := byKey[key]
		med := runs[0]
		med.Metrics = map[string]float64{}
		for _, u := range runs[0].Units {
			vals := make([]float64, 0, len(runs))
			for _, r := range runs {
				vals = append(vals, r.Metrics[u])
			}
			med.Metrics[u] = median(vals)
		}
		out = append(out, med)
	}
	return out
}

// trimProcs drops the -GOMAXPROCS suffix go test appends.
func trimProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
