package deploytest

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// dockerBuild is the `go build` of the Dockerfile's build stage.
type dockerBuild struct {
	// Env are the variables the build sees: ENV of the stage, then the
	// assignments in front of `go build`.
	Env map[string]string
	// Args are the arguments after `go build`.
	Args []string
}

// flag returns the value of a flag of the go build line ("" if absent).
func (b dockerBuild) flag(name string) (string, bool) {
	for i, a := range b.Args {
		if a == name && i+1 < len(b.Args) {
			return b.Args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// instruction is one Dockerfile instruction with continuation lines joined.
type instruction struct {
	Cmd  string // upper case
	Rest string
}

func parseDockerfile(t *testing.T, data string) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, rest, _ := strings.Cut(line, " ")
		out = append(out, instruction{Cmd: strings.ToUpper(cmd), Rest: strings.TrimSpace(rest)})
	}
	for _, line := range strings.Split(data, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if c, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(c + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return out
}

// shellWords splits a command line the way sh does for the simple cases a
// Dockerfile RUN line uses: whitespace, single and double quotes.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\'', '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				t.Fatalf("unbalanced %c in %q", c, s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case ' ', '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case ';', '&', '|':
			t.Fatalf("the go build RUN line must be a single command, found %q in %q", c, s)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// dockerfileBuild finds the go build of the Dockerfile's build stage.
func dockerfileBuild(t *testing.T) (dockerBuild, []instruction) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	mustf(t, err, "reading the Dockerfile")
	ins := parseDockerfile(t, string(data))
	b := dockerBuild{Env: map[string]string{}}
	found := false
	for _, in := range ins {
		switch in.Cmd {
		case "FROM":
			b.Env = map[string]string{} // ENV is per stage
		case "ENV":
			for _, w := range shellWords(t, in.Rest) {
				if k, v, ok := strings.Cut(w, "="); ok {
					b.Env[k] = v
				}
			}
		case "RUN":
			words := shellWords(t, in.Rest)
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				words = words[1:] // --mount=...
			}
			for len(words) > 0 && assignment.MatchString(words[0]) {
				k, v, _ := strings.Cut(words[0], "=")
				b.Env[k] = v
				words = words[1:]
			}
			if len(words) >= 2 && words[0] == "go" && words[1] == "build" {
				if found {
					t.Fatal("the Dockerfile has more than one go build")
				}
				b.Args = words[2:]
				return b, ins
			}
		}
	}
	t.Fatal("no `go build` RUN line in the Dockerfile")
	return b, nil
}

// makefileBuild returns the flags of `make build`: its LDFLAGS and whether
// the recipe uses CGO_ENABLED=0 and -trimpath.
func makefileBuild(t *testing.T) (ldflags string, recipe string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	mustf(t, err, "reading the Makefile")
	m := regexp.MustCompile(`(?m)^LDFLAGS\s*:?=\s*(.*)$`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatal("no LDFLAGS in the Makefile")
	}
	r := regexp.MustCompile(`(?m)^build:.*\n\t(.*)$`).FindStringSubmatch(string(data))
	if r == nil {
		t.Fatal("no build target in the Makefile")
	}
	return strings.TrimSpace(m[1]), r[1]
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
	binaryLog  string
)

// proxyBinary builds cmd/kausality-proxy exactly as the Dockerfile does
// (its environment and go build flags, parsed from the Dockerfile; only -o
// and the target platform differ) once per test run, and returns its path.
func proxyBinary(t *testing.T) string {
	t.Helper()
	b, _ := dockerfileBuild(t)
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kausality-deploytest-bin-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "kausality-proxy")
		args := []string{"build"}
		for i := 0; i < len(b.Args); i++ {
			if b.Args[i] == "-o" {
				i++ // replaced below
				continue
			}
			args = append(args, b.Args[i])
		}
		// The package comes last; -o goes in front of it.
		pkg := args[len(args)-1]
		args = append(append(args[:len(args)-1], "-o", binaryPath), pkg)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = repoRoot(t)
		cmd.Env = os.Environ()
		for k, v := range b.Env {
			switch k {
			case "GOMODCACHE", "GOCACHE":
				continue // container paths; the host's caches are used
			case "GOOS", "GOARCH":
				continue // the image's target platform; here the host's
			}
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Env = append(cmd.Env, "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		binaryErr = cmd.Run()
		binaryLog = fmt.Sprintf("go %s\n%s", strings.Join(args, " "), out.String())
	})
	if binaryErr != nil {
		t.Fatalf("building the binary as the Dockerfile does: %v\n%s", binaryErr, binaryLog)
	}
	return binaryPath
}

// The Dockerfile builds the same static binary as `make build`, in a
// multi-stage build with the module cache mounted, into a distroless
// non-root image that holds only that binary. Docker is not needed: the
// build line is parsed from the Dockerfile and run here.
func TestDockerfileBuildsStaticBinary(t *testing.T) {
	b, ins := dockerfileBuild(t)

	// Same flags as `make build`.
	ldflags, recipe := makefileBuild(t)
	if b.Env["CGO_ENABLED"] != "0" {
		t.Errorf("the Dockerfile builds with CGO_ENABLED=%q, want 0", b.Env["CGO_ENABLED"])
	}
	if !strings.Contains(recipe, "CGO_ENABLED=0") {
		t.Errorf("make build does not use CGO_ENABLED=0: %s", recipe)
	}
	if got, _ := b.flag("-ldflags"); got != ldflags {
		t.Errorf("Dockerfile -ldflags %q, make build LDFLAGS %q: they must be the same", got, ldflags)
	}
	if !slices.Contains(b.Args, "-trimpath") || !strings.Contains(recipe, "-trimpath") {
		t.Errorf("both builds must use -trimpath (Dockerfile: %v, Makefile: %s)", b.Args, recipe)
	}
	if b.Args[len(b.Args)-1] != "./cmd/kausality-proxy" || !strings.Contains(recipe, "./cmd/kausality-proxy") {
		t.Errorf("the Dockerfile must build ./cmd/kausality-proxy like make build: %v", b.Args)
	}

	// Shape of the Dockerfile.
	var froms []string
	var user, entrypoint string
	cacheMount := false
	for _, in := range ins {
		switch in.Cmd {
		case "FROM":
			froms = append(froms, in.Rest)
		case "USER":
			user = in.Rest
		case "ENTRYPOINT":
			entrypoint = in.Rest
		case "RUN":
			if strings.Contains(in.Rest, "--mount=type=cache,target=/root/go/pkg/mod") && strings.Contains(in.Rest, "go build") {
				cacheMount = true
			}
		}
	}
	if len(froms) < 2 {
		t.Errorf("not a multi-stage build: FROM %v", froms)
	}
	if final := froms[len(froms)-1]; !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("final stage %q is not distroless/static (or scratch)", final)
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("final stage USER %q is not non-root", user)
	}
	if entrypoint != `["/kausality-proxy"]` {
		t.Errorf("ENTRYPOINT %s, want the single binary", entrypoint)
	}
	if !cacheMount || b.Env["GOMODCACHE"] != "/root/go/pkg/mod" {
		t.Errorf("the go build must mount the module cache at /root/go/pkg/mod and GOMODCACHE must point there (GOMODCACHE=%q)", b.Env["GOMODCACHE"])
	}
	ignore, err := os.ReadFile(filepath.Join(repoRoot(t), ".dockerignore"))
	mustf(t, err, ".dockerignore")
	if !regexp.MustCompile(`(?m)^bin/?$`).Match(ignore) {
		t.Error(".dockerignore must keep bin/ (hundreds of MB of control-plane binaries) out of the build context")
	}

	// The binary those flags produce is static and stripped.
	path := proxyBinary(t)
	f, err := elf.Open(path)
	mustf(t, err, "opening the binary as ELF")
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary has a PT_INTERP program header: it needs a dynamic loader")
		}
		if p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a PT_DYNAMIC program header")
		}
	}
	libs, err := f.ImportedLibraries()
	mustf(t, err, "reading DT_NEEDED")
	if len(libs) > 0 {
		t.Errorf("the binary needs shared libraries (DT_NEEDED): %v", libs)
	}
	if f.Section(".interp") != nil || f.Section(".dynamic") != nil {
		t.Error("the binary has .interp or .dynamic sections")
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -ldflags '-s -w' was not applied")
	}
	data, err := os.ReadFile(path)
	mustf(t, err, "reading the binary")
	if bytes.Contains(data, []byte(repoRoot(t)+"/")) {
		t.Errorf("the binary contains the build directory %s: -trimpath was not applied", repoRoot(t))
	}

	// It runs, without a libc, as the image's entrypoint would.
	out, err := exec.Command(path, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kausality-proxy") {
		t.Fatalf("%s --help: %v\n%s", path, err, out)
	}
}
