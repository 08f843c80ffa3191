package intercept_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// A write enters each file of this package once: serve.go has decide.go
// decide it and act.go act on it; decide.go has facts.go gather the
// write's own facts once and keeps the loop and every fetch of a later
// round, and what a PATCH or a /scale write makes of an object read live
// is computed by the pure patch package, not by facts.go again; facts.go
// never calls back. This is read from the source, so that a fetcher moved
// back beside the gathering, or a second gathering from serve.go, fails
// here and not only in a review.
func TestAWriteEntersEachFileOnce(t *testing.T) {
	decls := declaredFuncs(t)
	tests := []struct {
		name string
		// from is where the walk starts; it follows calls within from's
		// file and lists the calls that leave it.
		from string
		// leaves are the only functions of other files of this package
		// the walk may call, as "file:function"; reaches, if set, must be
		// called, so that a walk that lost its way does not pass.
		leaves  []string
		reaches string
		// passes are functions of from's own file the walk must go
		// through, so that the case covers the writes it names.
		passes []string
	}{
		{
			name: "one write is decided by decide.go and acted on by act.go",
			from: "serveOne",
			leaves: []string{"decide.go:decideOne", "decide.go:decideAgain", "act.go:act",
				"failures.go:fail", "log.go:recordDecision"},
			reaches: "decide.go:decideOne",
		},
		{
			name:    "decide.go gathers once through facts.go and fetches every later fact itself",
			from:    "decideOne",
			leaves:  []string{"facts.go:gatherOne", "failures.go:unresolvable"},
			reaches: "facts.go:gatherOne",
			passes:  []string{"decideOnFacts", "refetch"},
		},
		{
			name:   "a later round of a PATCH or a /scale write reads the object live and applies the write to it without facts.go",
			from:   "refetch",
			leaves: []string{"failures.go:unresolvable"},
			passes: []string{"fetch", "liveChild", "serverResultOf", "withLiveChild"},
		},
		{
			name:   "deciding again after the state moved stays in decide.go",
			from:   "decideAgain",
			leaves: []string{"failures.go:unresolvable"},
			passes: []string{"refetch", "decideOnFacts"},
		},
		{
			name: "a deletecollection is gathered by facts.go, listed by collection.go and acted on by act.go; " +
				"an object whose parent moved under its reservation is decided again by decide.go, as one write is",
			from: "serveCollection",
			leaves: []string{"facts.go:gatherCollectionOne", "collection.go:decideCollection", "decide.go:decideAgain",
				"act.go:actOnCollection", "failures.go:fail"},
			reaches: "collection.go:decideCollection",
		},
		{
			name:    "each object of a deletecollection is decided by decide.go once, as the DELETE of it",
			from:    "decideCollection",
			leaves:  []string{"decide.go:decideMember", "failures.go:unresolvable"},
			reaches: "decide.go:decideMember",
			passes:  []string{"listCollection", "memberFacts", "add"},
		},
		{
			name:   "an object of a deletecollection is decided under its parent through the loop of one write",
			from:   "decideMember",
			leaves: []string{"failures.go:unresolvable"},
			passes: []string{"parentOf", "parentFactsOf", "decideOnFacts", "recall", "remember"},
		},
		{
			name: "acting on a deletecollection neither decides again nor goes back to collection.go: " +
				"the verdicts are combined by the pure decision package",
			from: "actOnCollection",
			leaves: []string{"failures.go:fail", "failures.go:reservationError", "failures.go:stillMoving",
				"failures.go:unresolvable", "log.go:recordDecision"},
			passes: []string{"reserveCollection", "forwardCollection", "refuseCollection", "pinnedCollection"},
		},
		{
			name:   "gathering never calls back into decide.go; a /scale write's replicas path is read with it",
			from:   "gatherOne",
			leaves: []string{"failures.go:unresolvable", "failures.go:resourceNotFound"},
			passes: []string{"withEffectiveObject", "patchedMetadata", "specReplicasPath"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls, walked := callsLeaving(decls, tt.from)
			for _, fn := range tt.passes {
				if !walked[fn] {
					t.Errorf("%s does not go through %s: the case no longer covers the walk it names", tt.from, fn)
				}
			}
			for _, call := range calls {
				if !slices.Contains(tt.leaves, call) {
					t.Errorf("%s reaches %s, a second way into that file", tt.from, call)
				}
			}
			if tt.reaches != "" && !slices.Contains(calls, tt.reaches) {
				t.Errorf("%s does not reach %s (it reaches %q): the walk lost its way", tt.from, tt.reaches, calls)
			}
		})
	}
}

type funcDecl struct {
	file  string
	calls []string
}

// declaredFuncs are this package's functions and methods by name, with
// the names each calls. Methods are known by name alone: a name several
// types declare is left out, as a call the walk cannot place.
func declaredFuncs(t *testing.T) map[string]funcDecl {
	t.Helper()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	decls := map[string]funcDecl{}
	ambiguous := map[string]bool{}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if _, twice := decls[fn.Name.Name]; twice {
				ambiguous[fn.Name.Name] = true
			}
			decls[fn.Name.Name] = funcDecl{file: path, calls: callsIn(fn.Body)}
		}
	}
	for name := range ambiguous {
		delete(decls, name)
	}
	return decls
}

func callsIn(body *ast.BlockStmt) []string {
	var calls []string
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch fun := call.Fun.(type) {
		case *ast.Ident:
			calls = append(calls, fun.Name)
		case *ast.SelectorExpr:
			calls = append(calls, fun.Sel.Name)
		}
		return true
	})
	return calls
}

// callsLeaving follows the calls from the function from within its file
// and returns, as "file:function", those to other files of this package,
// and the functions of from's file it went through.
func callsLeaving(decls map[string]funcDecl, from string) ([]string, map[string]bool) {
	home := decls[from].file
	seen := map[string]bool{from: true}
	left := map[string]bool{}
	queue := []string{from}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		for _, callee := range decls[name].calls {
			d, ok := decls[callee]
			switch {
			case !ok || seen[callee]:
			case d.file != home:
				left[d.file+":"+callee] = true
			default:
				seen[callee] = true
				queue = append(queue, callee)
			}
		}
	}
	out := make([]string, 0, len(left))
	for call := range left {
		out = append(out, call)
	}
	sort.Strings(out)
	return out, seen
}

// A write visits at most eight files of this package: the two it comes in
// through (interceptor.go, classify.go) and every file its serving can
// reach, however many rounds it takes. failures.go is not counted: it
// answers a write in place of the steps it could not take.
func TestAWriteVisitsAtMostEightFiles(t *testing.T) {
	decls := declaredFuncs(t)
	for _, serve := range []string{"serveOne", "serveCollection"} {
		files := filesReached(decls, serve)
		files["interceptor.go"], files["classify.go"] = true, true
		delete(files, "failures.go")
		if len(files) > 8 {
			t.Errorf("%s visits %d files: %v", serve, len(files), slices.Sorted(maps.Keys(files)))
		}
	}
}

// filesReached are the files of this package that calls from the
// function from can reach, in any number of steps.
func filesReached(decls map[string]funcDecl, from string) map[string]bool {
	seen := map[string]bool{from: true}
	files := map[string]bool{}
	queue := []string{from}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		files[decls[name].file] = true
		for _, callee := range decls[name].calls {
			if _, ok := decls[callee]; ok && !seen[callee] {
				seen[callee] = true
				queue = append(queue, callee)
			}
		}
	}
	return files
}
