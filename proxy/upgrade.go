package proxy

import (
	"net/http"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// streamingSubresources are the subresources whose requests are protocol
// upgrades in kube-apiserver (SPDY or WebSocket streams).
var streamingSubresources = map[string]bool{"exec": true, "attach": true, "portforward": true, "proxy": true}

// isStreamingRequest reports whether kube-apiserver would serve info as a
// protocol upgrade: exec, attach, port-forward, the proxy subresource and
// verb, and watches (which also stream over WebSocket).
func isStreamingRequest(info *request.RequestInfo) bool {
	if info == nil || !info.IsResourceRequest {
		return false
	}
	return streamingSubresources[info.Subresource] || info.Verb == "proxy" || info.Verb == "watch"
}

// withUpgradeRestriction sends only real streaming requests down the
// upgrade path. Any other request that asks for an upgrade loses the
// Upgrade and Connection headers and is served as the plain request it is.
//
// The upgrade path hands the connection to kube-apiserver over HTTP/1.1 and
// copies bytes both ways; it has no idea of a write's outcome. A write sent
// there would reach kube-apiserver without its response ever being read
// (its 201 is not a 101, so the caller sees a 502 for a write that was
// applied), and the interceptor could not tell what happened to it.
func withUpgradeRestriction(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !httpstream.IsUpgradeRequest(r) {
			next.ServeHTTP(w, r)
			return
		}
		if info, ok := request.RequestInfoFrom(r.Context()); ok && isStreamingRequest(info) {
			next.ServeHTTP(w, r)
			return
		}
		plain := r.Clone(r.Context())
		plain.Header.Del("Upgrade")
		plain.Header.Del("Connection")
		next.ServeHTTP(w, plain)
	})
}
