//! The conformance handler in Rust: its payload names a case of the cross-language
//! table (internal/abitest/sdk.go).
use std::time::Duration;
use wasmjobs::{Job, Level, Result};

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
        "children" => {
            job.enqueue("child", b"c1", Duration::ZERO)?;
            job.enqueue("child", b"c2", Duration::from_millis(250))?;
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
        _ => Err(wasmjobs::dead_letter("unknown case")),
    }
}

wasmjobs::handler!(handle);
