//! Go's wording for the values and durations the anchor reports in its messages. Its texts
//! are part of the interface (users and its own tests match on them), so where a message
//! quotes a JSON value or a duration error, it is written here as Go writes it.

use std::time::Duration;

use serde_json::Value;

/// A JSON value as Go's `%v` prints what `encoding/json` decoded it to: strings bare,
/// `<nil>`, `[a b]`, `map[k:v]` with sorted keys.
pub fn value(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(value).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", value(&map[k])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// The Go type `%T` names for a decoded JSON value (Kubernetes' unstructured decoding keeps
/// integers as `int64`).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Kubernetes' unstructured accessor error for a value that is not an object
/// (`.spec accessor error: 5 is of the type int64, expected map[string]interface{}`).
pub fn not_a_map(path: &str, v: &Value) -> String {
    format!(
        "{path} accessor error: {} is of the type {}, expected map[string]interface{{}}",
        value(v),
        type_name(v)
    )
}

/// Go's `time.ParseDuration`: an optional sign, then decimal numbers each with a unit (`ns`,
/// `us`, `µs`, `ms`, `s`, `m`, `h`); `0` alone needs none. Errors are Go's texts. The result
/// is signed as text (`-` prefix) so a caller can refuse negatives with its own words.
pub fn parse_duration(text: &str) -> Result<(bool, Duration), String> {
    let quoted = format!("{text:?}");
    let invalid = || format!("time: invalid duration {quoted}");
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok((negative, Duration::ZERO));
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(tail) => {
                let len = tail
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(tail.len());
                tail.split_at(len)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, tail) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {quoted}"));
        }
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => return Err(format!("time: unknown unit {other:?} in duration {quoted}")),
        };
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| invalid())?
        };
        let mut ns = whole.checked_mul(scale).ok_or_else(invalid)?;
        let mut place = scale;
        for digit in frac_part.bytes() {
            place /= 10;
            ns += u128::from(digit - b'0') * place;
        }
        total_ns = total_ns.checked_add(ns).ok_or_else(invalid)?;
        rest = tail;
    }
    // Go's Duration is an int64 of nanoseconds.
    if total_ns > i64::MAX as u128 {
        return Err(invalid());
    }
    Ok((negative, Duration::from_nanos(total_ns as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_as_go_reads_them() {
        let ok = |t: &str, secs: f64| {
            let (neg, d) = parse_duration(t).unwrap();
            assert!(!neg, "{t}");
            assert!((d.as_secs_f64() - secs).abs() < 1e-9, "{t}: {d:?}");
        };
        ok("0", 0.0);
        ok("1h30m", 5400.0);
        ok("1.5h", 5400.0);
        ok("300ms", 0.3);
        ok("2us", 0.000_002);
        ok("2µs", 0.000_002);
        ok(".5s", 0.5);
        ok("1m0s", 60.0);
        assert_eq!(
            parse_duration("-1m").unwrap(),
            (true, Duration::from_secs(60))
        );
        let err = |t: &str, want: &str| assert_eq!(parse_duration(t).unwrap_err(), want, "{t}");
        err("soon", r#"time: invalid duration "soon""#);
        err("10", r#"time: missing unit in duration "10""#);
        err("1d", r#"time: unknown unit "d" in duration "1d""#);
        err("", r#"time: invalid duration """#);
        err("-", r#"time: invalid duration "-""#);
        err("1h.", r#"time: invalid duration "1h.""#);
        err("3000000h", r#"time: invalid duration "3000000h""#);
    }

    #[test]
    fn values_as_go_prints_them() {
        assert_eq!(value(&json!(null)), "<nil>");
        assert_eq!(value(&json!([1, "a"])), "[1 a]");
        assert_eq!(
            value(&json!({"b": 1, "a": {"c": true}})),
            "map[a:map[c:true] b:1]"
        );
        assert_eq!(type_name(&json!(1)), "int64");
        assert_eq!(type_name(&json!(1.5)), "float64");
        assert_eq!(
            not_a_map(".spec", &json!(5)),
            ".spec accessor error: 5 is of the type int64, expected map[string]interface{}"
        );
    }
}
