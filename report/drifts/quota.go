package drifts

import (
	"time"
)

// Defaults of the quotas and rate limits. A record holds at most
// MaxRecordBytes, so the records of one controller take at most
// DefaultControllerBytes of etcd, and all of them at most
// 2 × DefaultMaxRecords × MaxRecordBytes (160 MiB), far below etcd's quota.
const (
	DefaultControllerRecords = 200
	DefaultControllerBytes   = 1 << 20
	DefaultParentRecords     = 100
	DefaultParentBytes       = 512 << 10
	// DefaultControllerRate and DefaultControllerBurst limit the new drifts
	// one controller may have recorded: a burst of 50 (a rollout that
	// drifts many children at once), then one a second.
	DefaultControllerRate  = 1.0
	DefaultControllerBurst = 50
	// DefaultFloodQuiet is how long a controller must have had no drift
	// suppressed before a new suppression counts as a new flood.
	DefaultFloodQuiet = 5 * time.Minute
	// DefaultCreateGrace is how long after a denied create the child may
	// still come into being before its drift counts as over.
	DefaultCreateGrace = 5 * time.Minute
)

// Quotas bound the drift records in the cluster, per controller (the user
// whose write drifted) and per parent, in records and in bytes, so that
// one controller's flood of denied writes fills its own quota and nobody
// else's. A parent's quota is shared the same way among the users counted
// as its controller (a second recorded controller, or, while no record
// names one, whoever sends its field manager): past ParentRecords (or
// ParentBytes), a controller still records while it holds less than its
// share of them, so that no writer can use up the parent's quota and silence
// the reports of its real controller. Past twice the quota a writer still
// records while it holds less than a fifth of it, so that the users a
// controllers record can name (five) all find room; at three times
// nothing more is recorded for the parent. Total is a safety cap on all records: past it, a namespace and a
// controller may still record while each holds less than its fair share
// (Total divided by the namespaces, or the controllers, holding records),
// so the ones flooding are cut off, not the others; a tenant whose
// namespace runs many controllers cannot fill the cap alone. At twice
// Total nothing more is recorded.
type Quotas struct {
	ControllerRecords int
	ControllerBytes   int64
	ParentRecords     int
	ParentBytes       int64
	Total             int
}

// Usage is what some records take.
type Usage struct {
	Records int
	Bytes   int64
}

// QuotaFacts are the records a new one would join.
type QuotaFacts struct {
	// Controller and Parent are the records of the new record's
	// controller and parent.
	Controller, Parent Usage
	// ParentController are the parent's records of the new record's
	// controller, and ParentControllers how many controllers hold
	// records of the parent, the new record's included.
	ParentController  Usage
	ParentControllers int
	// Total counts all records.
	Total int
	// Controllers is how many controllers hold records, the new record's
	// included.
	Controllers int
	// Namespace are the records of the new record's namespace, and
	// Namespaces how many namespaces hold records, its own included.
	Namespace  Usage
	Namespaces int
	// Size of the new record.
	Size int64
}

// parentWriters is how many writers a parent's quota is sure to leave
// room for: a kausality.io/controllers record names at most five users.
// Past twice the quota, a writer still records while it holds less than
// a fifth of it; at three times nothing more is recorded.
const parentWriters = 5

// Reasons a drift is not recorded for a quota or a rate limit; the values
// are metric labels.
const (
	QuotaControllerRecords = "controller_records"
	QuotaControllerBytes   = "controller_bytes"
	QuotaParentRecords     = "parent_records"
	QuotaParentBytes       = "parent_bytes"
	QuotaTotal             = "total"
	QuotaNamespaceShare    = "namespace_share"
	QuotaRate              = "rate"
)

// Admit decides whether a new record fits the quotas: "" when it does,
// otherwise the quota it would exceed.
func Admit(q Quotas, f QuotaFacts) string {
	switch {
	case f.Controller.Records >= q.ControllerRecords:
		return QuotaControllerRecords
	case f.Controller.Bytes+f.Size > q.ControllerBytes:
		return QuotaControllerBytes
	case f.Parent.Records >= 3*q.ParentRecords,
		f.Parent.Records >= 2*q.ParentRecords && f.ParentController.Records >= max(1, q.ParentRecords/parentWriters),
		f.Parent.Records >= q.ParentRecords && f.ParentController.Records >= max(1, q.ParentRecords/max(1, f.ParentControllers)):
		return QuotaParentRecords
	case f.Parent.Bytes+f.Size > 3*q.ParentBytes,
		f.Parent.Bytes+f.Size > 2*q.ParentBytes && f.ParentController.Bytes+f.Size > q.ParentBytes/parentWriters,
		f.Parent.Bytes+f.Size > q.ParentBytes && f.ParentController.Bytes+f.Size > q.ParentBytes/int64(max(1, f.ParentControllers)):
		return QuotaParentBytes
	case f.Total >= 2*q.Total:
		return QuotaTotal
	case f.Total >= q.Total && f.Namespace.Records >= max(1, q.Total/max(1, f.Namespaces)):
		return QuotaNamespaceShare
	case f.Total >= q.Total && f.Controller.Records >= max(1, q.Total/max(1, f.Controllers)):
		return QuotaTotal
	}
	return ""
}

// quotaDescription says, for a person, which bound was reached.
func quotaDescription(reason string) string {
	switch reason {
	case QuotaControllerRecords:
		return "the controller holds the most drift records it may"
	case QuotaControllerBytes:
		return "the controller's drift records hold the most bytes they may"
	case QuotaParentRecords:
		return "the parent holds the most drift records it may"
	case QuotaParentBytes:
		return "the parent's drift records hold the most bytes they may"
	case QuotaTotal:
		return "the cluster holds the most drift records it may, and the controller holds at least its share"
	case QuotaNamespaceShare:
		return "the cluster holds the most drift records it may, and the namespace holds at least its share"
	case QuotaRate:
		return "the controller has new drifts faster than they may be reported"
	}
	return reason
}
