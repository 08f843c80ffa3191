package decision

// StandsOnMetadata reports whether d, decided with only the stored child's
// metadata (its spec, data and status unknown, so every write looks like a
// desired-state change), is the decision the whole child would give. It is
// when the verdict follows from who writes under which parent alone: an
// allowed controller write carrying out its parent's change, a write with
// no parent or under a deleting one, an allowed delete (a delete changes
// desired state whatever the child holds). Anything else (a drift, a
// denial, a new origin, an approval to reserve, a server check) depends on
// what the write changes, and is decided again on the whole child.
func (d *Decision) StandsOnMetadata(op Operation) bool {
	if d.Result != Allow || d.Drift || d.ConfirmWithServer || d.RecheckController || d.ApprovalsUpdate != nil || d.ConsumeOnce {
		return false
	}
	if op == Delete {
		return true
	}
	if d.Allowances != nil && d.Allowances.Checked && !d.Allowances.StandsOnWrite {
		// The allowances a write needs are its changed fields.
		return false
	}
	switch d.Category {
	case Expected, NoParent, ParentDeleting:
		return true
	}
	return false
}
