// Package intercept decides about writes. The proxy hands every request to
// Interceptor.Wrap; reads and non-targeted writes go straight to the
// forwarder. Intercepted writes are read, decoded, turned into the effective
// new object, judged by the decision engine (intercept/decision) and then
// forwarded (possibly with annotations added) or rejected with a Status.
//
// Which writes are intercepted (see classify.go):
//   - create, update, patch and delete of resources the rules target;
//   - status-subresource writes, to record controller identity and the
//     lifecycle phase on the written object. They are never gated, but
//     kube-apiserver keeps metadata.annotations on the status writes of
//     most built-in kinds, so one that changes a kausality.io annotation
//     people set is refused, and system annotations are kept as stored;
//   - whatever the shape of a write, the written object's own controller
//     may not change the object's approvals, rejections, freeze, snooze
//     or mode (decision.OwnControlsRefused);
//   - /scale writes, as writes of the scaled object's replicas field
//     (spec.replicas, or a custom resource's specReplicasPath), confirmed
//     with kube-apiserver as other writes are (its dry run answers the
//     Scale it would store); the trace lands on the scaled object in a
//     follow-up patch (sidewrites);
//   - deletecollection, as a DELETE of every object it would delete (the
//     proxy lists them with the request's selectors, a page at a time and
//     as metadata unless the caller's approval policies read more, and
//     decides each as it comes); one that may not be deleted refuses the
//     whole request, which is never narrowed to the rest: its success
//     would say that everything matching is gone. The forwarded request
//     is pinned to the decided list (resourceVersion with
//     resourceVersionMatch=Exact), so an object created after the list is
//     not deleted undecided; the caller's options then travel
//     in a body, since kube-apiserver would turn a body-less request's
//     resourceVersion into every delete's precondition. A caller's own
//     resourceVersion stays only where it holds the request to the list
//     already (exact, or that precondition). Per-object preconditions are
//     only ever the caller's (collection.go);
//   - pods/eviction, as a DELETE of the pod; its body, in any format, says
//     whether it is a dry run;
//   - namespaces/finalize and certificatesigningrequests/approval, as
//     status writes: kube-apiserver keeps the metadata of their bodies;
//   - a Binding (pods/binding, or the bindings resource) is no decided
//     write, but kube-apiserver copies its annotations onto the pod, so
//     one that carries a kausality annotation is refused (package binding);
//   - pods/resize and pods/ephemeralcontainers, as a change of the pod's
//     spec, forwarded as they came: kube-apiserver takes only that part
//     of the spec from them and keeps the stored metadata;
//   - not intercepted, forwarded untouched: every other subresource
//     (token, ...: kube-apiserver keeps the stored metadata for them), and
//     reads.
//
// What goes upstream: a JSON create or update, and a merge or strategic
// merge patch without top-level metadata, is forwarded as the caller's own
// bytes with only the proxy's metadata written in (package patch); every
// other body is encoded anew from what was decided. The proxy decides on
// the decoding kube-apiserver applies to those bytes (sigs.k8s.io/json:
// case-sensitive, the last of duplicate members wins); a body in which a
// member the proxy writes or decides on (apiVersion, kind, metadata, its
// annotations, resourceVersion, namespace) is duplicated, empty or not a
// string is encoded anew instead, so kube-apiserver cannot read another
// object than the one decided.
//
// dryRun=All is decided like any write, the decision is returned in Warning
// headers, and nothing is consumed, written or reported.
//
// Before any of this, the caller must be authorized for the write
// (package access): the proxy reads and writes with credentials stronger
// than any caller's, so it does nothing for a write kube-apiserver would
// refuse.
//
// One write goes one way, and each file is entered once: classify
// (classify.go, final: nothing later rewrites it) → authorize (access,
// from serve.go, which orchestrates) → decide (decideOne in decide.go,
// which owns everything up to the verdict: it has facts.go gather the
// write's own facts, the body read and decoded once, the stored object,
// the effective new object, into one facts value that nothing changes
// afterwards; reads the surroundings, the parent and the namespace;
// builds the input of the pure decision package; and, when the decision
// says it needs more, decision.Needs: a live read of the object,
// kube-apiserver's dry-run result, a fresh parent, who may read what,
// fetches it into a new facts value, the reads in parallel, and decides
// again) → act (act in act.go: refuse, or prepare the request, preflight
// it, reserve its once approval and forward it through the one port to
// kube-apiserver, package upstream; the parent writes and DriftReports
// after success) → record (log.go). A write whose state moved under it
// (a once approval's reservation conflicted, or the precondition the
// proxy added failed) goes round again on fresh state (decideAgain), at
// most decision.MaxRounds times, and a client that sent no
// resourceVersion never gets a 409 for it. What a patch or a /scale
// write makes of the stored object is computed by the pure patch package
// (patch.FromStored), in the first round and for every live read of a
// later one. A deletecollection is the same steps for each object it
// would delete: facts.go gathers the request's own facts, collection.go
// lists the objects and has decide.go decide each once (decideMember),
// the pure decision.Collection combines the verdicts, and act.go acts on
// the request once; an object whose parent moved under its reservation
// is decided again (decideAgain) as one write is. What fails is
// answered as failures.go says (the failure policy carried out). Build
// makes the parts (build.go); interceptor.go is the facade.
//
// Pure, no I/O (table-tested on their own; the linter's depguard rule
// "pure" keeps client-go, net/http and time.Now out of them): allowance,
// annotations, approval, body, controllerid, decision (the verdict, and
// the write path's rules in writepath.go), decisionlog, desired, history,
// lifecycle, patch, policy (ApprovalPolicy matching, and the Ready
// condition of every policy kind), rules, settle, trace. I/O: objects
// (informer caches and live reads with the proxy's credentials), access
// (the caller's SubjectAccessReviews), upstream (kube-apiserver as the
// caller), sidewrites (the proxy's own writes around a forwarded write:
// a decision's parent annotations, once approvals reserved, put back and
// settled, orphans included, the trace of a /scale write), reservations
// (the records of reserved once approvals), subresources (where a custom
// resource's /scale keeps its replicas, and whether its status is written
// with the object), policywatch (the ApprovalPolicy,
// ClusterApprovalPolicy and AllowancePolicy informers, compiled once per
// generation, and the writer of their Ready condition), settlements (the
// parents' settledness shared by the replicas), config (the --config
// file and its watcher), and this package's files, which carry out one
// write. Reporting drift to people is beside the write path, in report;
// this package hands it decided writes through report.Reporter and
// nothing else.
package intercept
