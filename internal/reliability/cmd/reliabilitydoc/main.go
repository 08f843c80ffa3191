// Command reliabilitydoc writes docs/reliability.md from the figures of the
// hardening suite and the output of `make fuzz`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/kausality-io/kausality-proxy/internal/reliability"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reliabilitydoc:", err)
		os.Exit(1)
	}
}

func run() error {
	figures := flag.String("figures", "", "JSON figures written by the hardening suite ($KAUSALITY_HARDENING_FIGURES)")
	fuzz := flag.String("fuzz", "", "output of `make fuzz` (optional)")
	out := flag.String("out", "docs/reliability.md", "the document to write")
	command := flag.String("command", "make test-hardening", "the command named as the figures' source")
	flag.Parse()
	if *figures == "" {
		return errors.New("-figures is required")
	}
	f, err := reliability.ReadFigures(*figures)
	if err != nil {
		return err
	}
	in := reliability.Input{Figures: f, Command: *command}
	if *fuzz != "" {
		file, err := os.Open(*fuzz)
		if err != nil {
			return err
		}
		defer file.Close()
		if in.Fuzz, err = reliability.ParseFuzz(file); err != nil {
			return err
		}
	}
	if prev, err := os.ReadFile(*out); err == nil {
		in.Previous = prev
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(*out, reliability.Render(in), 0o644)
}
