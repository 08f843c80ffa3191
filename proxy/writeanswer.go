package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"

	"k8s.io/apiserver/pkg/endpoints/request"
)

// maxBufferedAnswer bounds the answer to a write that is read whole before
// any of it is passed on; a larger one (a deletecollection's list) streams.
const maxBufferedAnswer = 8 << 20

// forwardResponse checks an upstream answer before ReverseProxy sends any
// of it to the caller: an error makes the caller get a Status instead.
func forwardResponse(resp *http.Response) error {
	if err := rejectRedirects(resp); err != nil {
		return err
	}
	return readWriteAnswer(resp)
}

// readWriteAnswer reads the answer to a write whole before its status line
// is passed on. Streamed, an answer that breaks off half-way (kube-apiserver
// killed, the connection cut) can only be passed on broken: the caller's
// HTTP/2 stream is reset, and it learns nothing but a transport error. Read
// first, the caller gets a 502 Status that says what happened, like every
// other failure the proxy reports. Reads (watches, logs) stream as before,
// and so does the proxy subresource, whose answers are not the API's.
func readWriteAnswer(resp *http.Response) error {
	req := resp.Request
	if req == nil || !answerReadWhole(req) {
		return nil
	}
	if resp.ContentLength > maxBufferedAnswer {
		return nil
	}
	buf := answerBuffers.Get().(*bytes.Buffer)
	// Sized once when the length is known, as it is for most answers.
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBufferedAnswer+1))
	read := buf.Bytes()
	if err != nil {
		_ = resp.Body.Close()
		recycleAnswerBuffer(buf)
		return fmt.Errorf("its answer to this %s broke off after %d bytes, and the write may have been applied (read the object before retrying): %w",
			req.Method, len(read), err)
	}
	if len(read) > maxBufferedAnswer {
		rest := resp.Body
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(read), rest), rest}
		return nil
	}
	_ = resp.Body.Close()
	answer := &bufferedAnswer{buf: buf}
	answer.Reset(read)
	resp.Body = answer
	resp.ContentLength = int64(len(read))
	return nil
}

// answerReadWhole reports whether the answer to r is read whole before it
// is passed on: a write's, unless it is to the proxy subresource.
func answerReadWhole(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	info, ok := request.RequestInfoFrom(r.Context())
	return !ok || info.Subresource != "proxy"
}

// maxPooledAnswerBuffer bounds the buffers kept for reuse, so that one
// large answer does not pin its memory in the pool.
const maxPooledAnswerBuffer = 256 << 10

// answerBuffers spares every write an allocation of its answer's size.
var answerBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func recycleAnswerBuffer(buf *bytes.Buffer) {
	if buf.Cap() > maxPooledAnswerBuffer {
		return
	}
	buf.Reset()
	answerBuffers.Put(buf)
}

// bufferedAnswer is a write's answer read whole. Close gives its buffer
// back: ReverseProxy closes the body once it has copied it to the caller,
// and a read after Close finds nothing rather than another answer's bytes.
type bufferedAnswer struct {
	bytes.Reader
	buf *bytes.Buffer
}

func (a *bufferedAnswer) Close() error {
	if a.buf != nil {
		a.Reset(nil)
		recycleAnswerBuffer(a.buf)
		a.buf = nil
	}
	return nil
}
