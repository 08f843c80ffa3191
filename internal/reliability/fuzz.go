package reliability

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// FuzzTarget is one target of `make fuzz` and what its run did.
type FuzzTarget struct {
	Package string `json:"package"`
	Name    string `json:"name"`
	// Budget is what the target was given: an execution count such as
	// "140000x", or a duration when FUZZTIME overrode it.
	Budget string `json:"budget"`
	// Elapsed and Execs are from the target's last progress line.
	Elapsed string `json:"elapsed"`
	Execs   int64  `json:"execs"`
}

var (
	// `make fuzz` announces each target: "fuzz ./intercept/body FuzzDecode (140000x)".
	fuzzStart = regexp.MustCompile(`^fuzz (\S+) (\S+) \(([^)]*)\)$`)
	// go test -fuzz reports progress: "fuzz: elapsed: 30s, execs: 123456 (4115/sec), ...".
	fuzzProgress = regexp.MustCompile(`^fuzz: elapsed: ([^,]+), execs: (\d+)`)
)

// ParseFuzz reads the output of `make fuzz` and returns each target with
// the executions of its last progress line, in the order they ran.
func ParseFuzz(r io.Reader) ([]FuzzTarget, error) {
	var out []FuzzTarget
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := fuzzStart.FindStringSubmatch(line); m != nil {
			out = append(out, FuzzTarget{Package: m[1], Name: m[2], Budget: m[3]})
			continue
		}
		if m := fuzzProgress.FindStringSubmatch(line); m != nil && len(out) > 0 {
			n, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil {
				continue
			}
			out[len(out)-1].Elapsed, out[len(out)-1].Execs = m[1], n
		}
	}
	return out, sc.Err()
}
