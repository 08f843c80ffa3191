// Package proxy is the serving side and the upstream side of
// kausality-proxy: TLS serving with HTTP/2 and reloadable certificates, the
// handler chain, the transports to kube-apiserver, streaming and protocol
// upgrades, and the metav1.Status the proxy answers its own errors with.
//
// The chain (handler.go composes it; each filter has a file named for it
// and a table test of the filter alone), outermost first:
//
//	early answer close → panic recovery → request info → metrics →
//	upgrade restriction → authentication → impersonation →
//	max mutating in flight → request deadline → write interception →
//	upstream
//
// An answer written before the request body has arrived (a refusal, a
// timeout) goes out at once and ends the connection, so that a client
// trickling its body holds nothing; the request deadline bounds the body
// of every request that is not long-running.
//
// Who the caller is and how that identity is presented upstream is the authn
// package's business; what happens to a write is the intercept package's.
// This package composes them. Nothing before authentication talks to
// kube-apiserver, so a refused request sends zero bytes upstream.
//
// Upstream (forward.go): plain requests go through httputil.ReverseProxy
// with Rewrite (identity headers are set after hop-by-hop removal) over
// client-go's HTTP/2 transports; a token caller's request goes on a
// transport without the proxy's credentials. Streaming requests (exec,
// attach, port-forward, proxy, WebSocket watches) go through apimachinery's
// UpgradeAwareHandler over HTTP/1.1. Redirects are never followed or
// forwarded. A write's answer is read whole (writeanswer.go), into a buffer
// reused once ReverseProxy closes it, and written without a flush per
// copy; reads and watches stream, flushed as they come. A read whose
// connection was lost before its answer is sent once more on a new one
// (lostconnection.go), so that an outage is a 503 the caller retries and a
// restarted kube-apiserver no error at all; a write never is.
package proxy
