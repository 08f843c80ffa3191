package framework

import (
	"bufio"
	"encoding/json"
	"os"
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

// Decisions returns every decision line the proxy logged so far, oldest first.
func (l *Local) Decisions() ([]DecisionLine, error) {
	f, err := os.Open(l.LogPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []DecisionLine
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for s.Scan() {
		var line DecisionLine
		if err := json.Unmarshal(s.Bytes(), &line); err != nil {
			continue
		}
		if line.Str("msg") == "kausality decision" {
			out = append(out, line)
		}
	}
	return out, s.Err()
}
