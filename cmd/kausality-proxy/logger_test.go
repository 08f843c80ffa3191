package main

import (
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A retried failure the k8s.io libraries log through klog is one line: no
// stack trace, although the proxy's own logger adds one to its errors.
func TestKlogErrorsCarryNoStackTrace(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core, zap.AddStacktrace(zapcore.ErrorLevel))

	log.Error("the proxy's own error")
	klogLogger(log).Error(errors.New(`leases.coordination.k8s.io "kausality-proxy-drifts" is forbidden`), "error retrieving resource lock")

	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("%d entries, want 2", len(entries))
	}
	if entries[0].Stack == "" {
		t.Fatal("the control case has no stack trace: the test proves nothing")
	}
	if entries[1].Stack != "" {
		t.Fatalf("a klog error carries a stack trace:\n%s", entries[1].Stack)
	}
}
