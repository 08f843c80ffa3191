package e2e

import (
	"fmt"
	"os"
	"strings"
)

// printProxyLogTail keeps the proxy's last log lines in the test output:
// providers remove their work dirs (and clusters) when they stop.
func printProxyLogTail() {
	data, err := cluster.ProxyLog()
	if err != nil {
		return
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	fmt.Fprintf(os.Stderr, "--- last lines of the proxy log:\n%s\n", strings.Join(lines, "\n"))
}
