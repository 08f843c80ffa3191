package allowance

import "slices"

// Read-only views of a compiled policy, for explaining to a person which
// policies name a controller and what they let it do.

// Names reports whether s is one of the policy's subjects, and whether an
// entry it matches may initiate.
func (c *Compiled) Names(s Subject) (named, mayInitiate bool) { return c.matchesSubject(s) }

// Allows lists the mutations the policy allows on children of kind.
func (c *Compiled) Allows(kind string) []string {
	var out []string
	for _, a := range c.allow {
		if a.kind == kind {
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

// AllowedKinds are the child kinds the policy allows mutations of, in the
// order it lists them.
func (c *Compiled) AllowedKinds() []string {
	var out []string
	for _, a := range c.allow {
		if !slices.Contains(out, a.kind) {
			out = append(out, a.kind)
		}
	}
	return out
}
