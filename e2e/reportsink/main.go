// Command reportsink is the DriftReport endpoint of the kind e2e provider
// (e2e/framework/kind.go): the proxy in the kind cluster posts its
// DriftReports (--drift-webhook-url) to this server, which writes each one
// as a single JSON line to stdout. The test process reads them back with
// the pod log API. The local provider does the same in-process
// (e2e/framework/reports.go).
//
// It uses the standard library only, so the kind provider builds it as a
// static binary into a FROM-scratch image.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"time"
)

// maxReport bounds one request body.
const maxReport = 4 << 20

func main() {
	listen := flag.String("listen", ":8080", "address to listen on")
	flag.Parse()
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST a DriftReport", http.StatusMethodNotAllowed)
			return
		}
		line, err := compactReport(io.LimitReader(r.Body, maxReport+1))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		_, err = os.Stdout.Write(line)
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second}
	log.Printf("reportsink listening on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}

// compactReport returns the body as one line of JSON ending in a newline.
// Anything but a JSON object is refused, as the local provider's sink
// refuses what does not decode into a DriftReport.
func compactReport(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(data) > maxReport {
		return nil, errTooLarge
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

var errTooLarge = errors.New("report larger than 4 MiB")
