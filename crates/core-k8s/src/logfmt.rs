//! logfmt lines (`level=info ts=… msg="…" key=value caller=module`), the default log format of
//! the Go services Strata replaces, so log pipelines parsing theirs keep working.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Formats each event as one logfmt line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Logfmt;

impl<S, N> FormatEvent<S, N> for Logfmt
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = String::with_capacity(128);
        let now = jiff::Timestamp::now();
        // The anchor's key order: level, ts, msg, then the event's own keys.
        write!(line, "level={}", meta.level().as_str().to_ascii_lowercase())?;
        write!(line, " ts={now:.9}")?;
        push_pair(&mut line, "msg", &fields.message);
        for (key, value) in &fields.pairs {
            push_pair(&mut line, key, value);
        }
        push_pair(&mut line, "caller", meta.target());
        writeln!(writer, "{line}")
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    pairs: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.pairs.push((field.name(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.pairs.push((field.name(), text));
        }
    }
}

/// Appends ` key=value`, quoting the value when logfmt needs it (empty, spaces, `=`, quotes,
/// control characters).
fn push_pair(line: &mut String, key: &str, value: &str) {
    line.push(' ');
    line.push_str(key);
    line.push('=');
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c > ' ' && c != '=' && c != '"' && c != '\\' && !c.is_control());
    if plain {
        line.push_str(value);
        return;
    }
    line.push('"');
    for c in value.chars() {
        match c {
            '"' => line.push_str("\\\""),
            '\\' => line.push_str("\\\\"),
            '\n' => line.push_str("\\n"),
            '\t' => line.push_str("\\t"),
            '\r' => line.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(line, "\\u{:04x}", c as u32);
            }
            c => line.push(c),
        }
    }
    line.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(key: &str, value: &str) -> String {
        let mut line = String::new();
        push_pair(&mut line, key, value);
        line
    }

    #[test]
    fn values_are_quoted_only_when_needed() {
        assert_eq!(pair("group", "ingester"), " group=ingester");
        assert_eq!(pair("msg", "rollout done"), " msg=\"rollout done\"");
        assert_eq!(pair("msg", ""), " msg=\"\"");
        assert_eq!(pair("err", "a=\"b\"\n"), " err=\"a=\\\"b\\\"\\n\"");
        assert_eq!(pair("path", "C:\\x"), " path=\"C:\\\\x\"");
    }

    #[test]
    fn a_line_has_timestamp_level_caller_message_and_fields() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(Logfmt)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(group = "ingester", pods = 3, "deleted outdated pod");
        });
        let out = String::from_utf8(sink.0.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default();
        let line = out.trim_end();
        assert!(line.starts_with("level=info ts="), "{line}");
        let ts = line["level=info ts=".len()..]
            .split(' ')
            .next()
            .unwrap_or_default();
        assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{ts}");
        let rest = line.splitn(3, ' ').nth(2).unwrap_or_default();
        assert_eq!(
            rest,
            "msg=\"deleted outdated pod\" group=ingester pods=3 caller=core_k8s::logfmt::tests"
        );
        assert_eq!(out.lines().count(), 1);
    }
}
