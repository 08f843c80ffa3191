// Command kubectl-kausality is the kubectl plugin `kubectl kausality`: it
// shows the open drifts in a terminal UI (drifts), explains
// kausality-proxy's drift decisions (why, trace) and edits the
// parent annotations that steer them (approve, reject, freeze, unfreeze,
// snooze, unsnooze, reset-controllers). Put it on PATH and kubectl finds it.
//
// Exit codes: 0 success, 1 error.
package main

import (
	"fmt"
	"os"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/internal/kubectlplugin"
)

func main() {
	if err := kubectlplugin.NewCommand(os.Stdout).Execute(); err != nil {
		// An error may quote an annotation or a denial's message.
		fmt.Fprintln(os.Stderr, "error:", annotations.PrintableLines(err.Error()))
		os.Exit(1)
	}
}
