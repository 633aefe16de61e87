//! A forward HTTP proxy for tests that counts what passes through it: `CONNECT host:port`
//! tunnels (HTTPS, gRPC) and absolute-form requests (`GET http://host/path`), each forwarded
//! to its destination. What a service sends through its proxy settings is then visible as
//! a list of (method, target) pairs, with the `Proxy-Authorization` each carried.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the proxy saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// `CONNECT`, `GET`, ...
    pub method: String,
    /// `host:port` for CONNECT, the absolute URL otherwise.
    pub target: String,
    pub authorization: Option<String>,
}

/// A running counting proxy; stops when dropped.
#[derive(Debug)]
pub struct CountingProxy {
    pub address: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CountingProxy {
    /// Listens on a free port of `ip` (another loopback address, say, so that a NO_PROXY
    /// naming the servers' address does not name the proxy's too).
    pub async fn start_on(ip: &str) -> Result<Self> {
        let listener = TcpListener::bind((ip, 0)).await?;
        let address = listener.local_addr()?;
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let _ = serve(client, log).await;
                });
            }
        });
        Ok(Self {
            address,
            seen,
            task,
        })
    }

    /// Everything seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Requests whose method is `method` and whose target contains `needle`.
    pub fn count(&self, method: &str, needle: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.method == method && s.target.contains(needle))
            .count()
    }
}

/// Reads a request head (up to the blank line); what was read past it stays in `rest`.
async fn read_head(stream: &mut TcpStream) -> Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((String::from_utf8_lossy(&buf).into_owned(), rest));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("closed before a request head");
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 64 * 1024 {
            bail!("request head too long");
        }
    }
}

async fn serve(mut client: TcpStream, log: Arc<Mutex<Vec<Seen>>>) -> Result<()> {
    let (head, rest) = read_head(&mut client).await?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let mut parts = request_line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    );
    let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let authorization = headers.iter().find_map(|h| {
        h.split_once(':')
            .filter(|(k, _)| k.eq_ignore_ascii_case("proxy-authorization"))
            .map(|(_, v)| v.trim().to_string())
    });
    log.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
        method: method.clone(),
        target: target.clone(),
        authorization,
    });

    if method == "CONNECT" {
        let mut upstream = TcpStream::connect(&target)
            .await
            .with_context(|| format!("CONNECT {target}"))?;
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        upstream.write_all(&rest).await?;
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
        return Ok(());
    }
    // Absolute form: `GET http://host:port/path HTTP/1.1` → origin form to host:port, the
    // proxy's own headers dropped, one request per connection.
    let uri: http::Uri = target.parse().context("absolute-form target")?;
    let authority = uri.authority().context("no authority")?.to_string();
    let address = if authority.contains(':') {
        authority.clone()
    } else {
        format!("{authority}:80")
    };
    let mut upstream = TcpStream::connect(&address).await?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let version = parts.next().unwrap_or("HTTP/1.1");
    let mut forwarded = format!("{method} {path} {version}\r\n");
    for h in headers {
        let name = h.split(':').next().unwrap_or_default();
        if name.eq_ignore_ascii_case("proxy-authorization")
            || name.eq_ignore_ascii_case("proxy-connection")
            || name.eq_ignore_ascii_case("connection")
        {
            continue;
        }
        forwarded.push_str(h);
        forwarded.push_str("\r\n");
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    upstream.write_all(forwarded.as_bytes()).await?;
    upstream.write_all(&rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}
