package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// AuditEvents reads the audit log written so far (Options.AuditLog). The
// apiserver writes it in blocking mode, so a request's ResponseComplete
// event is on disk once the response has been received.
func (cp *ControlPlane) AuditEvents() ([]auditv1.Event, error) {
	if cp.AuditLogPath == "" {
		return nil, fmt.Errorf("testenv: audit logging is not enabled (Options.AuditLog)")
	}
	f, err := os.Open(cp.AuditLogPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []auditv1.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			// The last line may be half-written.
			continue
		}
		events = append(events, ev)
	}
	return events, sc.Err()
}
