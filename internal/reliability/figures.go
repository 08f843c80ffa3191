// Package reliability holds the figures the hardening suite (e2e/hardening)
// measures, the fuzz executions of `make fuzz`, and renders both into
// docs/reliability.md.
package reliability

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Figures are what one run of the hardening suite measured.
type Figures struct {
	Machine      Machine `json:"machine"`
	SuiteSeconds float64 `json:"suiteSeconds"`
	Load         *Load   `json:"load,omitempty"`
	Faults       []Fault `json:"faults,omitempty"`
	// SlowClients are the attacks on one replica, each with the latency
	// of an administrator's GETs before and during it.
	SlowClients []Attack `json:"slowClients,omitempty"`
}

// Machine is where the figures were measured.
type Machine struct {
	CPUs   int    `json:"cpus"`
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
}

// Load is the load suite: controllers writing through the replicas while
// watches stay open, with the faults injected into its second half.
type Load struct {
	Controllers int     `json:"controllers"`
	Replicas    int     `json:"replicas"`
	Watches     int     `json:"watches"`
	Rounds      int     `json:"rounds"`
	Seconds     float64 `json:"seconds"`
	// Requests are all requests the test's clients sent through the
	// replicas (reads, writes, dry runs, watches); WriteRequests the
	// non-GET ones among them.
	Requests      int64 `json:"requests"`
	WriteRequests int64 `json:"writeRequests"`
	// Outcomes counts the ledger's writes by role and outcome.
	Outcomes []OutcomeCount `json:"outcomes"`
	// VerifiedWrites are the ledger's writes checked against etcd.
	VerifiedWrites int `json:"verifiedWrites"`
	// Lost are accepted writes missing from etcd; Duplicated writes
	// applied more than once; RefusedButApplied refused writes found in
	// etcd. All three must be 0.
	Lost              int `json:"lost"`
	Duplicated        int `json:"duplicated"`
	RefusedButApplied int `json:"refusedButApplied"`
	// UncertainApplied and UncertainNotApplied resolve the writes whose
	// answer was a 5xx or no answer at all.
	UncertainApplied    int `json:"uncertainApplied"`
	UncertainNotApplied int `json:"uncertainNotApplied"`
	// ApprovalsConsumed once approvals were consumed, each by its write.
	// ApprovalsSpentByFailedWrites of them by a write whose answer was a
	// 5xx or none and which was not applied, though the replica lived to
	// settle it, and ApprovalsLostWithReplica through a replica killed
	// before it could, whose record no other replica settled (both must
	// be 0).
	ApprovalsConsumed            int   `json:"approvalsConsumed"`
	ApprovalsSpentByFailedWrites int   `json:"approvalsSpentByFailedWrites"`
	ApprovalsLostWithReplica     int   `json:"approvalsLostWithReplica"`
	TalliesCreated               int   `json:"talliesCreated"`
	TracesChecked                int   `json:"tracesChecked"`
	WatchEvents                  int64 `json:"watchEvents"`
	WatchRewatches               int64 `json:"watchRewatches"`
	WatchRelists                 int64 `json:"watchRelists"`
	// RSS of both replicas together, before and after the watches opened.
	RSSBeforeWatchesKiB int64   `json:"rssBeforeWatchesKiB"`
	RSSAfterWatchesKiB  int64   `json:"rssAfterWatchesKiB"`
	MemoryPerWatchKiB   float64 `json:"memoryPerWatchKiB"`
	// CPU of both replicas over the fault-free phase, and the write
	// requests sent in it.
	CPUSeconds     float64 `json:"cpuSeconds"`
	CPUPhaseWrites int64   `json:"cpuPhaseWrites"`
	CPUPerWriteMs  float64 `json:"cpuPerWriteMs"`
}

// OutcomeCount is how many writes of one role had one outcome.
type OutcomeCount struct {
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	Count   int    `json:"count"`
}

// Fault is one fault injected during the load.
type Fault struct {
	Name string `json:"name"`
	What string `json:"what"`
	// RecoverySeconds is how long until the system was whole again (see
	// Recovery for what that means for this fault).
	RecoverySeconds float64 `json:"recoverySeconds"`
	Recovery        string  `json:"recovery"`
	// Writes answered while the fault lasted, by outcome.
	Outcomes map[string]int `json:"outcomes"`
	Notes    string         `json:"notes,omitempty"`
}

// Attack is one slow-client attack on a replica.
type Attack struct {
	Name        string `json:"name"`
	What        string `json:"what"`
	Connections int    `json:"connections"`
	// AdminGETs were sent during the attack; Failed of them failed.
	AdminGETs     int     `json:"adminGETs"`
	Failed        int     `json:"failed"`
	BaselineP50Ms float64 `json:"baselineP50Ms"`
	BaselineP99Ms float64 `json:"baselineP99Ms"`
	P50Ms         float64 `json:"p50Ms"`
	P99Ms         float64 `json:"p99Ms"`
	Notes         string  `json:"notes,omitempty"`
}

// WriteFigures writes f as JSON to path.
func WriteFigures(path string, f *Figures) error {
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadFigures reads what WriteFigures wrote.
func ReadFigures(path string) (*Figures, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f Figures
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}
