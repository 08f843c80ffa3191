/*
Package authn decides who the caller of a request is, whether the caller may
act as someone else, and how that identity is presented to the upstream
kube-apiserver. It is a library: the proxy package composes these functions
into its handler chain and its ReverseProxy.Rewrite; authn has no handlers of
its own and does not import the proxy package.

# Threat model

The proxy holds credentials that are stronger than its callers': to serve
client-certificate callers it must be allowed to impersonate any user, group,
uid and extra, and it can create TokenReviews and SubjectAccessReviews. Any
request that reaches the upstream on the proxy's credentials with a
caller-chosen identity is a privilege escalation to cluster-admin. The job of
this package is to make sure that the identity the upstream sees is exactly
the identity the proxy authenticated (and, for Impersonate-*, authorized),
and that the proxy's credentials are used only when that identity is carried
in headers the proxy itself wrote.

Trusted:
  - the TLS layer: the client certificate chain in http.Request.TLS, verified
    here against the client CA bundle (x509.NewDynamic with the
    dynamiccertificates CAContentProvider, so a rotated bundle is picked up).
    Successful verifications are remembered for at most a minute, keyed by a
    hash of the CA bundle and of every presented certificate, and never past
    the earliest NotAfter; a reloaded bundle or another chain is verified
    afresh, and failures are never cached (certcache.go). The requests of one
    connection share its parsed certificates, so the same verifications are
    also found by the leaf's *x509.Certificate, if the whole parsed chain and
    the CA bundle's hash match too: the entry holds the certificate, so its
    address cannot be reused while the entry exists;
  - the upstream's answers to TokenReview and SubjectAccessReview, made with
    the proxy's own credentials;
  - nothing else. Every request header is attacker-controlled.

Authentication uses k8s.io/apiserver's own authenticators and nothing
home-grown: x509.CommonNameUserConversion (CN is the user, O the groups),
bearertoken over the TokenReview webhook authenticator behind the token cache
(positive and negative TTLs; the cache keys on an HMAC of the token, not the
token), the anonymous authenticator when explicitly enabled, and the
authenticated-group adder. A verified certificate wins over a token. A
presented credential that fails is a 401 even when anonymous access is on,
as in kube-apiserver. An unauthenticated request gets a 401 and nothing is
sent upstream.

# What is stripped, and why

SanitizeInbound runs on the outbound copy of every request and removes, in
any spelling of the header name:

  - Authorization and Proxy-Authorization: the caller's credential must never
    reach the upstream on a request that carries the proxy's credentials.
    (client-go's bearer round tripper does not even overwrite an existing
    Authorization header.) Token callers get their token re-set explicitly.
  - Impersonate-*: a caller's impersonation request is resolved by
    ResolveImpersonation (SubjectAccessReview, 403 if denied) and the result
    is re-encoded from scratch; raw caller headers are never forwarded, or
    "Impersonate-User: system:admin" would be evaluated against the proxy's
    impersonation rights instead of the caller's.
  - X-Remote-*: kube-apiserver's front-proxy (requestheader) headers. They
    only count when the request is authenticated by a requestheader client
    certificate, but the proxy must never be the thing that makes them count.
  - X-Forwarded-*, Forwarded, X-Real-Ip: unverified claims about the client.
  - the base64url.bearer.authorization.k8s.io.<token> entry of
    Sec-WebSocket-Protocol: kube-apiserver authenticates it like an
    Authorization header on WebSocket requests.
  - Connection, every header the Connection header names, Keep-Alive and
    Proxy-Connection. "Connection: Impersonate-User, Authorization" asks every
    HTTP intermediary to delete those headers: applied after the proxy set its
    identity headers it would delete them (for a token caller: turn the
    request anonymous; for a certificate caller: drop the impersonation and
    leave the request running as the proxy itself). The only thing kept is a
    protocol upgrade: "Connection: Upgrade" plus the Upgrade header, which
    exec, attach, port-forward and WebSocket streams need.

# Why identity headers are set after hop-by-hop removal

httputil.ReverseProxy removes the hop-by-hop headers (including those named
in Connection) after the Director function runs and before Rewrite runs. An
identity header set in a Director can therefore be removed by the caller's
Connection header; one set in Rewrite cannot. So the proxy calls
SanitizeInbound and then ApplyUpstreamIdentity from Rewrite (or on the cloned
request handed to the upgrade-aware handler, which does no hop-by-hop
processing at all and sends the request as is), never from a Director. The
tests demonstrate both behaviours with a real ReverseProxy.

# Token passthrough versus impersonation

A bearer caller's own token is passed through unchanged. The upstream then
authenticates, authorizes, admits and audits the caller exactly as it would
without the proxy, and a token the upstream no longer accepts stops working
at once regardless of the proxy's cache. If the caller asked to impersonate
and the proxy allowed it, the Impersonate-* headers for the resulting user
are added and the upstream checks that impersonation again, against the
caller's token. A service account impersonated with exactly the groups
kube-apiserver gives it goes without Impersonate-Group, as the caller sent
it: the caller needs no right to impersonate those groups.

Such a request must go upstream on a transport that carries no credentials
of the proxy's own, and in particular no client certificate:
kube-apiserver tries x509 before bearer tokens, so a proxy certificate on the
connection would authenticate the request as the proxy and the caller's
token would be ignored. ApplyUpstreamIdentity returns false for these
requests ("do not use the proxy's credentials"); the proxy routes them
through an anonymous-TLS transport that only verifies the server.

A client-certificate caller has nothing that can be passed through, so the
proxy authenticates as itself and impersonates the caller: Impersonate-User,
Impersonate-Group (one value per group), Impersonate-Uid and
Impersonate-Extra-<%-escaped key> for the effective user, encoded so that
the upstream's impersonation filter reconstructs exactly that user (the
groups the filter adds itself, system:authenticated or
system:unauthenticated, are not sent; a service-account name always gets
explicit groups so the filter does not add the service-account groups on
its own; an extra key's upper case letters are %-escaped too, since
kube-apiserver lower-cases a header name before it decodes it; a user the
filter cannot reconstruct, such as a certificate naming system:anonymous
without system:unauthenticated, is refused with 401). The proxy's identity
therefore needs "impersonate" on users,
groups, serviceaccounts, uids and userextras (an x509 user carries the
authentication.kubernetes.io/credential-id extra), plus create on
tokenreviews and subjectaccessreviews. Anonymous callers, when enabled, are
impersonated as system:anonymous the same way, so they work even where the
upstream disables anonymous access.

If the identity cannot be expressed (empty user name, missing token, unknown
method), ApplyUpstreamIdentity sets nothing and returns false: the request
reaches the upstream unauthenticated, never with the proxy's credentials.

# The write path: the proxy's credentials only after authorization

To decide about a write, the proxy does work with its own credentials: it
reads the stored object and the parent, applies the caller's patch to the
stored object, starts informer caches (cluster-wide lists and watches), and
writes the parent (reserving a once approval, recording controllers and the
lifecycle phase). Each of these is a privilege the caller may not have.
Done before kube-apiserver has judged the caller, they turn the proxy into
an oracle and a lever: a JSON patch that copies /data into /kind makes the
proxy's "cannot change kind" error print a Secret the caller may not read; a
write the caller may not make still reserves and restores an approval,
bumping the parent's generation; a made-up resource spelling starts a
cluster-wide cache.

So the interceptor (intercept/access) asks first, with the cached
SubjectAccessReview authorizer of this package (Authenticator.Authorizer),
whether the effective user may do the request's verb on its resource in its
namespace; only if that is denied is the object's name reviewed too (RBAC
resourceNames). The answers are cached by the whole review (user, groups,
uid, extras, verb, group, resource, namespace, name) for
--authorization-cache-ttl and --authorization-failure-cache-ttl, so a
controller's writes make no extra round trip once the first was reviewed.
The cache sits in front of k8s.io/apiserver's webhook authorizer (whose own
cache is off, as it JSON-encodes the review on every lookup) and keys on
the same fields, each length-prefixed, with groups in order and extras
sorted; a review that failed is never cached, and it holds at most 8192
answers. A denial is kube-apiserver's own 403, word for word, and nothing was read,
decoded, cached or written for the request. A review that cannot be made
follows --failure-policy: 503 with Fail, forwarded undecided with Ignore.

After authorization the proxy still bounds what a caller can make it do:
errors it writes itself name fields, never stored values, and a drift
message shows stored values only to a caller who may get the object, never
for a Secret; JSON patches have kube-apiserver's operation and copy-size
limits; the desired-state diff is linear in the object's size; bodies are
read under the request's deadline; mutating requests are limited in flight
(429 with Retry-After); only canonical resource names reach the caches,
whose number is bounded, and Secrets are never cached. A once approval is
reserved on the parent only after a server-side dry run as the caller shows
that kube-apiserver will accept the write. It is put back only when the
write provably did not land: kube-apiserver refused it (4xx), or, after an
answer that does not say, the object is stored exactly as it was read once
the write can no longer land (it is forwarded with what is left of the
proxy's own deadline as its timeout at kube-apiserver). A
reservation is recorded in a ConfigMap of the proxy's namespace, so another
replica can settle it when its own died; such a record is data anyone with
write access to that namespace could forge, so it is honoured only while
the parent names it in kausality.io/reservations, which the reservation's
own patch wrote: a forged record cannot put an approval on a parent its
author may not write.

# Status and scale writes, and who holds the controls

RBAC rarely separates an operator's service account from the objects it
manages, and kube-apiserver's status strategies for most built-in kinds
(Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob,
ReplicationController, Service, Namespace, HPA, PDB) keep
metadata.annotations: a status write is an annotation write. So approvals,
rejections, freeze, snooze and mode are a person's controls. An update by a
user recorded as the written object's own controller (its
kausality.io/controllers, or the field manager owning
status.observedGeneration) that would store a changed control is refused
with a 403 through PUT, every patch type, server-side apply and /status. A
/status write never changes a kausality.io annotation people set, whoever
writes it. System annotations (trace, updaters, controllers, phase,
observedGeneration, reservations) are put back to their stored values on
every write shape. A control edit by someone the cached copy does not name
as controller is decided again on a live read, so a lagging cache lets no
controller through. A /scale write takes only the replicas from its body.

Controller identity is recorded from the status writes the proxy forwards,
and anybody who may write a parent's status can report any
observedGeneration. A user is recorded only when the generation it reports
is not beyond the parent's generation as kube-apiserver stores it (read
fresh when the record is written). The record holds at most five users, a
newcomer never pushes one out, and only a person who is not in the record
may empty it (kubectl kausality reset-controllers). Recorded hashes are 80
bits, so no chosen name matches one; Kausality's 5-character hashes count
only while the record holds no long hash.

Text the proxy writes to callers is escaped before a terminal sees it
(annotation text and user names are chosen by others), and a denial names
the parent and quotes its annotations only to a caller the authorizer
allows to get the parent.

# Approval policies are untrusted input

ApprovalPolicies are written by whoever administers a namespace, and the
proxy evaluates them on the write path, so their cost is bounded. At
compile time: at most 64 rules; each CEL expression's estimated cost,
assuming any value as large as the largest request, within kube-apiserver's
per-expression limit; regexps at most 1024 bytes and 4096 compiled
instructions, and CEL regex patterns literal. At run time: a write is
matched once, under the request's deadline, within 2.5M cost units, and a
request within 10M; regexps are charged by input size times program size.
Running out means no approval, a warning to the writer and BudgetExceeded
in the policy's status. An ApprovalPolicy approves writes only in its own
namespace; only a ClusterApprovalPolicy, which needs cluster-level rights
to write, approves across namespaces.

# Drift records, reservations and Slack: data in the proxy's namespace

Drift records are ConfigMaps the proxy writes with its own credentials
because of what a controller's denied write contained. A record never
copies the written object: it keeps references, the request, at most 20
truncated changes and the objects' identity and trace, within 16 KiB. Each
controller (the authenticated user) and each parent has a quota in records
and bytes, and each controller a rate limit on new drifts: a flood fills
only its own quota, is logged and counted once, and other controllers'
reports keep flowing. A global cap degrades per controller, by fair share.
DriftReport receivers are outside the trust boundary: kausality-proxy
backend log prints only reports that carry its bearer token.

A reservation record can be forged or rewritten by anyone who may write
ConfigMaps in the proxy's namespace, so a record alone never restores an
approval. The patch that takes a once approval off the parent also writes,
in the parent's system annotation kausality.io/reservations, the record's
name and the SHA-256 of its exact stored bytes; another replica acts on an
orphaned record only while the parent vouches for exactly those bytes. The
proxy never updates a record, so a claim that loses its precondition
re-reads it: a changed record is treated as forged, removed and logged, and
the reserving replica settles from what it wrote itself. The worst such a
user can do is leave an approval spent, which deleting the record could do
anyway.

The Slack interaction endpoint trusts only Slack's signature, and a click is
written with the proxy's credentials: anyone who can click in the channel
holds approve, reject and snooze authority over drifted writes (the stamp
records the Slack user). A click names only a drift id; parent and child
come from the open drift record, the click must come from that drift's
message in its channel, namespaces the proxy never gates are never written,
and the click's signature is recorded on the record before anything is
written, which refuses replays across replicas and restarts. Restrict the
authority with a private channel given to --slack-channel as a channel id.

# Connections and bounded work before authentication

Any answer the proxy gives before it has the whole body (401, 403, 413,
429, 504, or an early upstream answer) goes out at once; over HTTP/1.1 it
ends the connection and the rest of the body is never read, so a client
that trickles its body holds no goroutine. An HTTP/2 connection without
credentials is closed with GOAWAY after its request, as kube-apiserver
does. A request that is not long-running must deliver its body within
--request-timeout (or its shorter ?timeout=) or get a 504 Status. Metric
labels come only from resources kube-apiserver has served and a fixed set
of verbs. A deletecollection is listed page by page, as metadata unless the
caller's policies need whole objects, and decided per object as it comes,
so its memory does not grow with the objects' size; the forwarded request
is pinned to the decided list, and the caller's options travel in a body so
the pin never becomes a precondition the caller did not ask for.

# Identity values must survive the header

The identity the proxy presents upstream is re-encoded into Impersonate-*
header values. A value with leading or trailing white space, CR, LF or
another control character is not the same value on the other side: HTTP/1.1
parsers trim white space (a certificate with O=" system:masters" would be a
member of system:masters), HTTP/2 keeps it. ValidateIdentity refuses such
identities: a caller's with 401, an impersonated one with 400. And only real
streaming requests (exec, attach, port-forward, proxy, watches) take the
HTTP/1.1 upgrade path; any other request that asks for an upgrade is served
as the plain request it is.

# Impersonation requested by callers

ResolveImpersonation mirrors the legacy rules of
k8s.io/apiserver/pkg/endpoints/filters/impersonation.WithImpersonation (see
its documentation for the details and the few deliberate, stricter
differences). The upstream's constrained impersonation (KEP-5284,
impersonate-on:* verbs) is not evaluated; a caller that holds only
constrained impersonation permissions is denied by the proxy.
# Settledness records: what replicas share about parents

What replicas learn of parents' settledness (the spec each parent last
settled at, and since which generation it has had its current spec) is kept
in ConfigMaps in the proxy's namespace, one per parents' namespace, written
only with the proxy's credentials, with resourceVersion preconditions and a
merge that gives the same result in any order. A caller of the proxy, a
controller included, changes it only through what the parent reports as
kube-apiserver stores it; it cannot mark a settled parent "not settled" to
open an expected window. Anyone who may write ConfigMaps in the proxy's
namespace can rewrite a record, as with drift records: that can make
replicas lenient or strict about that parent until it settles again, but can
never approve a write. A replica is not ready until it has read the records.

# Reporting beside the write path

Reporting drift (records, DriftReports, Slack) sits beside the write path in
package report and receives only decided writes, through an Observe call that
never blocks: a reporting failure cannot fail or change a write. Without its
namespace the proxy is not ready (its readiness names the namespace and the
--drift-namespace flag), and drifts found meanwhile wait for the namespace
instead of being dropped. Drift records hold strings taken from controllers'
writes; kubectl kausality drifts and the make run console escape control
characters and escape sequences, so a record cannot rewrite what a person on
call sees. Every action of kubectl kausality drifts is a patch of the parent
with the person's own credentials, guarded by resourceVersion.

# Lean caches: a verdict never stands on a partial object

Children are cached as metadata only, parents without their managedFields
(except the owner of status.observedGeneration). A verdict made from a
child's cached metadata stands only when it cannot depend on the child's
content: an allowed Expected write, no parent, a deleting parent, an allowed
delete. Any other verdict reads the child live with the proxy's credentials
and is decided again; if that read fails, the failure policy applies as for
any fact that cannot be resolved. A stale metadata cache can make a write
look like a desired-state change, never hide one.

# Allowances

kausal.io/allowances is a system annotation: its stored value is kept on
every write shape, subresources included, and a create cannot set it. Only
the proxy is to write it. Allowances only ever permit, so they fail safe:
broken or oversized JSON counts as none, an invalid AllowancePolicy grants
nothing. A chain of allowances starts only at an authenticated writer that a
policy names with mayInitiate, never at a controller. Whoever may write
AllowancePolicies can grant any controller anything: RBAC on them is as
sensitive as on ClusterApprovalPolicy. kausality.io/allowance-mode is a
person's control, which a parent's own controller cannot change. Allowances
only ever hold more than drift gating does: a write drift gating denies
stays denied, and an allowance denial sends nothing upstream. A replica is
not ready until its AllowancePolicy cache has synced.
*/
package authn
