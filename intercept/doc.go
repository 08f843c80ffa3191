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
//     follow-up patch (scale.go);
//   - deletecollection, as a DELETE of every object it would delete (the
//     proxy lists them with the request's selectors, a page at a time and
//     as metadata unless the caller's approval policies read more, and
//     decides each as it comes); one that may not be deleted refuses the
//     whole request, which is never narrowed to the rest: its success
//     would say that everything matching is gone. The forwarded request
//     is pinned to the decided list (resourceVersion with
//     resourceVersionMatch=Exact), so an object created or changed after
//     the list is not deleted undecided; the caller's options then travel
//     in a body, since kube-apiserver would turn a body-less request's
//     resourceVersion into every delete's precondition. Per-object
//     preconditions are only ever the caller's (collection.go);
//   - pods/eviction, as a DELETE of the pod; its body, in any format, says
//     whether it is a dry run;
//   - not intercepted, forwarded untouched: every other subresource
//     (binding, token, ephemeralcontainers, resize, ...), and reads.
//
// dryRun=All is decided like any write, the decision is returned in Warning
// headers, and nothing is consumed, written or reported.
//
// Before any of this, the caller must be authorized for the write
// (authorize.go): the proxy reads and writes with credentials stronger than
// any caller's, so it does nothing for a write kube-apiserver would refuse.
//
// One write goes one way, and each step is a file entered once:
// classify (classify.go, final: nothing later rewrites it) → authorize
// (authorize.go) → gather the facts (facts.go: the body read and decoded
// once, the stored object, the effective new object, the parent, the
// namespace, all in one facts value that nothing changes afterwards) →
// decide (decide.go: the input of the pure decision package) → when the
// decision says it needs more (decision.Needs: a live read of the object,
// kube-apiserver's dry-run result, a fresh parent, who may read what),
// fetch it into a new facts value (refetch.go, the reads in parallel) and
// decide again → act (act.go: refuse, or prepare the request and forward
// it through the one upstream port; the parent writes and DriftReports
// after success) → record (log.go). serve.go orchestrates and is the only
// file that forwards. A write whose state moved under it (a once
// approval's reservation conflicted, or the precondition the proxy added
// failed) goes round again on fresh state, at most decision.MaxRounds
// times, and a client that sent no resourceVersion never gets a 409 for
// it. A deletecollection is the same steps for each object it would
// delete; collection.go lists them and combines their verdicts
// (decision.CollectionVerdict). Once approvals are reserved and settled
// in reservations.go (its records in package reservations), with the
// parent writes of parentwrites.go. Build makes the parts (build.go).
//
// Pure, no I/O (table-tested on their own; the linter's depguard rule
// "pure" keeps client-go, net/http and time.Now out of them): allowance,
// annotations, approval, body, controllerid, decision (the verdict, and
// the write path's rules in writepath.go), decisionlog, desired, history,
// lifecycle, patch, policy (ApprovalPolicy matching), rules, settle,
// trace. I/O: objects (informer caches and live reads with the proxy's
// credentials), reservations (records of reserved once approvals),
// settlements (the parents' settledness shared by the replicas), config
// (the --config file and its watcher), and this package's files, which
// carry out the decisions (approvalpolicies.go watches the approval
// policies and writes their status). Reporting drift to people is beside
// the write path, in report; this package hands it decided writes
// through report.Reporter and nothing else.
package intercept
