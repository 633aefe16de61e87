//! `make demo`'s path, as `make test` runs it: the `strata-plane demo` binary exactly as the
//! Makefile starts it, on a plane of its own. A Ctrl-C during the tour stops everything it
//! started, a second run in the same directory then takes the whole tour headless
//! (`--check`), and bad starting conditions — a port in use, a demo already running in the
//! directory, no Go toolchain to build the plane — end in one line naming the cause and the
//! fix, never a backtrace.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use strata_e2e::demo::STEPS;
use strata_e2e::services::bin_dir;

/// `strata-plane demo --dir DIR --bin-dir BIN --port-base BASE ARGS...`, as `make demo` runs
/// it (a port base of its own, so a developer's `make demo` on the same machine is not in
/// the way).
fn demo(dir: &Path, port_base: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin_dir().join("strata-plane"));
    cmd.arg("demo")
        .arg("--dir")
        .arg(dir)
        .arg("--bin-dir")
        .arg(bin_dir())
        .args(["--port-base", &port_base.to_string()])
        .args(args)
        // A user with RUST_BACKTRACE set must still see one line per error.
        .env("RUST_BACKTRACE", "1");
    cmd
}

/// A base whose six ports (base..base+5) are free right now, below Linux's ephemeral range
/// (32768 and up), where the planes' components and every client connection take theirs: a
/// run chosen there could be taken by one of them a moment later.
fn free_port_base() -> Result<u16> {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .subsec_nanos() as u16;
    for _ in 0..200 {
        let step = NEXT.fetch_add(1, Ordering::SeqCst);
        let base = 20000 + (seed.wrapping_add(step.wrapping_mul(613)) % 1600) * 6;
        if (base..=base + 5).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return Ok(base);
        }
    }
    anyhow::bail!("no free run of six ports")
}

fn work_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("strata-demo-test-{name}-{}", std::process::id()))
}

/// The one line a failed start prints: exit 1, a single `strata-plane:` line on stderr that
/// contains every `want`, no backtrace, nothing on stdout but the banner.
fn assert_one_line_error(out: &Output, want: &[&str]) -> Result<()> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(1),
        "exit {:?}: {stderr}",
        out.status
    );
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("build-plane: "))
        .collect();
    ensure!(
        lines.len() == 1 && lines[0].starts_with("strata-plane: "),
        "one error line expected, got:\n{stderr}"
    );
    for w in want {
        ensure!(lines[0].contains(w), "{w:?} missing from: {}", lines[0]);
    }
    ensure!(
        !stderr.to_lowercase().contains("backtrace"),
        "a backtrace was printed: {stderr}"
    );
    Ok(())
}

#[test]
fn a_port_in_use_is_named_with_the_fix() -> Result<()> {
    let base = free_port_base()?;
    let _taken = TcpListener::bind(("127.0.0.1", base + 3))?;
    let dir = work_dir("port");
    let out = demo(&dir, base, &["--check"]).output()?;
    assert_one_line_error(
        &out,
        &[
            &format!("port {}", base + 3),
            "rollout-operator admin HTTP",
            "--port-base",
        ],
    )?;
    // Refused before starting anything: the plane would have written its data and logs
    // into the demo's directory.
    let started: Vec<_> = std::fs::read_dir(&dir)
        .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    ensure!(
        started.is_empty(),
        "refused only after starting something: {} holds {started:?}",
        dir.display()
    );
    Ok(())
}

#[test]
fn a_demo_already_running_in_the_directory_is_named() -> Result<()> {
    let dir = work_dir("running");
    std::fs::create_dir_all(&dir)?;
    // A live process whose command line says strata-plane, as a running demo's does.
    let mut running = Command::new("bash")
        .args(["-c", "exec -a strata-plane sleep 60"])
        .spawn()?;
    std::fs::write(dir.join("demo.pid"), running.id().to_string())?;
    let out = demo(&dir, free_port_base()?, &["--check"]).output()?;
    let _ = running.kill();
    let _ = running.wait();
    assert_one_line_error(
        &out,
        &[
            &format!("another demo (pid {})", running.id()),
            "Ctrl-C",
            "--dir",
        ],
    )?;
    ensure!(
        dir.join("demo.pid").exists(),
        "the running demo's directory was left alone"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn a_missing_go_toolchain_is_one_line_with_the_fix() -> Result<()> {
    // An empty cache needs the plane built; a PATH without go cannot build it.
    let cache = work_dir("nogo-cache");
    let out = demo(&work_dir("nogo"), free_port_base()?, &["--check"])
        .env("STRATA_CACHE", &cache)
        .env("PATH", "/usr/bin:/bin")
        .output()?;
    assert_one_line_error(&out, &["Go toolchain", "https://go.dev/dl"])?;
    let _ = std::fs::remove_dir_all(&cache);
    Ok(())
}

/// Starts the interactive demo in `dir` and sends `signal` once step 3 (services running) is
/// under way; returns how it exited.
fn interrupt_at_step_3(dir: &Path, base: u16, signal: &str) -> Result<std::process::ExitStatus> {
    let mut demo = demo(dir, base, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = demo.stdout.take().context("stdout")?;
    let mut seen = String::new();
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line?;
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("[3/") {
            break;
        }
    }
    ensure!(
        seen.contains("[3/"),
        "the tour did not reach step 3:\n{seen}"
    );
    let pid = demo.id();
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -{signal} {pid}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(exit) = demo.try_wait()? {
            return Ok(exit);
        }
        ensure!(
            Instant::now() < deadline,
            "the demo did not stop within 60 s of SIG{signal}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Nothing a demo in `dir` started still runs (every plane component names the directory on
/// its command line, every service in its environment), and its ports are free.
fn nothing_left(dir: &Path, base: u16, after: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let leftovers = processes_naming(dir);
        if leftovers.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "still running after {after}: {leftovers:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for port in base + 1..=base + 5 {
        while TcpListener::bind(("127.0.0.1", port)).is_err() {
            ensure!(
                Instant::now() < deadline,
                "port {port} still taken after {after}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// The tour interrupted by Ctrl-C once the services run stops everything it started; killed
/// outright (SIGKILL, no chance to clean up) its processes still go and its directory is
/// left stale; the next run in that directory takes over and completes the whole tour
/// headless, every step's outcome happening.
#[test]
fn the_tour_runs_again_after_a_ctrl_c_or_a_kill_and_every_step_happens() -> Result<()> {
    let dir = work_dir("tour");
    let base = free_port_base()?;
    let exit = interrupt_at_step_3(&dir, base, "INT")?;
    ensure!(
        exit.code() == Some(130),
        "after Ctrl-C the demo exited {exit:?}"
    );
    nothing_left(&dir, base, "Ctrl-C")?;

    interrupt_at_step_3(&dir, base, "KILL")?;
    nothing_left(&dir, base, "SIGKILL")?;
    ensure!(
        dir.join("demo.pid").exists(),
        "a killed demo leaves its pid file"
    );

    let out = demo(&dir, base, &["--check"]).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "demo --check failed:\n{stdout}\n{stderr}"
    );
    for (i, title) in STEPS.iter().enumerate() {
        let header = format!("[{}/{}] {title}", i + 1, STEPS.len());
        ensure!(stdout.contains(&header), "{header:?} missing:\n{stdout}");
    }
    ensure!(
        stdout.matches("      ok (").count() == STEPS.len(),
        "every step reports its outcome:\n{stdout}"
    );
    ensure!(
        stdout.contains(&format!("demo: all {} steps happened", STEPS.len())),
        "{stdout}"
    );
    ensure!(
        stderr.contains("left from an earlier run"),
        "the killed run's directory was taken over: {stderr}"
    );
    nothing_left(&dir, base, "--check")?;
    println!("{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Command lines of running processes that mention `dir`.
fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == me || !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let read = |file: &str| {
            let bytes = std::fs::read(entry.path().join(file)).unwrap_or_default();
            String::from_utf8_lossy(&bytes).replace('\0', " ")
        };
        let cmdline = read("cmdline");
        if cmdline.contains(&needle) || read("environ").contains(&needle) {
            found.push(format!("{name}: {cmdline}"));
        }
    }
    found
}
