// Package httpx holds the one http.ResponseWriter wrapper the proxy and the
// interceptor both need: it remembers the status code of a response that
// streams through it.
package httpx

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
)

// CodeRecorder remembers the response code. Flush and Hijack pass through
// explicitly: ReverseProxy flushes watch streams and UpgradeAwareHandler
// hijacks the connection for exec; Unwrap serves http.ResponseController.
type CodeRecorder struct {
	http.ResponseWriter
	code int
	// BeforeHeader, when set, runs once with the status code before the
	// header reaches the client: what it does is done before the client
	// can act on the answer.
	BeforeHeader func(code int)
	// KeepBody, when above 0, keeps a copy of the body written as long as
	// it is at most that many bytes: the interceptor keeps
	// kube-apiserver's answer to some writes as the stored object.
	KeepBody int
	body     []byte
	tooLong  bool
}

// NewCodeRecorder wraps w.
func NewCodeRecorder(w http.ResponseWriter) *CodeRecorder { return &CodeRecorder{ResponseWriter: w} }

// Code is the status code written, 0 when nothing was written yet.
func (c *CodeRecorder) Code() int { return c.code }

// WriteHeader records the first final code: an informational 1xx (such
// as the 100 Continue a caller's Expect draws) is passed on, not recorded.
func (c *CodeRecorder) WriteHeader(code int) {
	if c.code == 0 && (code < 100 || code >= 200) {
		c.record(code)
	}
	c.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200.
func (c *CodeRecorder) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.record(http.StatusOK)
	}
	if c.KeepBody > 0 && !c.tooLong {
		if len(c.body)+len(b) > c.KeepBody {
			c.body, c.tooLong = nil, true
		} else {
			c.body = append(c.body, b...)
		}
	}
	return c.ResponseWriter.Write(b)
}

// Body is the body written, when KeepBody was set and it fit.
func (c *CodeRecorder) Body() ([]byte, bool) { return c.body, c.KeepBody > 0 && !c.tooLong }

func (c *CodeRecorder) record(code int) {
	c.code = code
	if c.BeforeHeader != nil {
		c.BeforeHeader(code)
	}
}

// Flush flushes the wrapped writer, when it can.
func (c *CodeRecorder) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

// Hijack hands over the connection; the code becomes 101.
func (c *CodeRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := c.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("response writer %T cannot be hijacked", c.ResponseWriter)
	}
	if c.code == 0 {
		c.code = http.StatusSwitchingProtocols
	}
	return h.Hijack()
}

// Unwrap returns the wrapped writer.
func (c *CodeRecorder) Unwrap() http.ResponseWriter { return c.ResponseWriter }
