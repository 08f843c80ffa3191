// Package drifts keeps the open drifts in the cluster and tells people
// about them: DriftReports to the --drift-webhook-url receivers and, when
// configured, a Slack escalation.
//
// Every replica records what its write path detects; one replica sends.
//
//   - Recording. A Detected decision is recorded as a ConfigMap in the
//     proxy's namespace, named after the drift id. Creating it is the
//     claim: when two replicas (or two retries of a denied controller)
//     see the same drift, one create succeeds and the others find it
//     there. Recording is asynchronous and bounded, so it never slows or
//     fails a write: a full queue drops the record, counted and logged;
//     the controller's next retry of the same write records it again.
//   - Bounding. A record keeps a summary of the drift (references,
//     request, truncated changes, the objects' identity and last trace
//     hops), at most MaxRecordBytes, never the objects: it is written with
//     the proxy's credentials for whatever a controller sent. Quotas per
//     controller and per parent, and a rate limit per controller, keep one
//     controller's flood of denied writes from filling the namespace or
//     crowding out other controllers' reports; a flood is logged once.
//   - Sending. The replica holding the Lease sends. It watches the
//     records, delivers each phase to each receiver in order (Detected,
//     then Resolved), with retries and backoff, and writes down in the
//     record what was delivered, so a new leader (after a restart or a
//     crash) continues where the old one stopped and a receiver gets each
//     phase of each drift once, apart from a delivery whose acknowledgement
//     was lost in the crash.
//   - Resolving. The sender decides when a drift has ended from the
//     parent's and the child's informers, not from the next write: the
//     parent's spec changed, an approval for the child was added, the
//     child (or the parent) was deleted, a denied create's child still
//     does not exist a grace period later, or a newer drift of the same
//     pair superseded it. A periodic recheck covers objects no informer
//     holds (Secrets). Once every receiver has the Resolved report, the
//     record is deleted.
//
// A Slack click names only a drift id. Clicks reads that drift's record
// live from the cluster, on whichever replica Slack reached, and records
// the click on it before it is applied, so a click counts once across
// replicas and restarts.
//
// A snoozed parent's drift is held: it is neither delivered nor escalated
// until the snooze expires (the write path still denies it in enforce
// mode).
package drifts
