package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kausality-io/kausality-proxy/cmd/kausality-proxy/shadowreport"
)

func newShadowReportCommand() *cobra.Command {
	output := "text"
	cmd := &cobra.Command{
		Use:   "shadow-report [LOG_FILE]",
		Short: "Summarize what controllers in shadow mode would have had denied",
		Long: `shadow-report reads the proxy's JSON log (a file, or standard input when no
file or "-" is given) and prints, per controller in shadow mode, how many of
its writes were decided, how many would have been denied and under which
parents. Read it before switching a controller from shadow to enforce.

  kubectl logs -n kausality-system deploy/kausality-proxy | kausality-proxy shadow-report`,
		Args:         cobra.MaximumNArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			in := cmd.InOrStdin()
			if len(args) == 1 && args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			rep, err := shadowreport.Read(in)
			if err != nil {
				return err
			}
			switch output {
			case "text":
				return rep.WriteText(cmd.OutOrStdout())
			case "json":
				return rep.WriteJSON(cmd.OutOrStdout())
			default:
				return fmt.Errorf("--output must be text or json, not %q", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", output, "Output format: text or json.")
	return cmd
}
