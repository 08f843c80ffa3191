package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

func newBackendCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backend",
		Short: "DriftReport receivers for --drift-webhook-url",
		Long: `backend runs a receiver the proxy can POST its DriftReports to
(--drift-webhook-url). Pick one with a subcommand.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBackendLogCommand())
	return cmd
}

// backendLogOptions are the flags of `kausality-proxy backend log`.
type backendLogOptions struct {
	Listen        string
	AuthTokenFile string
	// AllowUnauthenticated accepts reports without a token.
	AllowUnauthenticated bool
	MaxReportSize        resource.QuantityValue
	ShutdownTimeout      time.Duration
}

func newBackendLogCommand() *cobra.Command {
	o := &backendLogOptions{Listen: ":8080", MaxReportSize: resource.QuantityValue{Quantity: resource.MustParse("1Mi")}, ShutdownTimeout: 10 * time.Second}
	cmd := &cobra.Command{
		Use:   "log [--listen ADDR]",
		Short: "Receive DriftReports and print each one as a JSON line on standard output",
		Long: `log receives DriftReports (kausality.io/v1alpha1) POSTed as JSON to / or
/driftreports and prints each one, as received but compacted, as one JSON
line on standard output; its own log goes to standard error. Point the proxy
at it with --drift-webhook-url=http://HOST:8080/ and read the reports with
kubectl logs, or feed them to a log pipeline.

Senders authenticate with the bearer token in --auth-token-file (the proxy
sends the one in its --drift-webhook-token-file); a request without it is
answered 401 before its body is read. Without a token file, it refuses to
start unless --allow-unauthenticated says that anyone who reaches it may
have reports printed.

It answers 200 to a report, 400 (a metav1.Status) to a body that is not a
DriftReport (the proxy does not retry those), 401 without the token, 405 to
anything but POST and 413 to a body larger than --max-report-size. /healthz
answers ok.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			limit, ok := o.MaxReportSize.AsInt64()
			if !ok || limit <= 0 {
				return fmt.Errorf("--max-report-size must be a positive number of bytes, not %s", o.MaxReportSize.String())
			}
			token, err := readSenderToken(o)
			if err != nil {
				return err
			}
			log, err := newLogger(zapcore.InfoLevel)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			ln, err := net.Listen("tcp", o.Listen)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			h := newLogBackend(cmd.OutOrStdout(), limit, log, token)
			log.Info("DriftReport log backend listening", zap.String("address", ln.Addr().String()), zap.Int64("maxReportSize", limit),
				zap.Bool("authenticated", token != nil))
			return serveUntilDone(ctx, ln, h.handler(), o.ShutdownTimeout, log)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Listen, "listen", o.Listen, "Address to serve plain HTTP on.")
	fs.Var(&o.MaxReportSize, "max-report-size", "Largest request body accepted (a quantity: 1Mi, 4Mi, 500k); larger ones are answered 413.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long requests in flight may finish after SIGTERM.")
	fs.StringVar(&o.AuthTokenFile, "auth-token-file", o.AuthTokenFile,
		"File holding the bearer token senders must present (Authorization: Bearer <token>); the proxy sends the one in its --drift-webhook-token-file. Read at start.")
	fs.BoolVar(&o.AllowUnauthenticated, "allow-unauthenticated", o.AllowUnauthenticated,
		"Print reports from anyone who reaches the receiver, without a token. Only where nothing but the proxy can reach it.")
	return cmd
}

// readSenderToken returns the hash of the token senders must present; nil
// when reports are accepted from anyone, which has to be asked for: a
// receiver that prints whatever it is sent lets anyone who reaches it
// forge drift reports.
func readSenderToken(o *backendLogOptions) (*[sha256.Size]byte, error) {
	switch {
	case o.AuthTokenFile == "" && !o.AllowUnauthenticated:
		return nil, errors.New("--auth-token-file is required: without it anyone who reaches the receiver can have forged DriftReports printed (pass --allow-unauthenticated to accept that)")
	case o.AuthTokenFile == "":
		return nil, nil
	case o.AllowUnauthenticated:
		return nil, errors.New("--auth-token-file and --allow-unauthenticated contradict each other: pick one")
	}
	b, err := os.ReadFile(o.AuthTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--auth-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return nil, fmt.Errorf("--auth-token-file %s is empty", o.AuthTokenFile)
	}
	sum := sha256.Sum256([]byte(token))
	return &sum, nil
}

// serveUntilDone serves h on ln until ctx is done, then stops accepting and
// lets requests in flight finish, so that a report the proxy is sending
// while the pod is terminated is still printed and acknowledged.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler, timeout time.Duration, log *zap.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// logBackend prints every DriftReport it receives to out.
type logBackend struct {
	// mu keeps concurrent reports from interleaving within a line.
	mu       sync.Mutex
	out      io.Writer
	maxBytes int64
	log      *zap.Logger
	// refusals logs the requests refused for their token, sampled:
	// whoever reaches the endpoint can send them.
	refusals *zap.Logger
	// token is the hash of the bearer token senders must present; nil:
	// anyone may send.
	token *[sha256.Size]byte
}

// authenticated reports whether r carries the senders' token. Hashes are
// compared, in constant time, so neither the token nor its length shows
// in the timing.
func (b *logBackend) authenticated(r *http.Request) bool {
	if b.token == nil {
		return true
	}
	presented, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(presented)))
	return subtle.ConstantTimeCompare(sum[:], b.token[:]) == 1
}

func (b *logBackend) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	})
	mux.HandleFunc("/{$}", b.receive)
	mux.HandleFunc("/driftreports", b.receive)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("no endpoint %s: POST DriftReports to / or /driftreports", r.URL.Path))
	})
	return mux
}

// newLogBackend writes the reports it takes to out, each at most maxBytes,
// from senders presenting the token whose hash is token (nil: anyone).
func newLogBackend(out io.Writer, maxBytes int64, log *zap.Logger, token *[sha256.Size]byte) *logBackend {
	return &logBackend{out: out, maxBytes: maxBytes, log: log, token: token,
		refusals: log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(c, time.Minute, 5, 0)
		}))}
}

func (b *logBackend) receive(w http.ResponseWriter, r *http.Request) {
	if !b.authenticated(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kausality-proxy backend log"`)
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
			"a DriftReport needs the bearer token of --auth-token-file (the proxy sends the one in --drift-webhook-token-file)")
		b.refusals.Info("refused a request without the senders' token (at most 5 such lines a minute)", zap.String("remote", r.RemoteAddr), zap.String("path", r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, r.Method+" is not supported: POST a DriftReport")
		return
	}
	line, err := b.read(w, r)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeStatus(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
				fmt.Sprintf("the report is larger than %d bytes", tooLarge.Limit))
		} else {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		}
		b.log.Info("refused a request", zap.String("remote", r.RemoteAddr), zap.String("path", r.URL.Path), zap.Error(err))
		return
	}
	b.mu.Lock()
	_, err = b.out.Write(line)
	b.mu.Unlock()
	if err != nil {
		// 5xx: the proxy retries, so the report is not lost with the line.
		b.log.Error("writing a report", zap.Error(err))
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "the report could not be written")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// read returns the body as one compact JSON line ending in a newline, if
// it is a DriftReport. Unknown fields are kept and accepted: a newer proxy
// may add some, and refusing them would drop its reports (a 4xx is not
// retried).
func (b *logBackend) read(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, b.maxBytes))
	if err != nil {
		return nil, err
	}
	// The type fields are checked on the raw keys: encoding/json matches
	// struct fields case-insensitively, and "APIVERSION" is not apiVersion.
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("the body is not a JSON object: %w", err)
	}
	var apiVersion, kind string
	_ = json.Unmarshal(top["apiVersion"], &apiVersion)
	_ = json.Unmarshal(top["kind"], &kind)
	if apiVersion != v1alpha1.DriftReportAPIVersion || kind != v1alpha1.DriftReportKind {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s %s", apiVersion, kind, v1alpha1.DriftReportAPIVersion, v1alpha1.DriftReportKind)
	}
	var rep v1alpha1.DriftReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("not a valid DriftReport: %w", err)
	}
	var buf bytes.Buffer
	buf.Grow(len(data) + 1)
	if err := json.Compact(&buf, data); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// writeStatus answers with a metav1.Status, the error shape Kubernetes
// clients (and the proxy's own responses) use.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code), //nolint:gosec // an HTTP status code fits
	}
	body, _ := json.Marshal(st) // cannot fail: plain fields
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
