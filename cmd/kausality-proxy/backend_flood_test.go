package main

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Requests without the senders' token are answered 401 unread: anyone who
// reaches the receiver must not turn a flood of them into as many log
// lines.
func TestBackendUnauthenticatedFloodIsNotAFloodOfLogLines(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	sum := sha256.Sum256([]byte("s3cret"))
	var out bytes.Buffer
	b := newLogBackend(&out, 1<<20, zap.New(core), &sum)
	h := b.handler()
	const requests = 1000
	for range requests {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("status %d", w.Code)
		}
	}
	if n := logs.Len(); n > 10 {
		t.Errorf("%d unauthenticated requests wrote %d log lines (%q)", requests, n, logs.All()[0].Message)
	}
}
