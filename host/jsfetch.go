package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
)

// jsMaxTimers is how many timers a JS handler may have waiting at once: each is an
// entry the drive loop keeps on the host, so their number is bounded as the heap is.
const jsMaxTimers = 1000

// jsBodyChunk is the size of each read of a response body that fetch takes whole.
const jsBodyChunk = 64 << 10

// jsBodyShare bounds a response body a JS handler reads whole to this fraction of its
// QuickJS heap (jsVM.limit), below max_response when that is larger. The body is in
// guest memory up to four times at once (the copy passed in, its Uint8Array, and for
// text() the copy passed back in and the string), so a fifth leaves the handler room
// for its own; past it the read fails as too large, a value the handler can catch,
// instead of QuickJS running out of memory, which ends the job as a trap.
const jsBodyShare = 5

// jsPending is a promise the host resolves, made by the engine's qjs_new_promise: the
// head of a request (handle >= 0) or a timer (handle -1). resolve and reject are the
// promise's resolving functions, owned by the host until it calls or drops them.
type jsPending struct {
	handle  int32
	timer   float64 // the prelude's id of a timer
	due     time.Time
	seq     uint64 // timers due at the same time fire in the order they were set
	resolve uint32
	reject  uint32
}

// errJSPromise is a promise the engine could not make (its memory is exhausted).
var errJSPromise = errors.New("qjs_new_promise failed")

// fetchOp runs the ops of outbound HTTP, timers and UTF-8 (jsOpFetch and after),
// called from within host_call.
func (vm *jsVM) fetchOp(ctx context.Context, st *callState, op int, arg func(int) uint32) (uint32, error) {
	switch op {
	case jsOpFetch:
		if st.http.client == nil {
			h, msg := st.httpStart(vm.reqCtx, nil, nil, nil, nil) // refused: no grant
			vm.startErr = msg
			return vm.number(ctx, float64(h))
		}
		// Each argument is refused by its length before it is copied, and copied once:
		// a refused start counts toward no max_requests, and a loop of them must not
		// make the host copy megabytes per call.
		var args [4][]byte
		for i, most := range [4]int64{outbound.MaxRequestHeader, outbound.MaxRequestHeader, outbound.MaxRequestHeader, st.http.client.Grant().MaxRequestBody} {
			b, n, err := vm.argBytesUpTo(ctx, arg(i+1), most)
			if err != nil {
				return 0, err
			}
			if n > most {
				// The messages of outbound's own checks, which these run ahead of.
				msg := fmt.Sprintf("the body of %d bytes passes max_request_body (%d bytes)", n, most)
				if i < 3 {
					msg = fmt.Sprintf("%s %d bytes, past %d", [3]string{"the method takes", "the URL takes", "the headers take"}[i], n, most)
				}
				e := &outbound.Error{Kind: outbound.KindRequestTooLarge, Msg: msg}
				st.emit(slog.LevelWarn, "fetch: "+e.Error())
				vm.startErr = e.Error()
				return vm.number(ctx, float64(httpStatusOf(e.Kind)))
			}
			args[i] = b
		}
		h, msg := st.httpStart(vm.reqCtx, args[0], args[1], args[2], args[3])
		vm.startErr = msg
		return vm.number(ctx, float64(h))
	case jsOpFetchHead:
		h, err := vm.argHandle(ctx, arg(1))
		if err != nil || st.http.calls[h] == nil {
			return 0, err
		}
		return vm.newPending(ctx, jsPending{handle: h})
	case jsOpFetchError:
		h, err := vm.argHandle(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		msg := vm.startErr
		if h >= 0 {
			c := st.http.calls[h]
			if c == nil || c.err == nil {
				return 0, nil
			}
			msg = c.err.Error()
		}
		return vm.newString(ctx, vm.in, []byte(msg))
	case jsOpFetchInfo:
		h, err := vm.argHandle(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		_, resp, _ := st.httpHead(vm.reqCtx, h)
		if resp == nil {
			return 0, nil
		}
		// resp.Status is "201 Created"; a redirect's request carries the response
		// that caused it.
		text := strings.TrimSpace(strings.TrimPrefix(resp.Status, fmt.Sprint(resp.StatusCode)))
		redirected := "0"
		if resp.Request.Response != nil {
			redirected = "1"
		}
		info := text + "\n" + redirected + "\n" + resp.Request.URL.String() + "\n" + string(headerLines(resp.Header))
		return vm.newString(ctx, vm.in, []byte(info))
	case jsOpFetchBody:
		h, err := vm.argHandle(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		bound, err := vm.argNumber(ctx, arg(2))
		if err != nil {
			return 0, err
		}
		body, s := vm.readBody(st, h, bound != 0)
		if s != 0 {
			return vm.number(ctx, float64(s))
		}
		return vm.newBytes(ctx, vm.in, "qjs_new_uint8_array", body)
	case jsOpFetchClose:
		h, err := vm.argHandle(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		if c := st.http.calls[h]; c != nil {
			c.call.Close()
			delete(st.http.calls, h)
		}
		delete(vm.bodies, h)
		return 0, vm.dropWhere(ctx, vm.in, func(p *jsPending) bool { return p.handle == h })
	case jsOpTimer:
		id, err := vm.argNumber(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		ms, err := vm.argNumber(ctx, arg(2))
		if err != nil {
			return 0, err
		}
		if vm.timers >= jsMaxTimers || math.IsNaN(id) {
			return 0, nil
		}
		if math.IsNaN(ms) || ms < 0 {
			ms = 0
		}
		d := time.Duration(min(ms, float64(math.MaxInt64/int64(time.Millisecond)))) * time.Millisecond
		return vm.newPending(ctx, jsPending{handle: -1, timer: id, due: time.Now().Add(d)})
	case jsOpTimerCancel:
		id, err := vm.argNumber(ctx, arg(1))
		if err != nil {
			return 0, err
		}
		return 0, vm.dropWhere(ctx, vm.in, func(p *jsPending) bool { return p.handle < 0 && p.timer == id })
	case jsOpEncode:
		s, ok, err := vm.argString(ctx, arg(1))
		if err != nil || !ok {
			return 0, err
		}
		return vm.newBytes(ctx, vm.in, "qjs_new_uint8_array", []byte(s))
	case jsOpDecode:
		b, ok, err := vm.argBytes(ctx, arg(1))
		if err != nil || !ok {
			return 0, err
		}
		fatal, err := vm.argNumber(ctx, arg(2))
		if err != nil {
			return 0, err
		}
		if fatal == 1 && !utf8.Valid(b) {
			return 0, nil
		}
		return vm.newString(ctx, vm.in, []byte(strings.ToValidUTF8(string(b), "\uFFFD")))
	}
	return 0, nil
}

// argHandle reads a request handle; a non-number is -1, which names no request.
func (vm *jsVM) argHandle(ctx context.Context, v uint32) (int32, error) {
	f, err := vm.argNumber(ctx, v)
	if err != nil || !(f >= 0 && f <= math.MaxInt32) {
		return -1, err
	}
	return int32(f), nil
}

// jsBodyPending is what readBody returns for a body not yet whole when the drive
// loop has something else to do first: the prelude yields to it (a timer due now)
// and asks again.
const jsBodyPending = 1

// jsBody is a response body that readBody is reading: the bytes so far, and the read
// of the next chunk, which runs on its own goroutine so that readBody can return to
// the drive loop while it blocks.
type jsBody struct {
	body []byte
	buf  []byte       // the chunk's buffer, the goroutine's until it sends on read
	read chan jsChunk // the chunk read under way; nil when none is
}

type jsChunk struct {
	n   int
	err error
}

// readBody reads a response's body whole, up to the grant's max_response (the
// request's own bound) and what the handler's memory can take (jsBodyShare): its
// bytes, or a negative status. A body announced past the latter fails before it is
// read. It returns jsBodyPending, keeping what it read, once the job's deadline passes
// or the host shuts down, and when bound also once the next timer is due or a request
// head the handler waits on comes in: the drive loop then fires the timer (an abort
// closes the request) or ends the job.
func (vm *jsVM) readBody(st *callState, h int32, bound bool) ([]byte, int32) {
	c, resp, s := st.httpHead(vm.reqCtx, h)
	if resp == nil {
		return nil, s
	}
	most := int64(vm.limit / jsBodyShare)
	tooLarge := func() int32 {
		delete(vm.bodies, h)
		return st.httpFail(c, &outbound.Error{Kind: outbound.KindTooLarge, Msg: fmt.Sprintf(
			"the body passes %d bytes, the most this JS handler reads whole (a fifth of its QuickJS heap of %d bytes, set by memory in the manifest): raise memory",
			most, vm.limit)})
	}
	if resp.ContentLength > most {
		return nil, tooLarge()
	}
	b := vm.bodies[h]
	if b == nil {
		b = &jsBody{buf: make([]byte, jsBodyChunk)}
		if vm.bodies == nil {
			vm.bodies = map[int32]*jsBody{}
		}
		vm.bodies[h] = b
	}
	for {
		if b.read == nil {
			b.read = make(chan jsChunk, 1)
			rctx, buf, read := vm.reqCtx, b.buf, b.read
			// It ends when the body does, fails or is closed (the request's close, at
			// the latest when its job ends: runJob waits for it then).
			vm.reads.Add(1)
			go func() {
				defer vm.reads.Done()
				n, err := c.call.Read(rctx, buf)
				read <- jsChunk{n, err}
			}()
		}
		r, ok := vm.nextChunk(st, b.read, bound)
		if !ok {
			return nil, jsBodyPending
		}
		b.read = nil
		b.body = append(b.body, b.buf[:r.n]...)
		switch {
		case int64(len(b.body)) > most:
			return nil, tooLarge()
		case errors.Is(r.err, io.EOF):
			delete(vm.bodies, h)
			return b.body, 0
		case r.err != nil:
			delete(vm.bodies, h)
			return nil, st.httpFail(c, r.err)
		}
	}
}

// nextChunk waits for a chunk read. It gives up (ok false) when the job's deadline
// passes or the host shuts down, and when bound also when the drive loop has to run
// first: the next timer is due or a head of vm.pending is in.
func (vm *jsVM) nextChunk(st *callState, read chan jsChunk, bound bool) (jsChunk, bool) {
	select {
	case r := <-read:
		return r, true
	default:
	}
	until := vm.deadline
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(read)}, {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(vm.outer.Done())}}
	for _, p := range vm.pending {
		switch {
		case !bound:
		case p.handle < 0:
			until = minTime(until, p.due)
		case st.http.calls[p.handle] != nil:
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(st.http.calls[p.handle].call.Done())})
		}
	}
	t := time.NewTimer(max(time.Until(until), 0))
	defer t.Stop()
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)})
	i, v, _ := reflect.Select(cases)
	if i != 0 {
		return jsChunk{}, false
	}
	return v.Interface().(jsChunk), true
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// newPending makes a promise the host resolves later (jsVM.wait) and returns it; 0
// with hostFail set when the engine's memory is exhausted.
func (vm *jsVM) newPending(ctx context.Context, p jsPending) (uint32, error) {
	out, err := vm.in1u(ctx, "malloc", 8)
	if err != nil {
		return 0, err
	}
	if out == 0 {
		vm.hostFail = "out of memory making a promise"
		return 0, nil
	}
	defer vm.in1(ctx, "free", uint64(out))
	promise, err := vm.in1u(ctx, "qjs_new_promise", uint64(out), uint64(out+4))
	if err != nil {
		return 0, err
	}
	if exc, err := vm.in1(ctx, "qjs_is_exception", uint64(promise)); err != nil || exc != 0 {
		if err == nil {
			err = errJSPromise
		}
		return 0, err
	}
	res, ok1 := vm.mem.ReadUint32Le(out)
	rej, ok2 := vm.mem.ReadUint32Le(out + 4)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("%w: its resolving functions are outside the guest's memory", errJSPromise)
	}
	p.resolve, p.reject = res, rej
	if p.handle < 0 {
		vm.timers++
	}
	if len(vm.pending) > 0 {
		p.seq = vm.pending[len(vm.pending)-1].seq + 1
	}
	vm.pending = append(vm.pending, p)
	return promise, nil
}

// dropWhere frees the resolving functions of the pending promises that match, which
// then never settle, and forgets them.
func (vm *jsVM) dropWhere(ctx context.Context, fns *jsFuncs, match func(*jsPending) bool) error {
	var err error
	vm.pending = slices.DeleteFunc(vm.pending, func(p jsPending) bool {
		if !match(&p) {
			return false
		}
		err = errors.Join(err, vm.freeResolvers(ctx, fns, p))
		if p.handle < 0 {
			vm.timers--
		}
		return true
	})
	return err
}

// dropPending drops every pending promise: the call that made them has ended.
func (vm *jsVM) dropPending(ctx context.Context, fns *jsFuncs) error {
	return vm.dropWhere(ctx, fns, func(*jsPending) bool { return true })
}

func (vm *jsVM) freeResolvers(ctx context.Context, fns *jsFuncs, p jsPending) error {
	if _, err := fns.get("qjs_free_value").Call(ctx, uint64(p.resolve)); err != nil {
		return err
	}
	_, err := fns.get("qjs_free_value").Call(ctx, uint64(p.reject))
	return err
}

// wait is the drive loop's wait, when the handler's promise is pending and no JS job
// is queued: it waits for the first request head of vm.pending that is in, or the
// next timer, at most until the job's deadline (or the host's shutdown: vm.interrupted
// is then set), and resolves that one promise. The engine then runs what it queued.
func (vm *jsVM) wait(ctx context.Context) error {
	var calls []*outbound.Call
	var index []int // the pending entry of each call
	next := -1      // the pending entry of the next timer
	st := &vm.inst.st
	for i, p := range vm.pending {
		if p.handle >= 0 {
			if c := st.http.calls[p.handle]; c != nil {
				calls = append(calls, c.call)
				index = append(index, i)
			}
			continue
		}
		if next < 0 || p.due.Before(vm.pending[next].due) || (p.due.Equal(vm.pending[next].due) && p.seq < vm.pending[next].seq) {
			next = i
		}
	}
	if len(calls) == 0 && next < 0 {
		// Heads of requests that are no longer open: nothing can resolve them.
		return vm.dropPending(ctx, vm.fn)
	}
	until := vm.deadline
	if next >= 0 && vm.pending[next].due.Before(until) {
		until = vm.pending[next].due
	}
	wctx, cancel := context.WithDeadline(vm.outer, vm.deadline)
	defer cancel()
	timeout := max(time.Until(until), 0)
	ready := -1
	if len(calls) > 0 {
		if i := outbound.Wait(wctx, calls, timeout); i >= 0 {
			ready = index[i]
		}
	} else if timeout > 0 {
		t := time.NewTimer(timeout)
		select {
		case <-t.C:
		case <-wctx.Done():
		}
		t.Stop()
	}
	if ready < 0 {
		switch {
		case vm.outer.Err() != nil || !time.Now().Before(vm.deadline):
			vm.interrupted = true
			return nil
		case next < 0 || time.Now().Before(vm.pending[next].due):
			return nil // woken before the timer is due: look again
		}
		ready = next
	}
	p := vm.pending[ready]
	vm.pending = slices.Delete(vm.pending, ready, ready+1)
	if p.handle < 0 {
		vm.timers--
	}
	value := 0.0
	if p.handle >= 0 {
		if _, resp, s := st.httpHead(vm.reqCtx, p.handle); resp != nil {
			value = float64(resp.StatusCode)
		} else {
			value = float64(s)
		}
	}
	return vm.settlePending(ctx, p, value)
}

// settlePending resolves a pending promise with a number (a head's status, or 0 for
// a timer) and frees its resolving functions. It is an outer call: resolving with a
// number runs no JS, it queues the promise's reactions as jobs.
func (vm *jsVM) settlePending(ctx context.Context, p jsPending, value float64) error {
	defer vm.freeResolvers(ctx, vm.fn, p)
	num, err := vm.fn.get("qjs_new_number").Call(ctx, api.EncodeF64(value))
	if err != nil {
		return err
	}
	arg := uint32(num[0])
	defer vm.call(ctx, "qjs_free_value", uint64(arg))
	if !vm.mem.WriteUint32Le(vm.argv, arg) {
		return fmt.Errorf("resolving a promise: the argument at %#x is outside the guest's memory", vm.argv)
	}
	_, err = vm.callJS(ctx, "qjs_call", uint64(p.resolve), uint64(vm.undef), 1, uint64(vm.argv))
	return err
}
