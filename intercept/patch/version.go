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
