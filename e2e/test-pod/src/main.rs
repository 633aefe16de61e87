//! `strata-test-pod`: the workload of the in-cluster tests, as a FROM-scratch image.
//!
//! - `GET /ready`: 200 once `READY_AFTER` (seconds, default 0) has passed since start-up, so a
//!   test can tell "Ready by kubelet's probe" from "Running";
//! - `POST <path>`: records the call and answers `{"timestamp": T}`, T the time of the first
//!   POST since the last DELETE (what the rollout-operator's delayed downscale expects; the
//!   prepare-downscale webhook only needs a 2xx);
//! - `DELETE <path>`: records the call, forgets the preparation, answers 200;
//! - `GET /calls`: every recorded call, as JSON lines `{"method","path","at"}`;
//! - `PUT /readiness/false`, `PUT /readiness/true`: turns `/ready` off or on (a zone made
//!   unavailable by hand, for the eviction tests); not recorded;
//! - `FAIL_PREPARE_ON=<pod name>` with `POD_NAME` the same: every POST answers 500 (a pod that
//!   cannot prepare).
//!
//! Listens on `PORT` (default 8080) on every address. Plain `std`: no dependencies.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Default)]
struct Recorded {
    calls: Vec<String>,
    prepared_at: Option<u64>,
    /// Set by `PUT /readiness/...`: wins over `READY_AFTER`.
    readiness: Option<bool>,
}

fn main() {
    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".into());
    let ready_after = std::env::var("READY_AFTER")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or_default();
    let listener = match TcpListener::bind(format!("[::]:{port}"))
        .or_else(|_| TcpListener::bind(format!("0.0.0.0:{port}")))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("strata-test-pod: cannot listen on port {port}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("strata-test-pod: listening on port {port}");
    let fail_prepare = match (std::env::var("FAIL_PREPARE_ON"), std::env::var("POD_NAME")) {
        (Ok(failing), Ok(me)) => !failing.is_empty() && failing == me,
        _ => false,
    };
    let started = Instant::now();
    let recorded = Arc::new(Mutex::new(Recorded::default()));
    for stream in listener.incoming().flatten() {
        let recorded = Arc::clone(&recorded);
        std::thread::spawn(move || {
            let ready = started.elapsed() >= ready_after;
            if let Err(e) = serve(stream, &recorded, ready, fail_prepare) {
                eprintln!("strata-test-pod: {e}");
            }
        });
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn serve(
    stream: TcpStream,
    recorded: &Mutex<Recorded>,
    ready: bool,
    fail_prepare: bool,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Headers are read and dropped; a body (none is expected) is never waited for.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, body) = {
        let mut recorded = recorded.lock().unwrap_or_else(|e| e.into_inner());
        let ready = recorded.readiness.unwrap_or(ready);
        match (method, path) {
            ("GET", "/ready") if ready => (200, "ready\n".to_string()),
            ("GET", "/ready") => (503, "not ready\n".to_string()),
            ("GET", "/calls") => (200, recorded.calls.join("")),
            ("PUT", "/readiness/true" | "/readiness/false") => {
                recorded.readiness = Some(path == "/readiness/true");
                (200, "{}\n".to_string())
            }
            ("POST", _) if fail_prepare => {
                recorded.calls.push(call_line(method, path));
                (500, "{\"error\": \"told to fail\"}\n".to_string())
            }
            ("POST", _) => {
                recorded.calls.push(call_line(method, path));
                let at = *recorded.prepared_at.get_or_insert_with(now_secs);
                (200, format!("{{\"timestamp\": {at}}}\n"))
            }
            ("DELETE", _) => {
                recorded.calls.push(call_line(method, path));
                recorded.prepared_at = None;
                (200, "{}\n".to_string())
            }
            _ => (404, "not found\n".to_string()),
        }
    };
    let reason = match status {
        200 => "OK",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Not Found",
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

fn call_line(method: &str, path: &str) -> String {
    let path = path.replace(['"', '\\'], "");
    format!(
        "{{\"method\":\"{method}\",\"path\":\"{path}\",\"at\":{}}}\n",
        now_secs()
    )
}
