// Package stackgrow grows the calling goroutine's stack in one step, early.
//
// Go starts a goroutine with a small stack and doubles it whenever a call
// does not fit. Each doubling copies the stack and adjusts every frame on
// it, so growing a doubling at a time, deep in a call chain, costs more
// than growing once near its top. Every request runs on a fresh goroutine:
// a pass-through write outgrows the initial stack once, in authentication,
// and an intercepted write needs close to 32 KiB (the write path's frames
// are large) and grows two or three times. A caller that knows how much it
// is about to need asks for it while its stack is still shallow.
package stackgrow

// To8K makes the calling goroutine's stack at least 8 KiB, unless the
// caller already uses more than about 3 KiB of it; a stack that is large
// enough is left as it is.
func To8K() { _ = frame4K(0) }

// To32K makes the calling goroutine's stack at least 32 KiB, unless the
// caller already uses more than about 7 KiB of it; a stack that is large
// enough is left as it is.
func To32K() { _ = frame24K(0) }

// The runtime grows a stack that cannot hold the next frame to the
// smallest doubling that can: with a shallow caller, 8 KiB for a 4 KiB
// frame and 32 KiB for a 24 KiB one. The index keeps the compiler from
// dropping the frames.

//go:noinline
func frame4K(i int) byte {
	var frame [4 << 10]byte
	return frame[i]
}

//go:noinline
func frame24K(i int) byte {
	var frame [24 << 10]byte
	return frame[i]
}
