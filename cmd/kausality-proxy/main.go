// Command kausality-proxy is an authenticating reverse proxy in front of
// kube-apiserver that detects controller drift on writes, without an
// admission webhook.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"github.com/kausality-io/kausality-proxy/proxy"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	opts := proxy.NewOptions()
	logLevel := "info"
	cmd := &cobra.Command{
		Use:   "kausality-proxy",
		Short: "Authenticating reverse proxy for kube-apiserver that detects controller drift on writes",
		Long: `kausality-proxy sits between controllers and kube-apiserver. It authenticates
every caller (client certificate or bearer token), streams reads through
untouched and decides about writes: expected, drift or a new causal origin.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level, err := zapcore.ParseLevel(logLevel)
			if err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return run(ctx, opts, log)
		},
	}
	opts.AddFlags(cmd.Flags())
	cmd.AddCommand(newShadowReportCommand())
	cmd.AddCommand(newKubeconfigCommand(), newCertsCommand(), newBackendCommand())
	cmd.Flags().StringVar(&logLevel, "log-level", logLevel, "Log level: debug, info, warn or error.")
	return cmd
}

func run(ctx context.Context, opts *proxy.Options, log *zap.Logger) error {
	srv, err := proxy.NewServer(opts, log)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// newLogger returns a zap JSON logger and routes klog (used by the k8s.io
// libraries) into it, so every line the process writes is structured.
func newLogger(level zapcore.Level) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.Sampling = nil
	zc.EncoderConfig.TimeKey = "ts"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	log, err := zc.Build()
	if err != nil {
		return nil, err
	}
	klog.SetLogger(klogLogger(log))
	return log, nil
}

// klogLogger is the logger klog writes to: without stack traces, because
// the k8s.io libraries log a retried failure (a leader-election lease that
// cannot be read, a list that fails) as an error every few seconds, and a
// stack trace each time buries the one line that says what is wrong.
func klogLogger(log *zap.Logger) logr.Logger {
	return zapr.NewLogger(log.Named("klog").WithOptions(zap.AddStacktrace(zapcore.DPanicLevel)))
}
