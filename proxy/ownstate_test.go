package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

// serveProxyOwnState answers the proxy's own background traffic in its
// namespace, which runs from its start whoever calls and is not a caller's
// traffic: the ConfigMaps holding drift records and settledness records
// (empty, then a watch that stays open), and the Lease of the drift-report
// sender (none yet; created as asked). It reports whether r was such a
// request.
func serveProxyOwnState(w http.ResponseWriter, r *http.Request) bool {
	const ns = "/namespaces/kausality-system/"
	switch {
	case strings.HasPrefix(r.URL.Path, "/api/v1"+ns+"configmaps"):
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		switch {
		case q.Get("watch") != "true":
			_, _ = io.WriteString(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
		case q.Get("sendInitialEvents") == "true":
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
			_ = http.NewResponseController(w).Flush()
			<-r.Context().Done()
		default:
			w.WriteHeader(http.StatusOK)
			_ = http.NewResponseController(w).Flush()
			<-r.Context().Done()
		}
		return true
	case strings.HasPrefix(r.URL.Path, "/apis/coordination.k8s.io/v1"+ns+"leases"):
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			_, _ = fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
			return true
		}
		// A create or an update: kube-apiserver answers with the object.
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = w.Write(body)
		return true
	}
	return false
}
