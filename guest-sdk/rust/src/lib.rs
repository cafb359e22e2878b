//! Write wasmjobs job handlers in Rust, for `wasm32-unknown-unknown` or `wasm32-wasi`.
//!
//! A handler is a function from a job to a [`Result`]: `Ok(())` acknowledges the job,
//! `Err(Settle)` retries, defers or dead-letters it. Register it with [`handler!`]:
//!
//! ```ignore
//! use wasmjobs::{Job, Result};
//!
//! fn greet(job: &Job) -> Result {
//!     let name = job.text();
//!     if name.is_empty() {
//!         return Err(wasmjobs::dead_letter("no name"));
//!     }
//!     job.output(format!("Hello, {}!", name).as_bytes())?;
//!     Ok(())
//! }
//!
//! wasmjobs::handler!(greet);
//! ```
//!
//! Build: `rustc --edition 2021 --crate-type cdylib --target wasm32-unknown-unknown -O
//! --extern wasmjobs=libwasmjobs.rlib greet.rs` (or `cargo build --target
//! wasm32-unknown-unknown --release` with `crate-type = ["cdylib"]`). A panic traps the
//! instance: the job fails and is retried.
//!
//! Fan-out and fan-in: stage children with [`Job::enqueue_awaited`] and return
//! `Err(wait_for_children())`; the job runs again at the same attempt once they have
//! ended, [`Job::round`] one higher, [`Job::children`] saying how each ended. A module
//! that calls them loads only where the backend keeps waiting jobs (not RabbitMQ).

use std::time::Duration;

#[cfg(target_arch = "wasm32")]
mod sys {
    #[link(wasm_import_module = "wasmjobs")]
    extern "C" {
        pub fn payload_len() -> i32;
        pub fn payload_read(buf: *mut u8, len: i32) -> i32;
        pub fn meta_read(key: i32, buf: *mut u8, len: i32) -> i32;
        pub fn attempt() -> i32;
        pub fn max_attempts() -> i32;
        pub fn header_read(key: *const u8, key_len: i32, buf: *mut u8, len: i32) -> i32;
        pub fn log(level: i32, msg: *const u8, len: i32);
        pub fn set_reason(msg: *const u8, len: i32);
        pub fn set_delay_ms(ms: i64);
        pub fn output_write(buf: *const u8, len: i32) -> i32;
        pub fn enqueue(queue: *const u8, queue_len: i32, payload: *const u8, payload_len: i32, delay_ms: i64) -> i32;
        // Fan-out and fan-in: imported only by a module that calls them.
        pub fn enqueue_awaited(queue: *const u8, queue_len: i32, payload: *const u8, payload_len: i32, delay_ms: i64) -> i32;
        pub fn round() -> i32;
        pub fn next_job(outcome: i32) -> i32;
        pub fn children_len() -> i32;
        pub fn child_read(index: i32, field: i32, buf: *mut u8, len: i32) -> i32;
        pub fn http_start(method: *const u8, method_len: i32, url: *const u8, url_len: i32, headers: *const u8, headers_len: i32, body: *const u8, body_len: i32) -> i32;
        pub fn http_status(handle: i32) -> i32;
        pub fn http_error_read(handle: i32, buf: *mut u8, len: i32) -> i32;
        pub fn http_headers_read(handle: i32, buf: *mut u8, len: i32) -> i32;
        pub fn http_url_read(handle: i32, buf: *mut u8, len: i32) -> i32;
        pub fn http_body_read(handle: i32, buf: *mut u8, len: i32) -> i32;
        pub fn http_close(handle: i32) -> i32;
        pub fn http_wait(handles: *const i32, n: i32, timeout_ms: i64) -> i32;
    }

    #[link(wasm_import_module = "wasi_snapshot_preview1")]
    extern "C" {
        fn clock_time_get(id: u32, precision: u64, time: *mut u64) -> u16;
    }

    /// The wall clock in milliseconds since the Unix epoch, through WASI (present on
    /// wasm32-unknown-unknown too: the host provides it to every module).
    pub fn now_unix_ms() -> i64 {
        let mut t = 0u64;
        // Clock 0 is CLOCK_REALTIME.
        if unsafe { clock_time_get(0, 1_000_000, &mut t) } != 0 {
            return 0;
        }
        (t / 1_000_000) as i64
    }
}

/// A stand-in for the host on other targets, so that the SDK's own tests run natively.
#[cfg(not(target_arch = "wasm32"))]
#[allow(clippy::missing_safety_doc)]
pub mod sys {
    use std::cell::RefCell;

    /// What the stand-in host holds and records.
    #[derive(Default, Debug)]
    pub struct Host {
        pub payload: Vec<u8>,
        /// Job id, queue, module, version, trace id, span id.
        pub meta: [String; 6],
        pub headers: Vec<(String, String)>,
        pub attempt: i32,
        pub max_attempts: i32,
        pub logs: Vec<(i32, String)>,
        pub reason: Option<String>,
        pub delay_ms: Option<i64>,
        pub output: Vec<u8>,
        pub children: Vec<(String, Vec<u8>, i64)>,
        /// The indexes in children of the awaited ones.
        pub awaited_children: Vec<usize>,
        /// The round, and the results of the last wait: per child its id, queue,
        /// state, reason, output and truncation byte.
        pub round: i32,
        pub awaited: Vec<[Vec<u8>; 6]>,
        /// The requests started: method, URL, header lines, body.
        pub requests: Vec<(String, String, String, Vec<u8>)>,
        /// What http_start returns for the next request when negative.
        pub start_status: i32,
        /// The stand-in responses, by handle.
        pub responses: Vec<Resp>,
        /// Handles http_wait reports ready, in order (others are not ready).
        pub ready: Vec<i32>,
        /// The wall clock, in milliseconds since the epoch.
        pub now_ms: i64,
    }

    /// A stand-in response: the handle of the n-th request started is n.
    #[derive(Default, Debug, Clone)]
    pub struct Resp {
        /// The status, or a failure status.
        pub status: i32,
        pub error: Option<String>,
        pub headers: String,
        pub url: String,
        pub body: Vec<u8>,
        /// Bytes handed out per read, at most (0: all at once).
        pub chunk: usize,
        /// A failure status after the body.
        pub body_error: i32,
        pub pos: usize,
        pub closed: bool,
    }

    thread_local! {
        /// The stand-in host of this thread.
        pub static HOST: RefCell<Host> = RefCell::new(Host::default());
    }

    unsafe fn bytes<'a>(p: *const u8, n: i32) -> &'a [u8] {
        if n == 0 { &[] } else { std::slice::from_raw_parts(p, n as usize) }
    }
    unsafe fn copy_out(src: &[u8], buf: *mut u8, len: i32) -> usize {
        let n = src.len().min(len as usize);
        if n > 0 { std::ptr::copy_nonoverlapping(src.as_ptr(), buf, n); }
        n
    }
    pub unsafe fn payload_len() -> i32 { HOST.with(|h| h.borrow().payload.len() as i32) }
    pub unsafe fn payload_read(buf: *mut u8, len: i32) -> i32 { HOST.with(|h| copy_out(&h.borrow().payload, buf, len) as i32) }
    pub unsafe fn meta_read(key: i32, buf: *mut u8, len: i32) -> i32 {
        HOST.with(|h| match h.borrow().meta.get(key as usize) {
            Some(v) => { copy_out(v.as_bytes(), buf, len); v.len() as i32 }
            None => -1,
        })
    }
    pub unsafe fn attempt() -> i32 { HOST.with(|h| h.borrow().attempt) }
    pub unsafe fn max_attempts() -> i32 { HOST.with(|h| h.borrow().max_attempts) }
    pub unsafe fn header_read(key: *const u8, key_len: i32, buf: *mut u8, len: i32) -> i32 {
        let key = bytes(key, key_len);
        HOST.with(|h| match h.borrow().headers.iter().find(|(k, _)| k.as_bytes() == key) {
            Some((_, v)) => { copy_out(v.as_bytes(), buf, len); v.len() as i32 }
            None => -1,
        })
    }
    pub unsafe fn log(level: i32, msg: *const u8, len: i32) {
        let m = String::from_utf8_lossy(bytes(msg, len)).into_owned();
        HOST.with(|h| h.borrow_mut().logs.push((level, m)));
    }
    pub unsafe fn set_reason(msg: *const u8, len: i32) {
        let m = String::from_utf8_lossy(bytes(msg, len)).into_owned();
        HOST.with(|h| h.borrow_mut().reason = Some(m));
    }
    pub unsafe fn set_delay_ms(ms: i64) { if ms >= 0 { HOST.with(|h| h.borrow_mut().delay_ms = Some(ms)); } }
    pub unsafe fn output_write(buf: *const u8, len: i32) -> i32 {
        HOST.with(|h| h.borrow_mut().output.extend_from_slice(bytes(buf, len)));
        len
    }
    pub unsafe fn enqueue(q: *const u8, ql: i32, p: *const u8, pl: i32, delay_ms: i64) -> i32 {
        if ql == 0 || delay_ms < 0 { return -2; }
        let q = String::from_utf8_lossy(bytes(q, ql)).into_owned();
        HOST.with(|h| h.borrow_mut().children.push((q, bytes(p, pl).to_vec(), delay_ms)));
        0
    }
    pub unsafe fn enqueue_awaited(q: *const u8, ql: i32, p: *const u8, pl: i32, delay_ms: i64) -> i32 {
        let s = enqueue(q, ql, p, pl, delay_ms);
        if s == 0 {
            HOST.with(|h| { let mut h = h.borrow_mut(); let i = h.children.len() - 1; h.awaited_children.push(i) });
        }
        s
    }
    pub unsafe fn round() -> i32 { HOST.with(|h| h.borrow().round) }
    // Outside a host's wasmjobs_serve next_job returns 0: the tests run no loop.
    #[allow(dead_code)]
    pub unsafe fn next_job(_outcome: i32) -> i32 { 0 }
    pub unsafe fn children_len() -> i32 { HOST.with(|h| h.borrow().awaited.len() as i32) }
    pub unsafe fn child_read(index: i32, field: i32, buf: *mut u8, len: i32) -> i32 {
        HOST.with(|h| {
            let h = h.borrow();
            match h.awaited.get(index as usize).filter(|_| index >= 0) {
                None => -1,
                Some(c) => match c.get(field as usize).filter(|_| field >= 0) {
                    None => -2,
                    Some(v) => { copy_out(v, buf, len); v.len() as i32 }
                },
            }
        })
    }
    fn text(p: *const u8, n: i32) -> String { String::from_utf8_lossy(unsafe { bytes(p, n) }).into_owned() }
    pub unsafe fn http_start(m: *const u8, ml: i32, u: *const u8, ul: i32, hd: *const u8, hl: i32, b: *const u8, bl: i32) -> i32 {
        HOST.with(|h| {
            let mut h = h.borrow_mut();
            if h.start_status < 0 { return h.start_status; }
            h.requests.push((text(m, ml), text(u, ul), text(hd, hl), bytes(b, bl).to_vec()));
            h.requests.len() as i32 - 1
        })
    }
    fn with_resp(handle: i32, f: impl FnOnce(&mut Resp) -> i32) -> i32 {
        HOST.with(|h| match h.borrow_mut().responses.get_mut(handle as usize) {
            Some(r) if !r.closed && handle >= 0 => f(r),
            _ => -1,
        })
    }
    pub unsafe fn http_status(handle: i32) -> i32 { with_resp(handle, |r| r.status) }
    pub unsafe fn http_error_read(handle: i32, buf: *mut u8, len: i32) -> i32 {
        with_resp(handle, |r| match &r.error {
            Some(e) => { copy_out(e.as_bytes(), buf, len); e.len() as i32 }
            None => -1,
        })
    }
    pub unsafe fn http_headers_read(handle: i32, buf: *mut u8, len: i32) -> i32 {
        with_resp(handle, |r| if r.status < 0 { r.status } else { copy_out(r.headers.as_bytes(), buf, len); r.headers.len() as i32 })
    }
    pub unsafe fn http_url_read(handle: i32, buf: *mut u8, len: i32) -> i32 {
        with_resp(handle, |r| if r.status < 0 { r.status } else { copy_out(r.url.as_bytes(), buf, len); r.url.len() as i32 })
    }
    pub unsafe fn http_body_read(handle: i32, buf: *mut u8, len: i32) -> i32 {
        with_resp(handle, |r| {
            if r.status < 0 { return r.status; }
            if len == 0 { return -2; }
            let rest = &r.body[r.pos..];
            if rest.is_empty() { return if r.body_error < 0 { r.body_error } else { 0 }; }
            let max = if r.chunk > 0 { r.chunk.min(len as usize) } else { len as usize };
            let n = copy_out(rest, buf, max as i32);
            r.pos += n;
            n as i32
        })
    }
    pub unsafe fn http_close(handle: i32) -> i32 { with_resp(handle, |r| { r.closed = true; 0 }) }
    pub unsafe fn http_wait(handles: *const i32, n: i32, _timeout_ms: i64) -> i32 {
        if n == 0 { return -2; }
        let hs = std::slice::from_raw_parts(handles, n as usize);
        HOST.with(|h| {
            let h = h.borrow();
            for r in &h.ready {
                if let Some(i) = hs.iter().position(|x| x == r) { return i as i32; }
            }
            -1
        })
    }
    /// The stand-in's wall clock.
    pub fn now_unix_ms() -> i64 { HOST.with(|h| h.borrow().now_ms) }
}

/// How a job is settled other than acknowledged: the error of a handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Run again after `delay` (None: the queue's backoff).
    Retry { reason: String, delay: Option<Duration> },
    /// Run again after `delay`, ahead of the queue, without using up an attempt.
    Defer { delay: Duration, reason: String },
    /// Move to the dead letters: retrying cannot help.
    DeadLetter { reason: String },
    /// Wait for the children staged with [`Job::enqueue_awaited`], then run again at
    /// the same attempt, [`Job::round`] one higher.
    Wait,
}

/// A host function's refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    NotFound,
    BadArgument,
    LimitExceeded,
    NotPermitted,
}

impl From<Status> for Settle {
    /// A refused host call retries the job, with the refusal as the reason.
    fn from(s: Status) -> Settle {
        retry(&format!("host refused: {:?}", s), None)
    }
}

fn status(code: i32) -> std::result::Result<(), Status> {
    match code {
        c if c >= 0 => Ok(()),
        -1 => Err(Status::NotFound),
        -3 => Err(Status::LimitExceeded),
        -4 => Err(Status::NotPermitted),
        _ => Err(Status::BadArgument),
    }
}

/// The result of a handler.
pub type Result = std::result::Result<(), Settle>;

/// Retry with a reason, after `delay` (None: the queue's backoff).
pub fn retry(reason: &str, delay: Option<Duration>) -> Settle {
    Settle::Retry { reason: reason.to_string(), delay }
}

/// Defer by `delay`, with a reason.
pub fn defer(delay: Duration, reason: &str) -> Settle {
    Settle::Defer { delay, reason: reason.to_string() }
}

/// Dead-letter with a reason.
pub fn dead_letter(reason: &str) -> Settle {
    Settle::DeadLetter { reason: reason.to_string() }
}

/// Waits for the children staged with [`Job::enqueue_awaited`]: they are published with
/// the settle, and once every one has ended the job runs again at the same attempt,
/// [`Job::round`] one higher, [`Job::children`] saying how each ended. Without an
/// awaited child it is a failure.
pub fn wait_for_children() -> Settle {
    Settle::Wait
}

/// How one child that the job's last wait awaited ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    pub id: String,
    pub queue: String,
    /// succeeded, dead, cancelled, or unfinished when the wait timed out first.
    pub state: String,
    /// Why it did not succeed; empty when it did.
    pub reason: String,
    /// Its last run's output, up to 16 KiB; `truncated` says it was cut.
    pub output: Vec<u8>,
    pub truncated: bool,
}

/// Log levels.
#[derive(Debug, Clone, Copy)]
pub enum Level {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

/// The job being handled.
pub struct Job(());

fn read_var(read: impl Fn(*mut u8, i32) -> i32) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 64];
    loop {
        let n = read(buf.as_mut_ptr(), buf.len() as i32);
        if n < 0 {
            return None;
        }
        if n as usize <= buf.len() {
            buf.truncate(n as usize);
            return Some(buf);
        }
        buf = vec![0u8; n as usize];
    }
}

impl Job {
    /// The job's payload.
    pub fn payload(&self) -> Vec<u8> {
        let n = unsafe { sys::payload_len() } as usize;
        let mut buf = vec![0u8; n];
        let got = unsafe { sys::payload_read(buf.as_mut_ptr(), n as i32) };
        buf.truncate(got.max(0) as usize);
        buf
    }
    /// The payload as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload()).into_owned()
    }
    fn meta(&self, key: i32) -> String {
        read_var(|b, n| unsafe { sys::meta_read(key, b, n) })
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default()
    }
    /// The job's id.
    pub fn id(&self) -> String { self.meta(0) }
    /// The job's queue.
    pub fn queue(&self) -> String { self.meta(1) }
    /// The running module's name.
    pub fn module(&self) -> String { self.meta(2) }
    /// The running module's version (sha256).
    pub fn version(&self) -> String { self.meta(3) }
    /// The trace id of the host's span the job runs in, as 32 lowercase hex digits, for
    /// the handler's own telemetry or logs to join the host's trace; empty when the host
    /// traces nothing.
    pub fn trace_id(&self) -> String { self.meta(4) }
    /// The span id of the host's span the job runs in, as 16 lowercase hex digits: the
    /// parent of any span the handler reports; empty when the host traces nothing.
    pub fn span_id(&self) -> String { self.meta(5) }
    /// The 1-based number of this execution.
    pub fn attempt(&self) -> i32 { unsafe { sys::attempt() } }
    /// How many executions are allowed.
    pub fn max_attempts(&self) -> i32 { unsafe { sys::max_attempts() } }
    /// A job header; keys are exact bytes.
    pub fn header(&self, key: &str) -> Option<String> {
        read_var(|b, n| unsafe { sys::header_read(key.as_ptr(), key.len() as i32, b, n) })
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }
    /// Logs a message.
    pub fn log(&self, level: Level, msg: &str) {
        unsafe { sys::log(level as i32, msg.as_ptr(), msg.len() as i32) }
    }
    /// Logs at info level.
    pub fn info(&self, msg: &str) { self.log(Level::Info, msg) }
    /// Logs at warn level.
    pub fn warn(&self, msg: &str) { self.log(Level::Warn, msg) }
    /// Appends to the job's output.
    pub fn output(&self, bytes: &[u8]) -> std::result::Result<(), Status> {
        status(unsafe { sys::output_write(bytes.as_ptr(), bytes.len() as i32) })
    }
    /// Stages a child job, as [`Job::enqueue`] does, that [`wait_for_children`] waits
    /// for. A module that calls it loads only on a host whose backend keeps waiting jobs.
    pub fn enqueue_awaited(&self, queue: &str, payload: &[u8], delay: Duration) -> std::result::Result<(), Status> {
        status(unsafe {
            sys::enqueue_awaited(queue.as_ptr(), queue.len() as i32, payload.as_ptr(), payload.len() as i32, delay.as_millis() as i64)
        })
    }
    /// 0 on a first run; n on the run after the job's n-th wait.
    pub fn round(&self) -> i32 { unsafe { sys::round() } }
    /// How each child the last wait awaited ended, in the order they were staged; empty
    /// on a first run.
    pub fn children(&self) -> Vec<Child> {
        let n = unsafe { sys::children_len() }.max(0);
        (0..n)
            .map(|i| {
                let field = |f: i32| read_var(|b, n| unsafe { sys::child_read(i, f, b, n) }).unwrap_or_default();
                let text = |f: i32| String::from_utf8_lossy(&field(f)).into_owned();
                Child { id: text(0), queue: text(1), state: text(2), reason: text(3), output: field(4), truncated: field(5) == [1] }
            })
            .collect()
    }
    /// Stages a child job, published after `delay` if this job succeeds.
    pub fn enqueue(&self, queue: &str, payload: &[u8], delay: Duration) -> std::result::Result<(), Status> {
        status(unsafe {
            sys::enqueue(queue.as_ptr(), queue.len() as i32, payload.as_ptr(), payload.len() as i32, delay.as_millis() as i64)
        })
    }
}

/// The kind of an outbound HTTP failure: the ABI's status (abi/SPEC.md, "Outbound
/// HTTP (added)").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpErrorKind {
    /// -1: the handle is unknown or closed.
    Closed,
    /// -2: a bad method, URL or header (or a read into an empty buffer).
    BadArgument,
    /// -3: request headers or body past the limits.
    LimitExceeded,
    /// -4: the module has no `[http]` grant.
    NotPermitted,
    /// -10: the URL, or a redirect hop's, is outside the grant; nothing was sent to it.
    Denied,
    /// -11: the name resolved only to addresses a name grant does not reach.
    Blocked,
    /// -12: the name did not resolve.
    Dns,
    /// -13: the connection was refused.
    Refused,
    /// -14: the TLS handshake failed.
    Tls,
    /// -15: the grant's timeout or the job's deadline passed.
    Timeout,
    /// -16: the body passed the grant's `max_response`, or the caller's bound.
    TooLarge,
    /// -17: the call already started `max_requests` requests.
    TooManyRequests,
    /// -18: a wait for a limit of `[http.limits]` would pass the deadline.
    RateLimited,
    /// -19: the destination's circuit breaker is open.
    CircuitOpen,
    /// -20: the connection failed otherwise.
    Connection,
    /// -21: more than 5 redirects.
    TooManyRedirects,
    /// A status this SDK does not know.
    Other,
}

impl HttpErrorKind {
    /// The kind of an ABI status.
    pub fn from_code(code: i32) -> HttpErrorKind {
        use HttpErrorKind::*;
        match code {
            -1 => Closed,
            -2 => BadArgument,
            -3 => LimitExceeded,
            -4 => NotPermitted,
            -10 => Denied,
            -11 => Blocked,
            -12 => Dns,
            -13 => Refused,
            -14 => Tls,
            -15 => Timeout,
            -16 => TooLarge,
            -17 => TooManyRequests,
            -18 => RateLimited,
            -19 => CircuitOpen,
            -20 => Connection,
            -21 => TooManyRedirects,
            _ => Other,
        }
    }
    /// The kind's name, as the ABI's table spells it.
    pub fn name(self) -> &'static str {
        use HttpErrorKind::*;
        match self {
            Closed => "closed",
            BadArgument => "bad argument",
            LimitExceeded => "limit exceeded",
            NotPermitted => "not permitted",
            Denied => "denied",
            Blocked => "blocked address",
            Dns => "dns",
            Refused => "refused",
            Tls => "tls",
            Timeout => "timeout",
            TooLarge => "too large",
            TooManyRequests => "too many requests",
            RateLimited => "rate limited",
            CircuitOpen => "circuit open",
            Connection => "connection",
            TooManyRedirects => "too many redirects",
            Other => "unknown",
        }
    }
}

/// An outbound HTTP failure: the ABI's status and the host's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    code: i32,
    message: String,
}

impl HttpError {
    fn new(code: i32, message: String) -> HttpError {
        HttpError { code, message }
    }
    /// The failure read from the host for a request's handle.
    fn of(handle: i32, code: i32) -> HttpError {
        let msg = read_var(|b, n| unsafe { sys::http_error_read(handle, b, n) })
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_else(|| HttpErrorKind::from_code(code).name().to_string());
        HttpError::new(code, msg)
    }
    /// The ABI's status (-1 to -4, -10 to -21).
    pub fn code(&self) -> i32 { self.code }
    /// The kind of failure.
    pub fn kind(&self) -> HttpErrorKind { HttpErrorKind::from_code(self.code) }
    /// The host's message (or, for a refusal of the start, the kind's name).
    pub fn message(&self) -> &str { &self.message }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The host's message starts with the kind's name already ("denied: ...").
        write!(f, "http error {}: {}", self.code, self.message)
    }
}

impl std::error::Error for HttpError {}

impl From<HttpError> for Settle {
    /// A failed request retries the job with the queue's backoff, the failure as the reason.
    fn from(e: HttpError) -> Settle {
        retry(&e.to_string(), None)
    }
}

impl From<HttpError> for std::io::Error {
    fn from(e: HttpError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::Other, e)
    }
}

/// An outbound HTTP request, built then sent (or started) under the module's `[http]`
/// grant:
///
/// ```ignore
/// let mut resp = wasmjobs::Request::post("https://api.example.com/v1/mail")
///     .header("Content-Type", "application/json")
///     .body(br#"{"to":"a@b.co"}"#.to_vec())
///     .send()?;                        // an HttpError retries the job
/// if resp.status() == 429 || resp.status() == 503 {
///     return Err(wasmjobs::retry_after(&resp));
/// }
/// let body = resp.bytes(1 << 20)?;
/// ```
#[derive(Debug, Clone, Default)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    /// A request with a method (empty: GET) and an absolute URL.
    pub fn new(method: &str, url: &str) -> Request {
        Request { method: method.to_string(), url: url.to_string(), ..Request::default() }
    }
    /// A GET request.
    pub fn get(url: &str) -> Request { Request::new("GET", url) }
    /// A POST request.
    pub fn post(url: &str) -> Request { Request::new("POST", url) }
    /// Adds a header; a name may be added more than once.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }
    /// Starts the request, which runs in the background; see [`wait_any`]. A header
    /// name outside RFC 9110's token characters, or a value holding CR, LF or NUL, is
    /// refused as [`HttpErrorKind::BadArgument`] before anything reaches the host: the
    /// host reads headers as lines, so a line feed in a value would add a header.
    pub fn start(&self) -> std::result::Result<Pending, HttpError> {
        let mut lines = String::new();
        for (k, v) in &self.headers {
            if !header_name_ok(k) {
                return Err(HttpError::new(-2, format!("bad argument: header name {:?}", k)));
            }
            if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(HttpError::new(-2, format!("bad argument: header {}: a value holding CR, LF or NUL", k)));
            }
            lines.push_str(k);
            lines.push_str(": ");
            lines.push_str(v);
            lines.push('\n');
        }
        let h = unsafe {
            sys::http_start(
                self.method.as_ptr(), self.method.len() as i32,
                self.url.as_ptr(), self.url.len() as i32,
                lines.as_ptr(), lines.len() as i32,
                self.body.as_ptr(), self.body.len() as i32,
            )
        };
        if h < 0 {
            return Err(HttpError::new(h, HttpErrorKind::from_code(h).name().to_string()));
        }
        Ok(Pending { h: Handle(h) })
    }
    /// Sends the request and waits for the response's head.
    pub fn send(&self) -> std::result::Result<Response, HttpError> {
        self.start()?.response()
    }
}

/// A request's handle, closed when dropped.
#[derive(Debug)]
struct Handle(i32);

impl Drop for Handle {
    fn drop(&mut self) {
        unsafe { sys::http_close(self.0) };
    }
}

/// A request started and running; dropping it cancels the request.
#[derive(Debug)]
pub struct Pending {
    h: Handle,
}

impl Pending {
    /// Waits for the response's head (at most until the job's deadline).
    pub fn response(self) -> std::result::Result<Response, HttpError> {
        let h = self.h.0;
        let status = unsafe { sys::http_status(h) };
        if status < 0 {
            return Err(HttpError::of(h, status));
        }
        let headers = parse_headers(&read_head(h, |b, n| unsafe { sys::http_headers_read(h, b, n) })?);
        let url = read_head(h, |b, n| unsafe { sys::http_url_read(h, b, n) })?;
        Ok(Response { h: self.h, status: status as u16, headers, url })
    }
}

/// Reads a variable-size part of a response's head, sizes first.
fn read_head(h: i32, read: impl Fn(*mut u8, i32) -> i32) -> std::result::Result<String, HttpError> {
    let mut buf = vec![0u8; 512];
    loop {
        let n = read(buf.as_mut_ptr(), buf.len() as i32);
        if n < 0 {
            return Err(HttpError::of(h, n));
        }
        if n as usize <= buf.len() {
            buf.truncate(n as usize);
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        buf = vec![0u8; n as usize];
    }
}

/// Waits until the head of one of `pending` is in (or its request failed) and returns
/// its index, or None when none is within `timeout` (None: until the job's deadline;
/// zero polls).
pub fn wait_any(pending: &[Pending], timeout: Option<Duration>) -> Option<usize> {
    if pending.is_empty() {
        return None;
    }
    let hs: Vec<i32> = pending.iter().map(|p| p.h.0).collect();
    let ms = timeout.map_or(-1, |d| d.as_millis().min(i64::MAX as u128) as i64);
    let i = unsafe { sys::http_wait(hs.as_ptr(), hs.len() as i32, ms) };
    if i < 0 { None } else { Some(i as usize) }
}

fn parse_headers(lines: &str) -> Vec<(String, String)> {
    lines
        .split('\n')
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_string(), v.trim_matches(|c| c == ' ' || c == '\t' || c == '\r').to_string()))
        })
        .collect()
}

/// A response: status, headers and final URL, and a body read whole or in pieces
/// (also through [`std::io::Read`]). Dropping it closes the request.
#[derive(Debug)]
pub struct Response {
    h: Handle,
    status: u16,
    headers: Vec<(String, String)>,
    url: String,
}

impl Response {
    /// The status code (200 to 599).
    pub fn status(&self) -> u16 { self.status }
    /// The final URL, after redirects.
    pub fn url(&self) -> &str { &self.url }
    /// Every header, in the host's order (canonical names, sorted; a repeated name once per value).
    pub fn headers(&self) -> &[(String, String)] { &self.headers }
    /// The first value of a header; names match case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    /// Every value of a header, in the order received.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }
    /// Reads the next bytes of the body into `buf`; 0 at the end.
    pub fn read_chunk(&mut self, buf: &mut [u8]) -> std::result::Result<usize, HttpError> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = unsafe { sys::http_body_read(self.h.0, buf.as_mut_ptr(), buf.len().min(i32::MAX as usize) as i32) };
        if n < 0 {
            return Err(HttpError::of(self.h.0, n));
        }
        Ok(n as usize)
    }
    /// Reads the rest of the body whole; a body longer than `max` bytes fails as
    /// [`HttpErrorKind::TooLarge`].
    pub fn bytes(&mut self, max: usize) -> std::result::Result<Vec<u8>, HttpError> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 16 << 10];
        loop {
            // One byte past the bound tells a body of exactly max bytes from a longer one.
            let want = buf.len().min(max.saturating_add(1) - out.len());
            let n = self.read_chunk(&mut buf[..want])?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
            if out.len() > max {
                return Err(HttpError::new(-16, format!("the body is longer than the caller's bound of {} bytes", max)));
            }
        }
    }
    /// Reads the rest of the body whole as text (invalid UTF-8 replaced); see [`Response::bytes`].
    pub fn text(&mut self, max: usize) -> std::result::Result<String, HttpError> {
        self.bytes(max).map(|b| String::from_utf8_lossy(&b).into_owned())
    }
}

impl std::io::Read for Response {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Ok(self.read_chunk(buf)?)
    }
}

/// Whether name is an RFC 9110 token, as a header name must be.
fn header_name_ok(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The longest delay [`retry_after`] stages: a larger Retry-After is capped to it.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(24 * 3600);

/// The delay a Retry-After value asks for at `now_ms` (Unix milliseconds): delay-seconds
/// or an IMF-fixdate HTTP date; at least 1 ms, at most [`RETRY_AFTER_CAP`]; None when
/// the value is neither.
fn retry_after_delay(value: &str, now_ms: i64) -> Option<Duration> {
    let v = value.trim_matches(|c| c == ' ' || c == '\t');
    let cap = RETRY_AFTER_CAP.as_millis() as i64;
    let ms = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Saturate rather than overflow: the cap applies anyway.
        v.bytes().fold(0i64, |acc, b| acc.saturating_mul(10).saturating_add((b - b'0') as i64)).saturating_mul(1000)
    } else {
        parse_http_date(v)?.saturating_sub(now_ms)
    };
    Some(Duration::from_millis(ms.clamp(1, cap) as u64))
}

/// Parses an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") into Unix milliseconds.
fn parse_http_date(v: &str) -> Option<i64> {
    let b = v.as_bytes();
    if b.len() != 29 || &b[3..5] != b", " || b[7] != b' ' || b[11] != b' ' || b[16] != b' ' || b[19] != b':' || b[22] != b':' || &b[25..] != b" GMT" {
        return None;
    }
    if !["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"].contains(&&v[0..3]) {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = &b[r];
        if s.iter().all(|c| c.is_ascii_digit()) { std::str::from_utf8(s).ok()?.parse().ok() } else { None }
    };
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = months.iter().position(|m| *m == &v[8..11])? as i64 + 1;
    let (day, year, hh, mm, ss) = (num(5..7)?, num(12..16)?, num(17..19)?, num(20..22)?, num(23..25)?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let mdays = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if day < 1 || day > mdays[month as usize - 1] || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some(((days * 86400) + hh * 3600 + mm * 60 + ss) * 1000)
}

fn retry_after_at(resp: &Response, now_ms: i64) -> Settle {
    match resp.header("Retry-After") {
        Some(v) => match retry_after_delay(v, now_ms) {
            Some(d) => defer(d, &format!("http {}: Retry-After {}", resp.status(), v)),
            None => retry(&format!("http {}", resp.status()), None),
        },
        None => retry(&format!("http {}", resp.status()), None),
    }
}

/// Settles a job after a response such as a 429 or 503: with a Retry-After header
/// (delay-seconds, or an HTTP date: the delay until then, at least 1 ms, at most
/// [`RETRY_AFTER_CAP`]) it defers the job by that delay, without spending an attempt,
/// with the reason "http STATUS: Retry-After VALUE"; without a header it can parse, it
/// retries with the queue's backoff and the reason "http STATUS".
pub fn retry_after(resp: &Response) -> Settle {
    retry_after_at(resp, sys::now_unix_ms())
}

/// Fails the job at once with a trap ("trap: unreachable").
pub fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    {
        core::arch::wasm32::unreachable()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        panic!("trap")
    }
}

/// Runs a handler and turns its result into an outcome code, staging reason and delay.
/// [`handler!`] calls it.
pub fn run(f: fn(&Job) -> Result) -> i32 {
    let stage = |reason: &str, delay: Option<Duration>| unsafe {
        sys::set_reason(reason.as_ptr(), reason.len() as i32);
        if let Some(d) = delay {
            sys::set_delay_ms(d.as_millis() as i64);
        }
    };
    match f(&Job(())) {
        Ok(()) => 0,
        Err(Settle::Retry { reason, delay }) => {
            stage(&reason, delay);
            1
        }
        Err(Settle::Defer { delay, reason }) => {
            stage(&reason, Some(delay));
            2
        }
        Err(Settle::DeadLetter { reason }) => {
            stage(&reason, None);
            3
        }
        Err(Settle::Wait) => 4,
    }
}

/// Registers a `fn(&Job) -> Result` as the module's handler and exports what ABI v1
/// requires. Use it once, at the crate's top level.
#[macro_export]
macro_rules! handler {
    ($f:path) => {
        #[no_mangle]
        pub extern "C" fn wasmjobs_abi_v1() {}

        #[no_mangle]
        pub extern "C" fn wasmjobs_handle() -> i32 {
            $crate::run($f)
        }

        #[no_mangle]
        pub extern "C" fn wasmjobs_serve() {
            $crate::serve($f)
        }
    };
}

/// Runs the jobs a host hands a pooled instance in one call of `wasmjobs_serve`, each
/// as [`run`] would: [`handler!`] exports it. The host may call `wasmjobs_handle` once
/// a job instead; a handler cannot tell which.
pub fn serve(f: fn(&Job) -> Result) {
    let mut outcome = 0;
    while unsafe { sys::next_job(outcome) } != 0 {
        outcome = run(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_job(payload: &str, headers: &[(&str, &str)]) {
        sys::HOST.with(|h| {
            let mut h = h.borrow_mut();
            *h = sys::Host::default();
            h.payload = payload.as_bytes().to_vec();
            h.meta = ["01J".into(), "mail".into(), "m".into(), "abc".into(),
                "4bf92f3577b34da6a3ce929d0e0e4736".into(), "00f067aa0ba902b7".into()];
            h.headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            h.attempt = 2;
            h.max_attempts = 5;
        });
    }

    fn host<T>(f: impl Fn(&sys::Host) -> T) -> T {
        sys::HOST.with(|h| f(&h.borrow()))
    }

    #[test]
    fn settles_map_to_codes_and_stage_reason_and_delay() {
        with_job("x", &[]);
        assert_eq!(run(|_| Ok(())), 0);
        assert_eq!(run(|_| Err(retry("later", Some(Duration::from_millis(1500))))), 1);
        assert_eq!(host(|h| (h.reason.clone(), h.delay_ms)), (Some("later".into()), Some(1500)));
        with_job("x", &[]);
        assert_eq!(run(|_| Err(defer(Duration::from_secs(2), "busy"))), 2);
        assert_eq!(host(|h| h.delay_ms), Some(2000));
        with_job("x", &[]);
        assert_eq!(run(|_| Err(dead_letter("bad"))), 3);
        assert_eq!(host(|h| (h.reason.clone(), h.delay_ms)), (Some("bad".into()), None));
    }

    #[test]
    fn reads_the_job() {
        let long = "v".repeat(300);
        with_job("héllo", &[("Trace-Id", &long)]);
        let job = Job(());
        assert_eq!(job.text(), "héllo");
        assert_eq!((job.id(), job.queue(), job.module(), job.version()), ("01J".into(), "mail".into(), "m".into(), "abc".into()));
        assert_eq!((job.trace_id(), job.span_id()), ("4bf92f3577b34da6a3ce929d0e0e4736".into(), "00f067aa0ba902b7".into()));
        assert_eq!((job.attempt(), job.max_attempts()), (2, 5));
        assert_eq!(job.header("Trace-Id"), Some(long), "a value longer than the first buffer is read whole");
        assert_eq!(job.header("trace-id"), None);
    }

    #[test]
    fn stages_output_logs_and_children() {
        with_job("", &[]);
        let job = Job(());
        job.output(b"out").unwrap();
        job.info("hi");
        job.enqueue("child", b"c", Duration::from_millis(250)).unwrap();
        assert_eq!(job.enqueue("", b"c", Duration::ZERO), Err(Status::BadArgument));
        assert_eq!(host(|h| (h.output.clone(), h.logs.clone(), h.children.clone())),
            (b"out".to_vec(), vec![(1, "hi".to_string())], vec![("child".to_string(), b"c".to_vec(), 250)]));
    }
    #[test]
    fn fans_out_and_in() {
        with_job("", &[]);
        let job = Job(());
        assert_eq!((job.round(), job.children()), (0, vec![]));
        job.enqueue_awaited("render", b"p1", Duration::ZERO).unwrap();
        job.enqueue("render", b"p2", Duration::ZERO).unwrap();
        assert_eq!(job.enqueue_awaited("", b"p", Duration::ZERO), Err(Status::BadArgument));
        assert_eq!(run(|_| Err(wait_for_children())), 4);
        assert_eq!(host(|h| (h.awaited_children.clone(), h.reason.clone())), (vec![0], None));
        let long = vec![b'o'; 100];
        sys::HOST.with(|h| {
            let mut h = h.borrow_mut();
            h.round = 1;
            h.awaited = vec![
                [b"01JA".to_vec(), b"render".to_vec(), b"succeeded".to_vec(), vec![], long.clone(), vec![0]],
                [b"01JB".to_vec(), b"render".to_vec(), b"dead".to_vec(), b"no page".to_vec(), vec![], vec![1]],
            ];
        });
        let got = job.children();
        assert_eq!(job.round(), 1);
        assert_eq!(got, vec![
            Child { id: "01JA".into(), queue: "render".into(), state: "succeeded".into(), reason: "".into(), output: long, truncated: false },
            Child { id: "01JB".into(), queue: "render".into(), state: "dead".into(), reason: "no page".into(), output: vec![], truncated: true },
        ]);
    }

    fn respond(resps: Vec<sys::Resp>) {
        sys::HOST.with(|h| h.borrow_mut().responses = resps);
    }

    #[test]
    fn http_request_and_response() {
        with_job("", &[]);
        respond(vec![sys::Resp {
            status: 201,
            headers: "Content-Type: text/plain\nX-Reply: a\nX-Reply: b\n".into(),
            url: "http://127.0.0.1:9/final".into(),
            body: b"hello, world".to_vec(),
            chunk: 5,
            ..Default::default()
        }]);
        let mut resp = Request::post("http://127.0.0.1:9/echo")
            .header("X-A", "1")
            .header("X-A", "2")
            .body(&b"ping"[..])
            .send()
            .unwrap();
        assert_eq!(host(|h| h.requests.clone()), vec![("POST".into(), "http://127.0.0.1:9/echo".into(), "X-A: 1\nX-A: 2\n".into(), b"ping".to_vec())]);
        assert_eq!((resp.status(), resp.url()), (201, "http://127.0.0.1:9/final"));
        assert_eq!(resp.header("content-TYPE"), Some("text/plain"), "names match case-insensitively");
        assert_eq!(resp.header_all("x-reply"), vec!["a", "b"], "a repeated name keeps every value in order");
        assert_eq!(resp.header("X-Absent"), None);
        let mut first = [0u8; 3];
        assert_eq!(resp.read_chunk(&mut first).unwrap(), 3);
        assert_eq!(resp.text(9).unwrap(), "lo, world", "the rest, read whole across pieces, exactly at the bound");
        assert!(!host(|h| h.responses[0].closed));
        drop(resp);
        assert!(host(|h| h.responses[0].closed), "dropping a response closes its request");
    }

    #[test]
    fn http_failures_are_errors_with_status_and_message() {
        with_job("", &[]);
        respond(vec![
            sys::Resp { status: -10, error: Some("http://x/ is outside the grant".into()), ..Default::default() },
            sys::Resp { status: 200, body: b"0123456789".to_vec(), ..Default::default() },
            sys::Resp { status: 200, body: b"01".to_vec(), body_error: -16, ..Default::default() },
        ]);
        let e = Request::get("http://x/").send().unwrap_err();
        assert_eq!((e.kind(), e.code(), e.message()), (HttpErrorKind::Denied, -10, "http://x/ is outside the grant"));
        assert_eq!(e.to_string(), "http error -10: http://x/ is outside the grant");
        assert_eq!(Settle::from(e), retry("http error -10: http://x/ is outside the grant", None));
        assert!(host(|h| h.responses[0].closed), "a failed request is closed too");
        let e = Request::get("http://y/").send().unwrap().bytes(9).unwrap_err();
        assert_eq!(e.kind(), HttpErrorKind::TooLarge, "a body past the caller's bound");
        sys::HOST.with(|h| h.borrow_mut().responses[2].error = Some("past max_response".into()));
        let e = Request::get("http://z/").send().unwrap().bytes(100).unwrap_err();
        assert_eq!((e.kind(), e.message()), (HttpErrorKind::TooLarge, "past max_response"), "the host's failure of a body read");
        sys::HOST.with(|h| h.borrow_mut().start_status = -4);
        let e = Request::get("http://w/").start().unwrap_err();
        assert_eq!((e.kind(), e.code()), (HttpErrorKind::NotPermitted, -4));
        for (code, kind) in [(-11, HttpErrorKind::Blocked), (-18, HttpErrorKind::RateLimited), (-21, HttpErrorKind::TooManyRedirects), (-99, HttpErrorKind::Other)] {
            assert_eq!(HttpErrorKind::from_code(code), kind);
        }
    }

    #[test]
    fn bad_headers_are_refused_before_the_host() {
        with_job("", &[]);
        for (name, value) in [("X-Inject", "a\nIdempotency-Key: fixed"), ("X-Inject", "a\rb"), ("X-Inject", "a\0b"), ("X Inject", "a"), ("X-Inject:", "a"), ("", "a")] {
            let e = Request::get("http://a/").header(name, value).start().unwrap_err();
            assert_eq!(e.kind(), HttpErrorKind::BadArgument, "{:?}: {:?}", name, value);
        }
        assert!(host(|h| h.requests.is_empty()), "nothing reached the host");
        Request::get("http://a/").header("X-Ok!#$%&'*+-.^_`|~", "tab\tand spaces ").start().unwrap();
    }

    #[test]
    fn wait_any_returns_the_first_ready() {
        with_job("", &[]);
        respond(vec![sys::Resp { status: 200, ..Default::default() }; 3]);
        let pending: Vec<Pending> = ["http://a/", "http://b/", "http://c/"].iter().map(|u| Request::get(u).start().unwrap()).collect();
        assert_eq!(wait_any(&pending, Some(Duration::ZERO)), None);
        sys::HOST.with(|h| h.borrow_mut().ready = vec![2, 1]);
        assert_eq!(wait_any(&pending, None), Some(2));
        assert_eq!(wait_any(&[], None), None);
    }

    #[test]
    fn retry_after_delays() {
        let now = 784111777_000; // Sun, 06 Nov 1994 08:49:37 GMT
        let cap = Some(RETRY_AFTER_CAP);
        for (value, want) in [
            ("2", Some(Duration::from_secs(2))),
            (" 120 ", Some(Duration::from_secs(120))),
            ("0", Some(Duration::from_millis(1))),
            ("86401", cap),
            ("99999999999999999999999999", cap),
            ("Sun, 06 Nov 1994 08:49:40 GMT", Some(Duration::from_secs(3))),
            ("Sun, 06 Nov 1994 08:49:37 GMT", Some(Duration::from_millis(1))),
            ("Sat, 05 Nov 1994 08:49:37 GMT", Some(Duration::from_millis(1))),
            ("Mon, 07 Nov 1994 08:49:37 GMT", Some(Duration::from_secs(86400))),
            ("Fri, 31 Dec 9999 23:59:59 GMT", cap),
            ("", None),
            ("soon", None),
            ("-5", None),
            ("1.5", None),
            ("2s", None),
            ("Sun, 06 Nov 1994 08:49:40 UTC", None),
            ("Sunday, 06-Nov-94 08:49:40 GMT", None),
            ("Sun, 31 Feb 1994 08:49:40 GMT", None),
            ("Sun, 06 Nov 1994 24:49:40 GMT", None),
            ("Sun, 06 Xyz 1994 08:49:40 GMT", None),
        ] {
            assert_eq!(retry_after_delay(value, now), want, "{:?}", value);
        }
        assert_eq!(parse_http_date("Tue, 29 Feb 2000 23:59:59 GMT"), Some(951868799_000));
        assert_eq!(parse_http_date("Mon, 01 Mar 2100 00:00:00 GMT"), Some(4107542400_000));
        assert_eq!(parse_http_date("Mon, 29 Feb 2100 00:00:00 GMT"), None, "2100 is not a leap year");
    }

    #[test]
    fn retry_after_settles() {
        with_job("", &[]);
        sys::HOST.with(|h| h.borrow_mut().now_ms = 784111777_000);
        respond(vec![
            sys::Resp { status: 429, headers: "Retry-After: 2\n".into(), ..Default::default() },
            sys::Resp { status: 503, headers: "Retry-After: Sun, 06 Nov 1994 08:50:37 GMT\n".into(), ..Default::default() },
            sys::Resp { status: 503, ..Default::default() },
            sys::Resp { status: 429, headers: "Retry-After: later\n".into(), ..Default::default() },
        ]);
        let settle = |u: &str| retry_after(&Request::get(u).send().unwrap());
        assert_eq!(settle("http://a/"), defer(Duration::from_secs(2), "http 429: Retry-After 2"));
        assert_eq!(settle("http://b/"), defer(Duration::from_secs(60), "http 503: Retry-After Sun, 06 Nov 1994 08:50:37 GMT"));
        assert_eq!(settle("http://c/"), retry("http 503", None), "no header: the queue's backoff");
        assert_eq!(settle("http://d/"), retry("http 429", None), "an unparsable header: the queue's backoff");
    }
}
