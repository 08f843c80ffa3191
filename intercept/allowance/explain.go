package allowance

import "slices"

// Read-only views of a compiled policy, for explaining to a person which
// policies name a controller and what they let it do.

// Names reports whether s is one of the policy's subjects, and whether an
// entry it matches may initiate.
func (c *Compiled) Names(s Subject) (named, mayInitiate bool) { return c.matchesSubject(s) }

// Allows lists the mutations the policy allows on children of the group
// and kind.
func (c *Compiled) Allows(group, kind string) []string {
	var out []string
	for _, a := range c.allow {
		if a.kind == kind && groupMatches(a.group, group) {
			out = append(out, a.mutations...)
		}
	}
	return out
}

// Fields are the parent's field paths whose change the policy speaks of.
func (c *Compiled) Fields() []string {
	out := make([]string, len(c.fields))
	for i, f := range c.fields {
		out[i] = render(f)
	}
	return out
}

// AllowedKind is a child kind a policy allows mutations of; a nil group
// means the kind in every group.
type AllowedKind struct {
	Group *string
	Kind  string
}

// String names the kind as a person reads it: "ReplicaSet.apps", "Pod"
// for the core group, the bare kind when every group is meant.
func (k AllowedKind) String() string {
	if k.Group == nil || *k.Group == "" {
		return k.Kind
	}
	return k.Kind + "." + *k.Group
}

// AllowedKinds are the child kinds the policy allows mutations of, in the
// order it lists them.
func (c *Compiled) AllowedKinds() []AllowedKind {
	var out []AllowedKind
	for _, a := range c.allow {
		k := AllowedKind{Group: a.group, Kind: a.kind}
		if !slices.ContainsFunc(out, func(o AllowedKind) bool { return o.Kind == k.Kind && equalGroup(o.Group, k.Group) }) {
			out = append(out, k)
		}
	}
	return out
}

func equalGroup(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// SpeaksOf reports whether the policy names the group and kind as its
// parent's, valid or not, so that a person sees an invalid policy that
// would otherwise apply.
func (c *Compiled) SpeaksOf(group, kind string) bool {
	return c != nil && c.kind == kind && groupMatches(c.group, group)
}
