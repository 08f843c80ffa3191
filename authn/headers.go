package authn

import (
	"maps"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// strippedHeaders are removed from every outbound request, in any case.
var strippedHeaders = []string{
	"Authorization",       // the caller's credential: re-set by ApplyUpstreamIdentity for token callers only
	"Proxy-Authorization", // credentials for a proxy, never for the apiserver
	"Forwarded",           // RFC 7239; claims about the client nobody verified
	"X-Real-Ip",           // ditto
	"Keep-Alive",          // hop-by-hop (RFC 9110 7.6.1)
	"Proxy-Connection",    // hop-by-hop, non-standard
}

// strippedPrefixes are header-name prefixes removed in any case.
var strippedPrefixes = []string{
	"Impersonate-", // Impersonate-User/-Group/-Uid/-Extra-*: re-set from the effective user
	"X-Remote-",    // kube-apiserver's front-proxy (requestheader) identity headers
	"X-Forwarded-", // X-Forwarded-For/-Host/-Proto/-Client-Cert/...
}

// websocketBearerProtocolPrefix marks a bearer token smuggled in
// Sec-WebSocket-Protocol, which kube-apiserver authenticates
// (k8s.io/apiserver/pkg/authentication/request/websocket).
const websocketBearerProtocolPrefix = "base64url.bearer.authorization.k8s.io."

// SanitizeInbound removes from h every header that could carry identity to
// the upstream, in any spelling of its name. Call it on the OUTBOUND copy of
// the request (in ReverseProxy.Rewrite, or on the clone handed to the upgrade
// handler), then ApplyUpstreamIdentity.
//
// Removed: Authorization, Proxy-Authorization, Impersonate-*, X-Remote-*,
// X-Forwarded-*, Forwarded, X-Real-Ip, Keep-Alive, Proxy-Connection; the
// base64url.bearer.authorization.k8s.io.* entry of Sec-WebSocket-Protocol
// (other subprotocols stay); every header named in a Connection header; and
// Connection itself. The exception is a protocol upgrade: if Connection
// lists "upgrade" and an Upgrade header is present, both survive as
// "Connection: Upgrade" and the original Upgrade value, so exec, attach,
// port-forward and WebSocket watches keep working. An Upgrade header
// without "Connection: upgrade" is removed.
func SanitizeInbound(h http.Header) {
	// Hop-by-hop headers named by the caller go first: "Connection:
	// Impersonate-User" must not get to delete anything after we set it, so
	// the names are consumed here and Connection is rebuilt below.
	var connection []string
	for k, values := range h {
		if strings.EqualFold(k, "Connection") {
			connection = append(connection, values...)
		}
	}
	deleteFold(h, "Connection")
	upgrade := false
	for _, v := range connection {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			switch {
			case name == "":
			case strings.EqualFold(name, "Upgrade"):
				upgrade = true
			default:
				deleteFold(h, name)
			}
		}
	}
	if upgrade && headerFold(h, "Upgrade") != "" {
		up := headerFold(h, "Upgrade")
		deleteFold(h, "Upgrade")
		h["Connection"] = []string{"Upgrade"}
		h["Upgrade"] = []string{up}
	} else {
		deleteFold(h, "Upgrade")
	}

	for _, name := range strippedHeaders {
		deleteFold(h, name)
	}
	for k := range h {
		for _, p := range strippedPrefixes {
			if hasPrefixFold(k, p) {
				delete(h, k)
				break
			}
		}
	}
	stripWebsocketBearer(h)
}

// stripWebsocketBearer drops a bearer token subprotocol and keeps the rest.
func stripWebsocketBearer(h http.Header) {
	for k, values := range h {
		if !strings.EqualFold(k, "Sec-Websocket-Protocol") {
			continue
		}
		var kept []string
		changed := false
		for _, v := range values {
			var protos []string
			for _, p := range strings.Split(v, ",") {
				if hasPrefixFold(strings.TrimSpace(p), websocketBearerProtocolPrefix) {
					changed = true
					continue
				}
				protos = append(protos, strings.TrimSpace(p))
			}
			if len(protos) > 0 {
				kept = append(kept, strings.Join(protos, ", "))
			}
		}
		switch {
		case !changed:
		case len(kept) == 0:
			delete(h, k)
		default:
			h[k] = kept
		}
	}
}

// ApplyUpstreamIdentity sets the identity the upstream sees for a request by
// caller acting as effective (the result of ResolveImpersonation). It first
// removes any Authorization and Impersonate-* headers, so it is safe even on
// an unsanitized header (but call SanitizeInbound anyway).
//
//   - MethodToken: "Authorization: Bearer <caller token>". If effective
//     differs from caller.User (an authorized impersonation), also
//     Impersonate-* for effective; the upstream re-checks that impersonation
//     against the caller's own token. Returns false: the request must go
//     upstream on a transport with no credentials of the proxy's own (no
//     client certificate either: kube-apiserver tries x509 before bearer
//     tokens, so a proxy certificate would win over the caller's token).
//   - MethodX509 and MethodAnonymous: Impersonate-User, Impersonate-Uid,
//     Impersonate-Group (one value per group) and
//     Impersonate-Extra-<%-escaped key> for effective. Returns true: the
//     proxy's own credentials must authenticate the request.
//
// Groups the upstream impersonation filter adds by itself are left out
// (system:authenticated, or system:unauthenticated for system:anonymous) so
// that the proxy does not need impersonate permission on them; everything
// is encoded so that the upstream reconstructs exactly effective (for a
// service account user the groups are always sent explicitly, otherwise
// the upstream would add the service account groups on its own).
//
// If the identity cannot be expressed (nil caller or user, empty user name,
// token caller without token, unknown method) nothing is set and false is
// returned: the request reaches the upstream unauthenticated, never with
// the proxy's credentials.
func ApplyUpstreamIdentity(h http.Header, caller *Caller, effective user.Info) (useProxyCredentials bool) {
	deleteFold(h, "Authorization")
	for k := range h {
		if hasPrefixFold(k, "Impersonate-") {
			delete(h, k)
		}
	}
	if caller == nil || caller.User == nil || effective == nil || effective.GetName() == "" {
		return false
	}
	switch caller.Method {
	case MethodToken:
		if caller.Token == "" {
			return false
		}
		h.Set("Authorization", "Bearer "+caller.Token)
		if !sameUser(caller.User, effective) {
			setImpersonation(h, effective)
			if groupsImpliedForServiceAccount(effective) {
				// kube-apiserver checks the impersonation against the
				// caller's token: one that may impersonate the service
				// account need not be allowed to impersonate its groups,
				// which kube-apiserver adds itself when none are sent.
				delete(h, authenticationv1.ImpersonateGroupHeader)
			}
		}
		return false
	case MethodX509, MethodAnonymous:
		setImpersonation(h, effective)
		return true
	default:
		return false
	}
}

// setImpersonation writes the Impersonate-* headers for u into h, which
// holds none (ApplyUpstreamIdentity removed them). The keys are assigned in
// their canonical spelling, as http.Header.Set and Add would store them,
// without canonicalizing the constant ones on every request.
func setImpersonation(h http.Header, u user.Info) {
	name := u.GetName()
	h[authenticationv1.ImpersonateUserHeader] = []string{name}
	if uid := u.GetUID(); uid != "" {
		h[authenticationv1.ImpersonateUIDHeader] = []string{uid}
	}
	if groups := impersonatedGroups(name, u.GetGroups()); len(groups) > 0 {
		h[authenticationv1.ImpersonateGroupHeader] = groups
	}
	extra := u.GetExtra()
	if len(extra) == 0 {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if len(extra[k]) == 0 {
			continue
		}
		// Keys that differ only in case share one header, as with Add.
		key := textproto.CanonicalMIMEHeaderKey(authenticationv1.ImpersonateUserExtraHeaderPrefix + headerKeyEscape(k))
		h[key] = append(h[key], extra[k]...)
	}
}

// impersonatedGroups returns the Impersonate-Group values that make the
// upstream's impersonation filter reconstruct groups for user name.
func impersonatedGroups(name string, groups []string) []string {
	if _, _, err := serviceaccount.SplitUsername(name); err == nil {
		// Without any Impersonate-Group the upstream would add the service
		// account groups itself; send the groups verbatim instead.
		if len(groups) == 0 {
			return []string{user.AllAuthenticated}
		}
		return slices.Clone(groups) // the header's own: the user's stay as they are
	}
	// The upstream adds system:unauthenticated to system:anonymous unless
	// present, and system:authenticated to everybody else unless
	// system:authenticated or system:unauthenticated is present.
	implicit := user.AllAuthenticated
	if name == user.Anonymous {
		implicit = user.AllUnauthenticated
	} else if slices.Contains(groups, user.AllUnauthenticated) {
		implicit = ""
	}
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		if g != implicit {
			out = append(out, g)
		}
	}
	return out
}

// sameUser reports whether a and b are the same identity.
func sameUser(a, b user.Info) bool {
	if a.GetName() != b.GetName() || a.GetUID() != b.GetUID() {
		return false
	}
	ga, gb := slices.Clone(a.GetGroups()), slices.Clone(b.GetGroups())
	slices.Sort(ga)
	slices.Sort(gb)
	if !slices.Equal(ga, gb) {
		return false
	}
	ea, eb := a.GetExtra(), b.GetExtra()
	nonEmpty := func(m map[string][]string) int {
		n := 0
		for _, v := range m {
			if len(v) > 0 {
				n++
			}
		}
		return n
	}
	if nonEmpty(ea) != nonEmpty(eb) {
		return false
	}
	for k, v := range ea {
		if len(v) > 0 && !slices.Equal(v, eb[k]) {
			return false
		}
	}
	return true
}

// keepsInHeaderKey reports whether c goes into an Impersonate-Extra- header
// name as itself.
func keepsInHeaderKey(c byte) bool {
	return isTokenChar(c) && c != '%' && (c < 'A' || c > 'Z')
}

// headerKeyEscape %-encodes an extra key for an Impersonate-Extra- header:
// every byte that is not an HTTP token character, '%' itself, and upper
// case letters. kube-apiserver lower-cases the header name before it
// decodes it, so a key with upper case sent as is would arrive as another
// key than the one authorized (client-go's impersonating round tripper
// has that flaw); sent %-encoded, it arrives as it is.
func headerKeyEscape(key string) string {
	i := 0
	for i < len(key) && keepsInHeaderKey(key[i]) {
		i++
	}
	if i == len(key) {
		return key
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(key)+8)
	b = append(b, key[:i]...)
	for ; i < len(key); i++ {
		c := key[i]
		if !keepsInHeaderKey(c) {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

// isTokenChar reports whether c is an RFC 7230 tchar.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	default:
		return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
	}
}

// deleteFold deletes header name from h under any spelling of its key.
func deleteFold(h http.Header, name string) {
	for k := range h {
		if strings.EqualFold(k, name) {
			delete(h, k)
		}
	}
}

// headerFold returns the first value of header name under any spelling.
func headerFold(h http.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// groupsImpliedForServiceAccount reports whether u is a service account
// whose groups are exactly the ones kube-apiserver gives an impersonated
// service account sent without any Impersonate-Group.
func groupsImpliedForServiceAccount(u user.Info) bool {
	namespace, _, err := serviceaccount.SplitUsername(u.GetName())
	if err != nil {
		return false
	}
	implied := append(serviceaccount.MakeGroupNames(namespace), user.AllAuthenticated)
	groups := u.GetGroups()
	if len(groups) != len(implied) {
		return false
	}
	for _, g := range implied {
		if !slices.Contains(groups, g) {
			return false
		}
	}
	return true
}
