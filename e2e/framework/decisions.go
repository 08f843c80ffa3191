package framework

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"

	"github.com/kausality-io/kausality-proxy/intercept/decisionlog"
)

// DecisionLine is one "kausality decision" line of the proxy's JSON log.
type DecisionLine map[string]any

// Str returns a string field ("" if absent).
func (d DecisionLine) Str(key string) string {
	s, _ := d[key].(string)
	return s
}

// Bool returns a bool field.
func (d DecisionLine) Bool(key string) bool {
	b, _ := d[key].(bool)
	return b
}

// ParseDecisions returns the decision lines of a zap JSON log, oldest first.
// Lines that are not JSON (a half-written last line, another process's
// output) are skipped.
func ParseDecisions(r io.Reader) ([]DecisionLine, error) {
	var out []DecisionLine
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for s.Scan() {
		b := s.Bytes()
		if !bytes.Contains(b, []byte(decisionlog.Message)) {
			continue
		}
		var line DecisionLine
		if err := json.Unmarshal(b, &line); err != nil {
			continue
		}
		if line.Str("msg") == decisionlog.Message {
			out = append(out, line)
		}
	}
	return out, s.Err()
}

// Decisions returns every decision line the proxy logged so far, oldest first.
func (l *Local) Decisions() ([]DecisionLine, error) {
	f, err := os.Open(l.LogPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseDecisions(f)
}
