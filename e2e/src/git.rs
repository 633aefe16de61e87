//! A local Git server — git's own `http-backend` behind a small CGI bridge on 127.0.0.1 — and
//! a stand-in for Flux's source-controller that follows a branch over HTTP and turns each head
//! into a GitRepository artifact (`git archive`), with the status source-controller writes
//! (`<branch>@sha1:<commit>`). The controller itself cannot be built here; this keeps the
//! contract (artifact, digest, revision format) real end to end.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use kube::Client;
use tokio::io::AsyncWriteExt;

use crate::flux::{ArtifactServer, set_artifact};

/// Serves bare repositories under a temporary root over smart HTTP (clone, fetch, push).
#[derive(Debug)]
pub struct GitServer {
    pub address: std::net::SocketAddr,
    root: PathBuf,
}

/// Runs `git` with a fixed identity; fails with its stderr.
pub async fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new("git")
        .args([
            "-c",
            "user.name=strata-e2e",
            "-c",
            "user.email=e2e@strata.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .context("running git (needed for the Git source tests)")?;
    ensure!(
        out.status.success(),
        "git {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl GitServer {
    pub async fn start(root: &Path) -> Result<Self> {
        std::fs::create_dir_all(root)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let served = Arc::new(root.to_path_buf());
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let root = served.clone();
                async move { cgi(&root, method, uri, headers, body).await }
            },
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            address,
            root: root.to_path_buf(),
        })
    }

    /// Creates an empty bare repository that accepts pushes; returns its URL.
    pub async fn create_repo(&self, name: &str) -> Result<String> {
        let dir = self.root.join(format!("{name}.git"));
        std::fs::create_dir_all(&dir)?;
        git(&dir, &["init", "--bare", "--quiet"]).await?;
        git(&dir, &["config", "http.receivepack", "true"]).await?;
        Ok(format!("http://{}/{name}.git", self.address))
    }
}

/// One request through `git http-backend` (CGI/1.1).
async fn cgi(root: &Path, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or_default())
        .env("REQUEST_METHOD", method.as_str())
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_USER", "strata-e2e")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let failure = |message: String| {
        Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from(message))
            .unwrap_or_default()
    };
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return failure(format!("git http-backend: {e}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&body).await;
    }
    let out = match child.wait_with_output().await {
        Ok(out) => out.stdout,
        Err(e) => return failure(format!("git http-backend: {e}")),
    };
    // CGI output: header lines, an empty line, the body.
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((end, gap)) = split else {
        return failure("git http-backend wrote no headers".into());
    };
    let mut response = Response::builder().status(StatusCode::OK);
    for line in String::from_utf8_lossy(&out[..end]).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("Status") {
            let code = value.split_whitespace().next().and_then(|c| c.parse().ok());
            if let Some(code) = code.and_then(|c: u16| StatusCode::from_u16(c).ok()) {
                response = response.status(code);
            }
        } else {
            response = response.header(name.trim(), value);
        }
    }
    response
        .body(Body::from(out[end + gap..].to_vec()))
        .unwrap_or_default()
}

/// Follows `branch` of `url` and publishes each new head as the artifact of GitRepository
/// `repo` in `ns`, as source-controller would; stops when dropped.
#[derive(Debug)]
pub struct SourceStandIn {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SourceStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SourceStandIn {
    pub async fn start(
        client: Client,
        ns: &str,
        url: &str,
        branch: &str,
        artifacts: Arc<ArtifactServer>,
        work: &Path,
    ) -> Result<Self> {
        let cache = work.join("source-controller-cache.git");
        std::fs::create_dir_all(&cache)?;
        git(&cache, &["init", "--bare", "--quiet"]).await?;
        let (ns, url, branch) = (ns.to_string(), url.to_string(), branch.to_string());
        let task = tokio::spawn(async move {
            let mut published = String::new();
            loop {
                if let Ok(head) =
                    Self::sync(&client, &ns, &url, &branch, &artifacts, &cache, &published).await
                {
                    published = head;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        Ok(Self { task })
    }

    /// One poll: fetch the branch; when its head changed, archive and publish it.
    async fn sync(
        client: &Client,
        ns: &str,
        url: &str,
        branch: &str,
        artifacts: &ArtifactServer,
        cache: &Path,
        published: &str,
    ) -> Result<String> {
        let refspec = format!("+refs/heads/{branch}:refs/heads/{branch}");
        git(cache, &["fetch", "--quiet", "--force", url, &refspec]).await?;
        let head = git(cache, &["rev-parse", &format!("refs/heads/{branch}")]).await?;
        if head == published {
            return Ok(head);
        }
        let out = tokio::process::Command::new("git")
            .args(["archive", "--format=tar.gz", &head])
            .current_dir(cache)
            .output()
            .await?;
        ensure!(out.status.success(), "git archive {head} failed");
        let (artifact_url, digest) = artifacts.publish_bytes(&format!("{head}.tar.gz"), out.stdout);
        set_artifact(
            client,
            ns,
            &format!("{branch}@sha1:{head}"),
            &artifact_url,
            &digest,
        )
        .await?;
        Ok(head)
    }
}
