package notify

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

func replicas(from, to int) desired.Change {
	return desired.Change{Path: "spec.replicas", Old: strconv.Itoa(from), New: strconv.Itoa(to)}
}

func TestPost(t *testing.T) {
	for _, tc := range []struct {
		name           string
		code           int
		retryAfter     string
		wantErr        bool
		wantRetryable  bool
		wantRetryAfter time.Duration
	}{
		{name: "accepted", code: http.StatusOK},
		{name: "accepted without content", code: http.StatusNoContent},
		{name: "server error is retried", code: http.StatusBadGateway, wantErr: true, wantRetryable: true},
		{name: "too many requests honours Retry-After", code: http.StatusTooManyRequests, retryAfter: "7", wantErr: true, wantRetryable: true, wantRetryAfter: 7 * time.Second},
		{name: "a rejection is final", code: http.StatusBadRequest, wantErr: true},
		{name: "a redirect is not followed and final", code: http.StatusFound, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got, _ = io.ReadAll(r.Body)
				if r.Header.Get("Content-Type") != "application/json" {
					t.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
				}
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				if tc.code == http.StatusFound {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tc.code)
			}))
			defer srv.Close()
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			ra, err := Post(context.Background(), client, srv.URL+"/hook?token=secret", []byte(`{"a":1}`), "", 5*time.Second)
			if string(got) != `{"a":1}` {
				t.Errorf("body %q", got)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err == nil {
				return
			}
			var de *DeliveryError
			if !errors.As(err, &de) || de.Retryable != tc.wantRetryable || de.Code != tc.code {
				t.Errorf("error %#v", err)
			}
			if ra != tc.wantRetryAfter {
				t.Errorf("retry after %s, want %s", ra, tc.wantRetryAfter)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error repeats the URL: %v", err)
			}
		})
	}
}

func TestPostUnreachableIsRetryableAndHidesTheURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/hook?token=secret"
	srv.Close()
	_, err := Post(context.Background(), http.DefaultClient, url, nil, "", time.Second)
	var de *DeliveryError
	if !errors.As(err, &de) || !de.Retryable {
		t.Fatalf("error %#v", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("the error repeats the URL: %v", err)
	}
}

func TestValidateURL(t *testing.T) {
	for raw, ok := range map[string]bool{
		"http://sink:8080/":         true,
		"https://hooks.example/x":   true,
		"ftp://sink/":               false,
		"sink:8080":                 false,
		"https:///nohost":           false,
		"http://a b/":               false,
		"https://user:pw@host/path": true,
	} {
		if err := ValidateURL(raw); (err == nil) != ok {
			t.Errorf("ValidateURL(%q) = %v", raw, err)
		}
		if err := ValidateURL(raw); err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("the error repeats the URL: %v", err)
		}
	}
}

func TestPostSendsTheBearerToken(t *testing.T) {
	for _, tc := range []struct{ token, want string }{{token: "s3cret", want: "Bearer s3cret"}, {}} {
		var got string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = r.Header.Get("Authorization")
		}))
		if _, err := Post(context.Background(), http.DefaultClient, srv.URL, []byte(`{}`), tc.token, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		if got != tc.want {
			t.Errorf("token %q: Authorization %q, want %q", tc.token, got, tc.want)
		}
	}
}
