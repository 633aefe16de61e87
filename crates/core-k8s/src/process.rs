//! `process_*` metrics (CPU, memory, file descriptors, start time) under the names every
//! Prometheus client library uses, so the same dashboard queries work for the Go anchors and
//! for us; read from `/proc/self` on each scrape (Linux only: elsewhere they are left out).

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The kernel reports CPU time in clock ticks of `USER_HZ`, which the Linux user-space ABI
/// fixes at 100 per second (the `CLK_TCK` every architecture we build for reports).
const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of the process' resources.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessSample {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub threads: f64,
}

/// CPU seconds (user + system) and thread count from `/proc/self/stat`'s text. The second
/// field (the command) is in parentheses and may contain spaces, so fields are counted from
/// the last `)`.
pub fn parse_stat(stat: &str) -> Option<(f64, f64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3 of the man page, i.e. index 0 here; utime (14) is
    // index 11, stime (15) index 12, num_threads (20) index 17.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let threads: f64 = fields.get(17)?.parse().ok()?;
    Some(((utime + stime) / TICKS_PER_SECOND, threads))
}

/// Resident and virtual memory in bytes from `/proc/self/status` (`VmRSS`, `VmSize`, in kB).
pub fn parse_status(status: &str) -> (f64, f64) {
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |v| v * 1024.0)
    };
    (kib("VmRSS:"), kib("VmSize:"))
}

/// The soft limit on open files from `/proc/self/limits` (`unlimited` → none).
pub fn parse_max_fds(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn sample() -> Option<ProcessSample> {
    let (cpu_seconds, threads) = parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let (resident_bytes, virtual_bytes) =
        parse_status(&std::fs::read_to_string("/proc/self/status").unwrap_or_default());
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| parse_max_fds(&l));
    Some(ProcessSample {
        cpu_seconds,
        resident_bytes,
        virtual_bytes,
        open_fds,
        max_fds,
        threads,
    })
}

/// Encodes the `process_*` families on each scrape.
#[derive(Debug)]
pub struct ProcessCollector {
    /// When the collector was made, at start-up: the process' start time to within the
    /// milliseconds before the registry is built.
    started: f64,
}

impl Default for ProcessCollector {
    fn default() -> Self {
        Self {
            started: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            self.started,
        )?;
        let Some(s) = sample() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            s.resident_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            s.virtual_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_threads",
            "Number of OS threads of the process",
            s.threads,
        )?;
        if let Some(open) = s.open_fds {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors",
                open,
            )?;
        }
        if let Some(max) = s.max_fds {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors",
                max,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command() {
        // A command with spaces and a parenthesis in it; utime 250, stime 50 ticks, 7 threads.
        let stat = "4242 (admission (x) hook) S 1 4242 4242 0 -1 4194560 1200 0 0 0 250 50 0 0 20 0 7 0 123456 104857600 2560 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((3.0, 7.0)));
        assert_eq!(parse_stat("4242 (short) S 1"), None);
    }

    #[test]
    fn status_and_limits_are_read_in_bytes_and_counts() {
        let status = "Name:\tx\nVmSize:\t  102400 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(parse_status(status), (10_485_760.0, 104_857_600.0));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n";
        assert_eq!(parse_max_fds(limits), Some(1_048_576.0));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_fds(unlimited), None);
    }

    #[test]
    fn this_process_reports_memory_and_descriptors() {
        let s = sample().expect("/proc/self is readable on Linux");
        assert!(s.resident_bytes > 0.0, "{s:?}");
        assert!(s.open_fds.is_some_and(|n| n >= 3.0), "{s:?}");
        assert!(s.threads >= 1.0, "{s:?}");
    }
}
