package patch

import "strconv"

// NamesVersion reports whether a write's resourceVersion rv is a
// precondition. kube-apiserver parses it as an unsigned integer and takes
// 0 ("0", "00") as no resourceVersion at all: such a write is applied
// unconditionally to what is stored (genericregistry Store.Update), as
// one naming none. One that does not parse is refused as it is.
func NamesVersion(rv string) bool {
	n, err := strconv.ParseUint(rv, 10, 64)
	return rv != "" && (err != nil || n != 0)
}

// SameVersion reports whether kube-apiserver reads resourceVersions a and
// b as the same version: as unsigned integers when both are ("007" is 7),
// else as the same string.
func SameVersion(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA == nil && errB == nil {
		return x == y
	}
	return a == b
}
