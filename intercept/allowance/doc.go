// Package allowance is field-level causality: which mutations a controller
// may make to a child, because someone allowed to start it changed which
// field of the parent.
//
// A change of a parent by a subject a policy lets initiate adds allowances
// to the parent's kausal.io/allowances annotation (Initiate). A
// controller's write of a child is checked against the parent's
// unconsumed allowances (Use), and the child's own policies then grant
// allowances one level further down, the trace extended by the child
// (Propagate). An allowance is consumed once the parent has settled at or
// after the generation that created it (Consumed, Prune).
//
// No I/O and no clock: the write path hands in the objects, the caller's
// identity, the compiled AllowancePolicies and the settledness facts, and
// applies what it gets back.
package allowance
