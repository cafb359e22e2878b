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
        pub meta: [String; 4],
        pub headers: Vec<(String, String)>,
        pub attempt: i32,
        pub max_attempts: i32,
        pub logs: Vec<(i32, String)>,
        pub reason: Option<String>,
        pub delay_ms: Option<i64>,
        pub output: Vec<u8>,
        pub children: Vec<(String, Vec<u8>, i64)>,
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
    /// Stages a child job, published after `delay` if this job succeeds.
    pub fn enqueue(&self, queue: &str, payload: &[u8], delay: Duration) -> std::result::Result<(), Status> {
        status(unsafe {
            sys::enqueue(queue.as_ptr(), queue.len() as i32, payload.as_ptr(), payload.len() as i32, delay.as_millis() as i64)
        })
    }
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
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_job(payload: &str, headers: &[(&str, &str)]) {
        sys::HOST.with(|h| {
            let mut h = h.borrow_mut();
            *h = sys::Host::default();
            h.payload = payload.as_bytes().to_vec();
            h.meta = ["01J".into(), "mail".into(), "m".into(), "abc".into()];
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
}
