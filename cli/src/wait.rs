//! `strata wait`: wait in a live cluster until every object in the input is Current (or
//! deleted), showing progress; non-zero exit with a summary on timeout or failure.

use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use core_status::input::read_sources;
use core_status::wait::{Engine, Outcome, Progress, Target, WaitFor, WaitOptions, wait};

use crate::cli::{WaitArgs, WaitEngine, WaitFor as WaitForArg, input_error};

/// Exit code when the wait did not succeed (timeout, or a Failed object).
pub const EXIT_NOT_READY: u8 = 1;

pub fn run(args: &WaitArgs) -> anyhow::Result<ExitCode> {
    let parse = |flag: &str, value: &str| {
        core_k8s::args::parse_duration(value).map_err(|e| format!("--{flag}: {e}"))
    };
    let timeout = match parse("timeout", &args.timeout) {
        Ok(t) => t,
        Err(e) => return Ok(input_error(&e)),
    };
    let engine = match args.engine {
        WaitEngine::Watch => Engine::Watch,
        WaitEngine::Poll => match parse("poll-interval", &args.poll_interval) {
            Ok(interval) => Engine::Poll {
                interval: interval.max(Duration::from_millis(100)),
            },
            Err(e) => return Ok(input_error(&e)),
        },
    };
    let rules = match crate::cli::status_rules(&args.health) {
        Ok(rules) => rules,
        Err(e) => return Ok(input_error(&e)),
    };
    let documents = match read_sources(&args.files) {
        Ok(d) => d,
        Err(e) => return Ok(input_error(&e.to_string())),
    };
    let mut seen = BTreeSet::new();
    let targets: Vec<Target> = documents
        .iter()
        .map(|d| Target::from_object(&d.object))
        .filter(|t| seen.insert(t.clone()))
        .collect();
    let mode = match (args.wait_for, args.jobs) {
        _ if args.hooks => WaitFor::Hooks,
        (WaitForArg::Deleted, _) => WaitFor::Deleted,
        (WaitForArg::Current, true) => WaitFor::CurrentWithJobs,
        (WaitForArg::Current, false) => WaitFor::Current,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = args.cluster.client().await?;
        let started = Instant::now();
        let mut printer = ProgressPrinter::new(std::io::stderr().is_terminal(), mode);
        let report = match wait(
            client,
            targets,
            WaitOptions {
                mode,
                engine,
                timeout,
                rules,
            },
            |p| printer.show(p),
        )
        .await
        {
            Ok(report) => report,
            Err(e @ core_status::StatusError::Access(_)) => {
                return Ok(input_error(&format!("cannot wait: {e}")));
            }
            Err(e) => return Err(e.into()),
        };
        printer.finish();
        let elapsed = started.elapsed().as_secs_f64();
        for (target, state) in &report.states {
            if let Some(warning) = &state.warning {
                eprintln!("warning: {}: {warning}", target.id());
            }
        }
        for skipped in &report.skipped {
            let why = if mode == WaitFor::Hooks {
                "only Pods and Jobs are waited on with --hooks"
            } else {
                "paused Deployments are not waited on"
            };
            eprintln!("skipped {} ({why})", skipped.id());
        }
        let desired = if mode == WaitFor::Deleted {
            "deleted"
        } else {
            "Current"
        };
        match report.outcome {
            Outcome::Done => {
                println!(
                    "all {} objects {desired} after {elapsed:.1}s",
                    report.states.len()
                );
                Ok(ExitCode::SUCCESS)
            }
            Outcome::Failed => {
                eprintln!("failed after {elapsed:.1}s: an object Failed");
                for line in report.summary() {
                    eprintln!("  {line}");
                }
                Ok(ExitCode::from(EXIT_NOT_READY))
            }
            Outcome::TimedOut => {
                eprintln!(
                    "timed out after {}: {} of {} objects not {desired}",
                    args.timeout,
                    report.summary().len(),
                    report.states.len()
                );
                for line in report.summary() {
                    eprintln!("  {line}");
                }
                Ok(ExitCode::from(EXIT_NOT_READY))
            }
        }
    })
}

/// Progress on stderr: a redrawn bar on a terminal, one plain block per change otherwise.
/// The first line names the first not-ready object; one line follows for every other one,
/// each with its status, reason and message.
struct ProgressPrinter {
    terminal: bool,
    /// Lines drawn by the last redraw (terminal only), cleared before the next.
    drawn: usize,
    mode: WaitFor,
}

/// Most not-ready objects listed under the progress line; the rest are counted.
const LISTED: usize = 20;

fn state_text(state: &core_status::wait::TargetState) -> String {
    match &state.reason {
        Some(reason) if !state.message.contains(reason.as_str()) => {
            format!("{} ({reason}): {}", state.status, state.message)
        }
        _ => format!("{}: {}", state.status, state.message),
    }
}

impl ProgressPrinter {
    fn new(terminal: bool, mode: WaitFor) -> Self {
        Self {
            terminal,
            drawn: 0,
            mode,
        }
    }

    fn describe(&self, progress: &Progress) -> Vec<String> {
        let verb = if self.mode == WaitFor::Deleted {
            "deleted"
        } else {
            "ready"
        };
        let Some((target, state)) = progress.waiting.first() else {
            return vec![format!("{}/{} {verb}", progress.ready, progress.total)];
        };
        let mut lines = vec![format!(
            "{}/{} {verb}; waiting for {}: {}",
            progress.ready,
            progress.total,
            target.id(),
            state_text(state)
        )];
        for (target, state) in progress.waiting.iter().skip(1).take(LISTED) {
            lines.push(format!(
                "  also waiting for {}: {}",
                target.id(),
                state_text(state)
            ));
        }
        let more = progress.waiting.len().saturating_sub(LISTED + 1);
        if more > 0 {
            lines.push(format!("  and {more} more"));
        }
        lines
    }

    fn show(&mut self, progress: &Progress) {
        let mut lines = self.describe(progress);
        let mut err = std::io::stderr();
        if self.terminal {
            let width = 20;
            let filled = (progress.ready * width)
                .checked_div(progress.total)
                .unwrap_or(width);
            let bar = format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled));
            lines[0] = format!("{bar} {}", lines[0]);
            // Back to the first line of the previous drawing, cleared to the end.
            if self.drawn > 1 {
                let _ = write!(err, "\x1b[{}A", self.drawn - 1);
            }
            let _ = write!(err, "\r\x1b[J{}", lines.join("\n"));
            self.drawn = lines.len();
        } else {
            for line in lines {
                let _ = writeln!(err, "{line}");
            }
        }
        let _ = err.flush();
    }

    fn finish(&mut self) {
        if self.drawn > 0 {
            eprintln!();
        }
    }
}
