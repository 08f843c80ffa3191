package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Backoff is exponential: Initial before the first retry, doubled before
// each further one, at most Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// ValidateURL checks a receiver URL (--drift-webhook-url). The error never
// repeats the URL: it may carry credentials.
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want http(s)://host/..., got scheme %q and host %q", u.Scheme, u.Host)
	}
	return nil
}

// DeliveryError is a failed POST of a report.
type DeliveryError struct {
	// Code is the receiver's status code (0: no response).
	Code int
	// Retryable: a transport error, 5xx or 429; anything else is the
	// receiver's final answer.
	Retryable bool
	Err       error
}

func (e *DeliveryError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return "the receiver answered " + strconv.Itoa(e.Code)
}

func (e *DeliveryError) Unwrap() error { return e.Err }

// Post delivers one report body to a receiver within timeout, with token,
// if set, as its bearer token. It returns
// nil on 2xx, and otherwise a *DeliveryError together with the wait the
// receiver asked for (Retry-After seconds), if any. The response body is
// read (bounded) and discarded so the connection can be reused; the URL
// never appears in the error.
func Post(ctx context.Context, client *http.Client, target string, body []byte, token string, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, &DeliveryError{Err: errors.New("the receiver URL is not valid")}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "kausality-proxy")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL may carry credentials
		}
		return 0, &DeliveryError{Retryable: true, Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return 0, nil
	}
	var retryAfter time.Duration
	if v := resp.Header.Get("Retry-After"); v != "" {
		if secs, err := strconv.Atoi(v); err == nil && secs > 0 {
			retryAfter = time.Duration(secs) * time.Second
		}
	}
	retryable := resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
	return retryAfter, &DeliveryError{Code: resp.StatusCode, Retryable: retryable}
}
