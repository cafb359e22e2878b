//! webhook-rust: signs a webhook and stages its delivery.
//!
//! The payload is the webhook's body. The handler signs it with HMAC-SHA256 under the
//! secret the manifest grants as the environment variable WEBHOOK_SECRET, writes
//! `sha256=<hex>` to the output, and stages a child job on "deliver-webhook" whose
//! payload is header lines (`Url: <url>` when the body carries a "url" string,
//! `X-Signature: sha256=<hex>`), an empty line, and the body. Without a secret it
//! retries (the operator may be rotating it); an empty body is dead-lettered. Built for
//! wasm32-wasi, so that it reads its granted environment with std::env.
use std::time::Duration;
use wasmjobs::{Job, Result};

/// SHA-256 (FIPS 180-4), enough for HMAC; no dependencies.
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ];
    let mut h: [u32; 8] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([block[4 * i], block[4 * i + 1], block[4 * i + 2], block[4 * i + 3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let mut v = h;
        for i in 0..64 {
            let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
            let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
            let t1 = v[7].wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
            let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
            let t2 = s0.wrapping_add(maj);
            v = [t1.wrapping_add(t2), v[0], v[1], v[2], v[3].wrapping_add(t1), v[4], v[5], v[6]];
        }
        for i in 0..8 {
            h[i] = h[i].wrapping_add(v[i]);
        }
    }
    let mut out = [0u8; 32];
    for i in 0..8 {
        out[4 * i..4 * i + 4].copy_from_slice(&h[i].to_be_bytes());
    }
    out
}

/// HMAC-SHA256 (RFC 2104).
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&sha256(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    inner.extend_from_slice(msg);
    let mut outer: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    outer.extend_from_slice(&sha256(&inner));
    sha256(&outer)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{:02x}", x)).collect()
}

/// The value of the first `"url"` member of a JSON body, when it is a string on one
/// line (JSON escapes \" \\ \/ undone); a scan, not a parser: a body that is not JSON,
/// or has no such member, has no URL.
fn url_of(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let rest = &text[text.find("\"url\"")? + 5..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let mut url = String::new();
    let mut chars = rest.chars();
    loop {
        match chars.next()? {
            '"' => break,
            '\\' => match chars.next()? {
                c @ ('"' | '\\' | '/') => url.push(c),
                _ => return None,
            },
            '\n' | '\r' => return None,
            c => url.push(c),
        }
    }
    if url.is_empty() {
        None
    } else {
        Some(url)
    }
}

fn sign(job: &Job) -> Result {
    let body = job.payload();
    if body.is_empty() {
        return Err(wasmjobs::dead_letter("empty webhook body"));
    }
    let secret = match std::env::var("WEBHOOK_SECRET") {
        Ok(s) if !s.is_empty() => s,
        _ => return Err(wasmjobs::retry("no WEBHOOK_SECRET granted in the manifest's env", Some(Duration::from_secs(60)))),
    };
    let signature = format!("sha256={}", hex(&hmac_sha256(secret.as_bytes(), &body)));
    job.output(signature.as_bytes())?;
    let mut delivery = match url_of(&body) {
        Some(url) => format!("Url: {}\nX-Signature: {}\n\n", url, signature).into_bytes(),
        None => format!("X-Signature: {}\n\n", signature).into_bytes(),
    };
    delivery.extend_from_slice(&body);
    job.enqueue("deliver-webhook", &delivery, Duration::ZERO)?;
    job.info(&format!("signed {} bytes", body.len()));
    Ok(())
}

wasmjobs::handler!(sign);
