package authn

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
)

// Method names the way a caller proved its identity to the proxy.
type Method string

const (
	// MethodX509 means the caller presented a TLS client certificate that
	// verified against the client CA bundle. The request goes upstream with
	// the proxy's own credentials and Impersonate-* headers.
	MethodX509 Method = "x509"
	// MethodToken means the caller presented a bearer token that the upstream
	// accepted in a TokenReview. The token is passed through unchanged.
	MethodToken Method = "token"
	// MethodAnonymous means the caller presented no credentials and anonymous
	// access is enabled. The request goes upstream with the proxy's own
	// credentials, impersonating system:anonymous.
	MethodAnonymous Method = "anonymous"
)

// redacted replaces a secret in every rendering of a Caller.
const redacted = "[REDACTED]"

// Caller is the authenticated identity of the client of one request, before
// any impersonation the client asked for.
//
// Caller carries the client's bearer token, so every way this package can
// think of for turning a Caller into text is redacting: fmt (all verbs,
// including %#v and %+v, via Format), String, GoString, encoding/json
// (MarshalJSON), log/slog (LogValue) and logr/zapr/klog (MarshalLog). Reading
// the Token field directly and printing it is still possible; don't.
type Caller struct {
	// User is the authenticated identity, before any impersonation. For
	// x509 and token callers it always contains the system:authenticated
	// group; for anonymous callers it is system:anonymous in the group
	// system:unauthenticated.
	User user.Info
	// Method is how the caller authenticated.
	Method Method
	// Token is the caller's bearer token when Method is MethodToken, empty
	// otherwise. It MUST never be logged.
	Token string
}

// callerView is the redacted, loggable projection of a Caller.
type callerView struct {
	Method Method              `json:"method"`
	User   string              `json:"user"`
	UID    string              `json:"uid,omitempty"`
	Groups []string            `json:"groups,omitempty"`
	Extra  map[string][]string `json:"extra,omitempty"`
	Token  string              `json:"token,omitempty"`
}

func (c Caller) view() callerView {
	v := callerView{Method: c.Method}
	if c.User != nil {
		v.User = c.User.GetName()
		v.UID = c.User.GetUID()
		v.Groups = c.User.GetGroups()
		v.Extra = c.User.GetExtra()
	}
	if c.Token != "" {
		v.Token = redacted
	}
	return v
}

// String renders the caller for humans, with the token redacted.
func (c Caller) String() string {
	v := c.view()
	var b strings.Builder
	fmt.Fprintf(&b, "{method=%s user=%q", v.Method, v.User)
	if v.UID != "" {
		fmt.Fprintf(&b, " uid=%q", v.UID)
	}
	if len(v.Groups) > 0 {
		fmt.Fprintf(&b, " groups=%q", v.Groups)
	}
	if len(v.Extra) > 0 {
		fmt.Fprintf(&b, " extra=%v", v.Extra)
	}
	if v.Token != "" {
		b.WriteString(" token=" + redacted)
	}
	b.WriteString("}")
	return b.String()
}

// GoString implements fmt.GoStringer with the token redacted.
func (c Caller) GoString() string { return "authn.Caller" + c.String() }

// Format implements fmt.Formatter so that no formatting verb (not even %d or
// %x, which would otherwise print struct fields) can reveal the token.
func (c Caller) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = fmt.Fprint(f, c.GoString())
	case verb == 'q':
		_, _ = fmt.Fprintf(f, "%q", c.String())
	default:
		_, _ = fmt.Fprint(f, c.String())
	}
}

// MarshalJSON implements json.Marshaler with the token redacted. zap's
// reflection encoder (zap.Any) goes through here.
func (c Caller) MarshalJSON() ([]byte, error) { return json.Marshal(c.view()) }

// LogValue implements slog.LogValuer with the token redacted.
func (c Caller) LogValue() slog.Value {
	v := c.view()
	attrs := []slog.Attr{slog.String("method", string(v.Method)), slog.String("user", v.User)}
	if v.UID != "" {
		attrs = append(attrs, slog.String("uid", v.UID))
	}
	if len(v.Groups) > 0 {
		attrs = append(attrs, slog.Any("groups", v.Groups))
	}
	if len(v.Extra) > 0 {
		attrs = append(attrs, slog.Any("extra", v.Extra))
	}
	if v.Token != "" {
		attrs = append(attrs, slog.String("token", redacted))
	}
	return slog.GroupValue(attrs...)
}

// MarshalLog implements logr.Marshaler (honoured by zapr and klog) with the
// token redacted.
func (c Caller) MarshalLog() any { return c.view() }
