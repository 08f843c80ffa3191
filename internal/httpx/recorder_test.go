package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCodeRecorder(t *testing.T) {
	tests := []struct {
		name  string
		serve func(w http.ResponseWriter)
		want  int
	}{
		{"explicit header", func(w http.ResponseWriter) { w.WriteHeader(http.StatusConflict) }, http.StatusConflict},
		{"implicit 200", func(w http.ResponseWriter) { _, _ = w.Write([]byte("ok")) }, http.StatusOK},
		{"the first code counts", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			w.WriteHeader(http.StatusConflict)
		}, http.StatusCreated},
		{"an informational 100 is not the answer", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusContinue)
			w.WriteHeader(http.StatusUnprocessableEntity)
		}, http.StatusUnprocessableEntity},
		{"an informational 103 before an implicit 200", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = w.Write([]byte("ok"))
		}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := httptest.NewRecorder()
			rec := NewCodeRecorder(client)
			var seen []int
			var clientHadHeader bool
			rec.BeforeHeader = func(code int) {
				seen = append(seen, code)
				// An informational header may have gone out before; the
				// final one must not have.
				final := client.Code >= 200 && client.Code != http.StatusOK
				clientHadHeader = final || len(client.Body.Bytes()) > 0 || client.Flushed
			}
			tt.serve(rec)
			if rec.Code() != tt.want || len(seen) != 1 || seen[0] != tt.want {
				t.Errorf("code %d, hook saw %v; want %d once", rec.Code(), seen, tt.want)
			}
			if clientHadHeader {
				t.Error("the hook ran after the client got the header")
			}
		})
	}
}

func TestCodeRecorderKeepsABodyThatFits(t *testing.T) {
	tests := []struct {
		name   string
		keep   int
		writes []string
		want   string
		fit    bool
	}{
		{"not asked", 0, []string{"abc"}, "", false},
		{"in pieces", 6, []string{"abc", "def"}, "abcdef", true},
		{"one byte too long", 5, []string{"abc", "def"}, "", false},
		{"too long, then short writes", 3, []string{"abcd", "e"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := httptest.NewRecorder()
			rec := NewCodeRecorder(client)
			rec.KeepBody = tt.keep
			for _, w := range tt.writes {
				_, _ = rec.Write([]byte(w))
			}
			got, fit := rec.Body()
			if string(got) != tt.want || fit != tt.fit {
				t.Errorf("Body() = %q, %v; want %q, %v", got, fit, tt.want, tt.fit)
			}
			if client.Body.String() != strings.Join(tt.writes, "") {
				t.Errorf("the client got %q", client.Body.String())
			}
		})
	}
}
