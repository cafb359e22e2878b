//! The conformance handler in Rust: its payload names a case of the cross-language
//! table (internal/rigs/abitest/sdk.go, and sdk_http.go for the HTTP cases).
use std::time::Duration;
use wasmjobs::{Job, Level, Request, Result};

/// Sends req and acks with "STATUS\nX-REPLY\nBODY", or "error CODE" on a failure.
/// Counts the case "spin"'s turns, so that its loop does something.
static SPINS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn http(job: &Job, req: Request) -> Result {
    let out = match req.send().and_then(|mut resp| {
        let body = resp.text(1 << 20)?;
        Ok(format!("{}\n{}\n{}", resp.status(), resp.header_all("x-reply").join(","), body))
    }) {
        Ok(out) => out,
        Err(e) => format!("error {}", e.code()),
    };
    job.output(out.as_bytes())?;
    Ok(())
}

fn handle(job: &Job) -> Result {
    let payload = job.text();
    match payload.as_str() {
        "ack" => Ok(()),
        "retry" => Err(wasmjobs::retry("asked to retry", Some(Duration::from_millis(1500)))),
        "defer" => Err(wasmjobs::defer(Duration::from_millis(2000), "asked to defer")),
        "dead" => Err(wasmjobs::dead_letter("asked to die")),
        "meta" => {
            let header = job.header("X-Test").unwrap_or_else(|| "-".to_string());
            let text = format!("{}\n{}\n{}\n{}\n{}\n{}\n", job.id(), job.queue(), job.module(), job.attempt(), job.max_attempts(), header);
            job.output(text.as_bytes())?;
            Ok(())
        }
        "trace" => {
            job.output(format!("{}\n{}\n", job.trace_id(), job.span_id()).as_bytes())?;
            Ok(())
        }
        "spin" => loop {
            // until the host stops it
            SPINS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        },
        "children" => {
            job.enqueue("child", b"c1", Duration::ZERO)?;
            job.enqueue("child", b"c2", Duration::from_millis(250))?;
            Ok(())
        }
        "fanout" => {
            job.output(format!("{} {}\n", job.round(), job.children().len()).as_bytes())?;
            job.enqueue_awaited("child", b"c1", Duration::ZERO)?;
            job.enqueue("child", b"c2", Duration::from_millis(250))?;
            job.enqueue_awaited("child", b"c3", Duration::ZERO)?;
            Err(wasmjobs::wait_for_children())
        }
        "fanin" => {
            let children = job.children();
            let mut out = format!("{} {}\n", job.round(), children.len());
            for c in &children {
                out += &format!("{}|{}|{}|{}|{}|{}\n", c.id, c.queue, c.state, c.reason, String::from_utf8_lossy(&c.output), c.truncated);
            }
            job.output(out.as_bytes())?;
            Ok(())
        }
        "log" => {
            job.info("conformance log line");
            job.log(Level::Warn, &format!("second line, attempt {}", job.attempt()));
            Ok(())
        }
        "trap" => wasmjobs::trap(),
        p if p.starts_with("echo:") => {
            job.output(&job.payload()[5..])?;
            Ok(())
        }
        p if p.starts_with("http-get:") => http(job, Request::get(&p[9..]).header("X-Conformance", "yes")),
        p if p.starts_with("http-post:") => http(
            job,
            Request::post(&p[10..]).header("X-Conformance", "yes").header("Content-Type", "text/plain").body(&b"ping"[..]),
        ),
        p if p.starts_with("http-inject:") => http(job, Request::get(&p[12..]).header("X-Inject", "a\nX-Evil: 1")),
        p if p.starts_with("http-retry-after:") => match Request::get(&p[17..]).send() {
            Ok(resp) if resp.status() == 429 || resp.status() == 503 => Err(wasmjobs::retry_after(&resp)),
            Ok(resp) => Ok(job.output(resp.status().to_string().as_bytes())?),
            Err(e) => Ok(job.output(format!("error {}", e.code()).as_bytes())?),
        },
        _ => Err(wasmjobs::dead_letter("unknown case")),
    }
}

wasmjobs::handler!(handle);
