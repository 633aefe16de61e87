//! The text form of a [`FieldPath`]: printing (quoting where needed) and a hand-written
//! parser whose errors point at a character.

use std::fmt;
use std::str::FromStr;

use super::{FieldPath, SchemaError, Segment};

/// Characters that force the quoted form; `=` only matters inside a selector's key.
const SPECIAL: [char; 4] = ['[', ']', '"', '\\'];

fn is_bare_key(key: &str) -> bool {
    !key.is_empty() && !key.contains(SPECIAL) && !key.contains('.')
}

fn is_bare_selector_key(key: &str) -> bool {
    !key.is_empty() && !key.contains(SPECIAL) && !key.contains('=')
}

fn is_bare_selector_value(value: &str) -> bool {
    !value.is_empty() && !value.contains(SPECIAL)
}

fn write_quoted(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in text.chars() {
        if c == '"' || c == '\\' {
            f.write_str("\\")?;
        }
        write!(f, "{c}")?;
    }
    f.write_str("\"")
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if is_bare_key(key) => {
                    if position > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(key)?;
                }
                Segment::Key(key) => {
                    f.write_str("[")?;
                    write_quoted(f, key)?;
                    f.write_str("]")?;
                }
                Segment::Index(index) => write!(f, "[{index}]")?,
                Segment::Select { key, value } => {
                    f.write_str("[")?;
                    if is_bare_selector_key(key) {
                        f.write_str(key)?;
                    } else {
                        write_quoted(f, key)?;
                    }
                    f.write_str("=")?;
                    if is_bare_selector_value(value) {
                        f.write_str(value)?;
                    } else {
                        write_quoted(f, value)?;
                    }
                    f.write_str("]")?;
                }
            }
        }
        Ok(())
    }
}

impl FromStr for FieldPath {
    type Err = SchemaError;

    fn from_str(text: &str) -> Result<Self, SchemaError> {
        PathParser {
            text,
            chars: text.chars().collect(),
            position: 0,
        }
        .parse()
    }
}

/// A hand-written scanner: the grammar is small and errors must point at a character.
struct PathParser<'a> {
    text: &'a str,
    chars: Vec<char>,
    position: usize,
}

impl PathParser<'_> {
    fn error(&self, position: usize, reason: impl Into<String>) -> SchemaError {
        SchemaError::PathSyntax {
            text: self.text.to_string(),
            position: position + 1,
            reason: reason.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.position).copied()
    }

    fn parse(mut self) -> Result<FieldPath, SchemaError> {
        if self.chars.is_empty() {
            return Err(self.error(0, "empty path"));
        }
        let mut segments = vec![match self.peek() {
            Some('[') => self.bracket()?,
            _ => self.bare_key()?,
        }];
        while let Some(c) = self.peek() {
            match c {
                '.' => {
                    self.position += 1;
                    segments.push(self.bare_key()?);
                }
                '[' => segments.push(self.bracket()?),
                other => {
                    return Err(self.error(
                        self.position,
                        format!("unexpected {other:?}, expected '.' or '['"),
                    ));
                }
            }
        }
        Ok(FieldPath(segments))
    }

    /// A dotted key: up to the next `.` or `[`.
    fn bare_key(&mut self) -> Result<Segment, SchemaError> {
        let start = self.position;
        let mut key = String::new();
        while let Some(c) = self.peek() {
            match c {
                '.' | '[' => break,
                ']' | '"' | '\\' => {
                    return Err(self.error(
                        self.position,
                        format!("unexpected {c:?} in a key (quote it: [\"...\"])"),
                    ));
                }
                _ => key.push(c),
            }
            self.position += 1;
        }
        if key.is_empty() {
            return Err(self.error(start, "empty key"));
        }
        Ok(Segment::Key(key))
    }

    /// `[N]`, `["key"]`, `[key]`, `[key=value]`; the cursor is on `[`.
    fn bracket(&mut self) -> Result<Segment, SchemaError> {
        let open = self.position;
        self.position += 1;
        let (token, quoted) = if self.peek() == Some('"') {
            (self.quoted()?, true)
        } else {
            (self.bare_token(open, &['=', ']'])?, false)
        };
        match self.peek() {
            Some(']') => {
                self.position += 1;
                if quoted {
                    return Ok(Segment::Key(token));
                }
                if token.is_empty() {
                    return Err(self.error(open, "empty brackets"));
                }
                if !token.bytes().all(|b| b.is_ascii_digit()) {
                    return Ok(Segment::Key(token));
                }
                token
                    .parse()
                    .map(Segment::Index)
                    .map_err(|_| self.error(open + 1, format!("index {token} is too large")))
            }
            Some('=') => {
                if token.is_empty() {
                    return Err(self.error(self.position, "empty merge key before '='"));
                }
                self.position += 1;
                let value = if self.peek() == Some('"') {
                    self.quoted()?
                } else {
                    self.bare_token(open, &[']'])?
                };
                if self.peek() != Some(']') {
                    return Err(self.error(self.position, "expected ']' after the selector value"));
                }
                self.position += 1;
                Ok(Segment::Select { key: token, value })
            }
            _ => Err(self.error(self.position, "expected ']' or '='")),
        }
    }

    /// Characters up to (not including) one of `stops`; the end of input means `[` at `open`
    /// was never closed.
    fn bare_token(&mut self, open: usize, stops: &[char]) -> Result<String, SchemaError> {
        let mut token = String::new();
        loop {
            match self.peek() {
                None => return Err(self.error(open, "unclosed '['")),
                Some(c) if stops.contains(&c) => return Ok(token),
                Some(c) if SPECIAL.contains(&c) => {
                    return Err(self.error(
                        self.position,
                        format!("unexpected {c:?} in brackets (quote it: \"...\")"),
                    ));
                }
                Some(c) => token.push(c),
            }
            self.position += 1;
        }
    }

    /// A `"..."` string with `\"` and `\\` escapes; the cursor is on the opening quote.
    fn quoted(&mut self) -> Result<String, SchemaError> {
        let start = self.position;
        self.position += 1;
        let mut text = String::new();
        loop {
            match self.peek() {
                None => return Err(self.error(start, "unterminated quoted string")),
                Some('"') => {
                    self.position += 1;
                    return Ok(text);
                }
                Some('\\') => {
                    self.position += 1;
                    match self.peek() {
                        Some(c @ ('"' | '\\')) => text.push(c),
                        _ => {
                            return Err(self
                                .error(self.position - 1, "invalid escape (only \\\" and \\\\)"));
                        }
                    }
                }
                Some(c) => text.push(c),
            }
            self.position += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::test_support::{key, path};

    fn sel(k: &str, v: &str) -> Segment {
        Segment::Select {
            key: k.to_string(),
            value: v.to_string(),
        }
    }

    #[test]
    fn path_text_round_trips() {
        let cases = [
            (
                "dotted keys",
                "spec.replicas",
                vec![key("spec"), key("replicas")],
            ),
            (
                "index",
                "spec.containers[0].image",
                vec![
                    key("spec"),
                    key("containers"),
                    Segment::Index(0),
                    key("image"),
                ],
            ),
            (
                "merge-key selector",
                "spec.template.spec.containers[name=app].image",
                vec![
                    key("spec"),
                    key("template"),
                    key("spec"),
                    key("containers"),
                    sel("name", "app"),
                    key("image"),
                ],
            ),
            (
                "numeric selector value",
                "ports[containerPort=80]",
                vec![key("ports"), sel("containerPort", "80")],
            ),
            (
                "selector value with dots and slashes",
                "volumeMounts[mountPath=/var/run/app.d].readOnly",
                vec![
                    key("volumeMounts"),
                    sel("mountPath", "/var/run/app.d"),
                    key("readOnly"),
                ],
            ),
            (
                "quoted label key",
                r#"metadata.labels["app.kubernetes.io/name"]"#,
                vec![
                    key("metadata"),
                    key("labels"),
                    key("app.kubernetes.io/name"),
                ],
            ),
            (
                "quoted key with quote, backslash and bracket",
                r#"metadata.annotations["a\"b\\c[d]"]"#,
                vec![key("metadata"), key("annotations"), key(r#"a"b\c[d]"#)],
            ),
            (
                "quoted selector value",
                r#"env[name="a]b"].value"#,
                vec![key("env"), sel("name", "a]b"), key("value")],
            ),
            (
                "empty selector value is quoted",
                r#"env[name=""]"#,
                vec![key("env"), sel("name", "")],
            ),
            (
                "quoted selector key",
                r#"items["a=b"=c]"#,
                vec![key("items"), sel("a=b", "c")],
            ),
            (
                "leading quoted key",
                r#"["a.b"].c"#,
                vec![key("a.b"), key("c")],
            ),
            ("leading index", "[2].x", vec![Segment::Index(2), key("x")]),
            (
                "digits as a dotted key",
                "data.0",
                vec![key("data"), key("0")],
            ),
            (
                "nested indexes",
                "matrix[1][0]",
                vec![key("matrix"), Segment::Index(1), Segment::Index(0)],
            ),
        ];
        for (name, text, segments) in cases {
            let parsed: FieldPath = text.parse().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(parsed, FieldPath(segments), "{name}: parse");
            assert_eq!(parsed.to_string(), text, "{name}: display");
            assert_eq!(
                parsed.to_string().parse::<FieldPath>().as_ref(),
                Ok(&parsed),
                "{name}: round trip"
            );
        }
    }

    #[test]
    fn path_text_other_spellings_display_canonically() {
        let cases = [
            (
                "unquoted bracket key",
                "metadata.labels[app.kubernetes.io/name]",
                r#"metadata.labels["app.kubernetes.io/name"]"#,
            ),
            ("quoted simple key", r#"a["b"]"#, "a.b"),
            ("quoted digits stay a key", r#"a["0"]"#, "a.0"),
            (
                "quoted plain selector value",
                r#"env[name="x"]"#,
                "env[name=x]",
            ),
            (
                "unquoted empty selector value",
                "env[name=]",
                r#"env[name=""]"#,
            ),
        ];
        for (name, text, canonical) in cases {
            assert_eq!(path(text).to_string(), canonical, "{name}");
            assert_eq!(path(canonical), path(text), "{name}");
        }
    }

    #[test]
    fn path_text_errors() {
        let cases = [
            ("empty", "", 1, "empty path"),
            ("double dot", "a..b", 3, "empty key"),
            ("leading dot", ".a", 1, "empty key"),
            ("trailing dot", "a.", 3, "empty key"),
            ("dot before bracket", "a.[0]", 3, "empty key"),
            ("unclosed bracket", "a[0", 2, "unclosed '['"),
            ("unclosed selector", "a[name=x", 2, "unclosed '['"),
            ("empty brackets", "a[]", 2, "empty brackets"),
            ("text after bracket", "a[0]b", 5, "unexpected 'b'"),
            ("closing bracket in key", "a]b", 2, "unexpected ']'"),
            ("quote in key", "a\"b", 2, "unexpected '\"'"),
            (
                "unterminated quote",
                r#"a["b"#,
                3,
                "unterminated quoted string",
            ),
            ("bad escape", r#"a["b\x"]"#, 5, "invalid escape"),
            (
                "quoted key not closed",
                r#"a["b"x"#,
                6,
                "expected ']' or '='",
            ),
            ("empty merge key", "a[=x]", 3, "empty merge key"),
            (
                "bracket inside selector value",
                "a[n=x[y]]",
                6,
                "unexpected '['",
            ),
            (
                "quoted value not closed by bracket",
                r#"a[n="x"y]"#,
                8,
                "expected ']' after the selector value",
            ),
            (
                "index too large",
                "a[99999999999999999999999]",
                3,
                "too large",
            ),
        ];
        for (name, text, want_position, want_reason) in cases {
            match text.parse::<FieldPath>() {
                Err(SchemaError::PathSyntax {
                    text: got_text,
                    position,
                    reason,
                }) => {
                    assert_eq!(got_text, text, "{name}");
                    assert_eq!(position, want_position, "{name}: {reason}");
                    assert!(reason.contains(want_reason), "{name}: {reason}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        let message = "a..b".parse::<FieldPath>().unwrap_err().to_string();
        assert_eq!(message, r#"field path "a..b": empty key at character 3"#);
    }
}
