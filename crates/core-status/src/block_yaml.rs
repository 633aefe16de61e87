//! A fast reader for the block-style YAML that `kubectl get -o yaml`, Helm and most generators
//! write, turning it into JSON text so the compact JSON decoder can take over.
//!
//! The general YAML parser reads about 12 MB/s: a 10 MB `kubectl get all -A -o yaml` dump
//! would take close to a second before any status is computed. This reader handles the subset
//! such dumps are made of — block mappings and sequences, plain, quoted and block scalars
//! (multi-line folding included), empty flow collections, comments, `---`/`...` markers — in one
//! pass over the bytes, and gives up (`None`) on anything else: anchors, aliases, tags,
//! non-empty flow collections, complex keys, directives, tabs in indentation, duplicate or
//! merge keys, ambiguous plain scalars, nesting deeper than the general parser allows. Giving
//! up is always safe: the caller then uses the general parser, which also reports errors.
//!
//! Exactness: whatever this reader accepts, it turns into the same value the general parser
//! (serde-saphyr with [`crate::input`]'s options) gives, down to how plain scalars resolve
//! (null, YAML 1.1 booleans, integers, strings); the tests compare the two on every construct.
//! Plain scalars whose type the two could disagree on (floats, hexadecimal, signed or
//! zero-padded numbers, timestamps) are not resolved here: the reader gives up on them.

use std::borrow::Cow;
use std::collections::HashSet;

/// The deepest nesting accepted (the general parser's default limit).
const MAX_DEPTH: usize = 64;

/// The JSON text of a YAML stream: the one document's value, or an array of the documents'
/// values when there are several. `None` when the stream is outside the subset (see the module
/// docs) or has no document at all.
pub fn to_json(text: &str) -> Option<String> {
    let (mut json, indices) = to_json_documents(text)?;
    match indices.len() {
        0 => None,
        1 => {
            // Just the one value, without the array brackets.
            json.pop();
            json.remove(0);
            Some(json)
        }
        _ => Some(json),
    }
}

/// A JSON array of the stream's documents, with each one's document index as
/// [`crate::input::parse`] counts them (every `---` starts a new one, except a `---` that opens
/// the stream; documents with only comments are left out but counted).
pub fn to_json_documents(text: &str) -> Option<(String, Vec<usize>)> {
    if text.starts_with('\u{feff}') {
        return None;
    }
    let first_content = text.len() - text.trim_start().len();
    let mut reader = Reader {
        source: text,
        pos: 0,
        pending: None,
        out: String::with_capacity(text.len()),
        depth: 0,
    };
    let mut indices = Vec::new();
    let mut index = 0usize;
    let mut ended = false;
    reader.out.push('[');
    while let Some(line) = reader.peek()? {
        match line.marker {
            Marker::DocumentStart => {
                if line.at > first_content {
                    index += 1;
                }
                ended = false;
                reader.take();
                continue;
            }
            Marker::DocumentEnd => {
                ended = true;
                reader.take();
                continue;
            }
            // Content after `...` without a new `---`: left to the general parser.
            Marker::None if ended => return None,
            Marker::None => {}
        }
        if indices.last() == Some(&index) {
            return None;
        }
        if !indices.is_empty() {
            reader.out.push(',');
        }
        indices.push(index);
        reader.node(-1)?;
        match reader.peek()? {
            None => break,
            Some(line) if line.marker != Marker::None => {}
            // A node must end at a document marker or at the end of the stream.
            Some(_) => return None,
        }
    }
    reader.out.push(']');
    Some((reader.out, indices))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Marker {
    None,
    DocumentStart,
    DocumentEnd,
}

/// One significant line (not blank, not only a comment), or what follows `- ` on it.
#[derive(Clone, Copy, Debug)]
struct Line<'a> {
    /// Byte offset of the start of the line.
    at: usize,
    /// Column of `content`.
    indent: usize,
    /// From the column on, trailing whitespace removed (comments not yet removed).
    content: &'a str,
    marker: Marker,
}

struct Reader<'a> {
    source: &'a str,
    /// Start of the next unread line.
    pos: usize,
    /// A line (or the rest of a sequence entry's line) already read but not consumed.
    pending: Option<Line<'a>>,
    out: String,
    depth: usize,
}

impl<'a> Reader<'a> {
    /// The next raw line (without its line break), or `None` at the end.
    fn raw_line(&mut self) -> Option<&'a str> {
        if self.pos >= self.source.len() {
            return None;
        }
        let start = self.pos;
        let end = self.source[start..]
            .find('\n')
            .map_or(self.source.len(), |i| start + i);
        self.pos = end + 1;
        let line = &self.source[start..end];
        Some(line.strip_suffix('\r').unwrap_or(line))
    }

    /// The next significant line without consuming it. `Err`-like `None` (the outer Option)
    /// means the stream is outside the subset.
    fn peek(&mut self) -> Option<Option<Line<'a>>> {
        if let Some(line) = self.pending {
            return Some(Some(line));
        }
        loop {
            let at = self.pos;
            let Some(raw) = self.raw_line() else {
                return Some(None);
            };
            let trimmed = raw.trim_start_matches(' ');
            if trimmed.starts_with('\t') {
                // Tabs may not indent; a tab-only line is blank, anything else is refused.
                if trimmed.trim().is_empty() {
                    continue;
                }
                return None;
            }
            let content = trimmed.trim_end_matches([' ', '\t']);
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            let indent = raw.len() - trimmed.len();
            let marker = if indent == 0 {
                document_marker(content)?
            } else {
                Marker::None
            };
            if indent == 0 && content.starts_with('%') {
                return None;
            }
            let line = Line {
                at,
                indent,
                content,
                marker,
            };
            self.pending = Some(line);
            return Some(Some(line));
        }
    }

    fn take(&mut self) {
        self.pending = None;
    }

    /// Reads the node that starts on the next significant line, which must be indented more
    /// than `parent`. An absent node is null.
    fn node(&mut self, parent: isize) -> Option<()> {
        let Some(line) = self.peek()? else {
            self.out.push_str("null");
            return Some(());
        };
        if line.marker != Marker::None || (line.indent as isize) <= parent {
            self.out.push_str("null");
            return Some(());
        }
        self.block_node(line, parent)
    }

    /// A node whose first line is `line` (a whole line, or the rest of a `- ` entry).
    fn block_node(&mut self, line: Line<'a>, parent: isize) -> Option<()> {
        if is_sequence_entry(line.content) {
            return self.sequence(line.indent);
        }
        if split_key(line.content)?.is_some() {
            return self.mapping(line.indent);
        }
        // A scalar alone on its line (e.g. under `key:`).
        self.take();
        self.value(line.content, parent)
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// A block sequence whose entries start at column `indent`.
    fn sequence(&mut self, indent: usize) -> Option<()> {
        self.enter()?;
        self.out.push('[');
        let mut first = true;
        while let Some(line) = self.peek()? {
            if line.marker != Marker::None || line.indent < indent {
                break;
            }
            if line.indent > indent {
                return None;
            }
            if !is_sequence_entry(line.content) {
                // A sequence written at its key's column ends at the next key.
                break;
            }
            self.take();
            if !first {
                self.out.push(',');
            }
            first = false;
            let rest = line.content[1..].trim_start_matches(' ');
            if rest.is_empty() || rest.starts_with('#') {
                self.node(indent as isize)?;
                continue;
            }
            if rest.starts_with('\t') || is_sequence_entry(rest) {
                // `- - x` (nested compact sequences) and tabs after the dash: not handled.
                return None;
            }
            let column = indent + (line.content.len() - rest.len());
            let entry = Line {
                at: line.at,
                indent: column,
                content: rest,
                marker: Marker::None,
            };
            if split_key(rest)?.is_some() {
                // `- key: value`: a mapping whose keys are at the column of `key`.
                self.pending = Some(entry);
                self.mapping(column)?;
            } else {
                self.value(rest, indent as isize)?;
            }
        }
        self.out.push(']');
        self.depth -= 1;
        Some(())
    }

    /// A block mapping whose keys start at column `indent`.
    fn mapping(&mut self, indent: usize) -> Option<()> {
        self.enter()?;
        self.out.push('{');
        let mut keys = Keys::default();
        let mut first = true;
        while let Some(line) = self.peek()? {
            if line.marker != Marker::None || line.indent < indent {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let (key, rest) = split_key(line.content)??;
            if key == "<<" || !keys.insert(key.clone()) {
                return None;
            }
            self.take();
            if !first {
                self.out.push(',');
            }
            first = false;
            write_string(&mut self.out, &key);
            self.out.push(':');
            let rest = rest.trim_start_matches(' ');
            if rest.starts_with('\t') {
                return None;
            }
            if rest.is_empty() || rest.starts_with('#') {
                // The value is on the next lines: more indented, or a sequence at this column.
                match self.peek()? {
                    Some(next)
                        if next.marker == Marker::None
                            && next.indent == indent
                            && is_sequence_entry(next.content) =>
                    {
                        self.sequence(indent)?
                    }
                    _ => self.node(indent as isize)?,
                }
            } else {
                self.value(rest, indent as isize)?;
            }
        }
        self.out.push('}');
        self.depth -= 1;
        Some(())
    }

    /// A value written on the current line (already consumed), in a node whose parent is at
    /// column `parent`: a block scalar header, a quoted or plain scalar (which may go on over
    /// more-indented lines), or an empty flow collection.
    fn value(&mut self, text: &'a str, parent: isize) -> Option<()> {
        match text.as_bytes().first()? {
            b'|' | b'>' => self.block_scalar(text, parent),
            b'"' => {
                let value = self.double_quoted(&text[1..], parent)?;
                write_string(&mut self.out, &value);
                self.after_scalar(parent)
            }
            b'\'' => {
                let value = self.single_quoted(&text[1..], parent)?;
                write_string(&mut self.out, &value);
                self.after_scalar(parent)
            }
            b'{' | b'[' => {
                let close = if text.starts_with('{') { '}' } else { ']' };
                let rest = text[1..].trim_start_matches(' ').strip_prefix(close)?;
                if !is_blank_or_comment(rest) {
                    return None;
                }
                self.out.push_str(if close == '}' { "{}" } else { "[]" });
                self.after_scalar(parent)
            }
            b'&' | b'*' | b'!' | b'?' | b'%' | b'@' | b'`' | b',' | b']' | b'}' | b'#' => None,
            _ => match self.plain(text, parent)? {
                Cow::Borrowed(single_line) => write_plain(&mut self.out, single_line),
                // A multi-line plain scalar is a string (none of the special forms span lines).
                Cow::Owned(folded) => {
                    write_string(&mut self.out, &folded);
                    Some(())
                }
            },
        }
    }

    /// After a complete quoted scalar or flow collection, nothing may follow at a deeper
    /// indentation (the general parser reports that as an error).
    fn after_scalar(&mut self, parent: isize) -> Option<()> {
        match self.peek()? {
            Some(line) if line.marker == Marker::None && line.indent as isize > parent => None,
            _ => Some(()),
        }
    }

    /// A plain scalar: `raw` (the rest of its line), continued over following lines indented
    /// more than `parent`, each line break folded into a space (or one line feed per blank
    /// line in between).
    fn plain(&mut self, raw: &'a str, parent: isize) -> Option<Cow<'a, str>> {
        if self.pending.is_some() {
            return None;
        }
        let first = strip_comment(raw);
        let commented = first.len() != raw.len();
        if !plain_line_ok(first) || first.starts_with("? ") || first == "?" {
            return None;
        }
        let mut folded: Option<String> = None;
        loop {
            let save = self.pos;
            let mut blank_lines = 0usize;
            let next = loop {
                let Some(line) = self.raw_line() else {
                    break None;
                };
                let trimmed = line.trim_start_matches(' ');
                if trimmed.trim_end_matches([' ', '\t']).is_empty() {
                    blank_lines += 1;
                    continue;
                }
                break Some((line.len() - trimmed.len(), trimmed));
            };
            let Some((indent, trimmed)) = next.filter(|(indent, _)| *indent as isize > parent)
            else {
                // Not a continuation: the caller reads that line again.
                self.pos = save;
                break;
            };
            let content = trimmed.trim_end_matches([' ', '\t']);
            let text = strip_comment(content);
            // A comment ends a plain scalar (anything indented after it is an error); tabs
            // and what looks like structure are left to the general parser.
            if commented
                || trimmed.starts_with(['\t', '#'])
                || text.len() != content.len()
                || !plain_line_ok(text)
                || (indent == 0 && document_marker(text)? != Marker::None)
            {
                return None;
            }
            let value = folded.get_or_insert_with(|| first.to_string());
            push_fold(value, blank_lines);
            value.push_str(text);
        }
        Some(match folded {
            Some(value) => Cow::Owned(value),
            None => Cow::Borrowed(first),
        })
    }

    /// A single-quoted scalar; `rest` follows the opening quote.
    fn single_quoted(&mut self, rest: &'a str, parent: isize) -> Option<String> {
        let mut value = String::new();
        let mut line = rest;
        loop {
            let bytes = line.as_bytes();
            let (mut i, mut start) = (0, 0);
            while i < bytes.len() {
                if bytes[i] != b'\'' {
                    i += 1;
                    continue;
                }
                if bytes.get(i + 1) == Some(&b'\'') {
                    // `''` is one quote.
                    value.push_str(&line[start..=i]);
                    i += 2;
                    start = i;
                    continue;
                }
                value.push_str(&line[start..i]);
                return is_blank_or_comment(&line[i + 1..]).then_some(value);
            }
            value.push_str(line[start..].trim_end_matches([' ', '\t']));
            line = self.fold_quoted_break(&mut value, parent)?;
        }
    }

    /// A line break inside a quoted scalar: reads the following lines, appends the folded
    /// break (a space, or one line feed per blank line) and returns the next line's text with
    /// its leading whitespace removed.
    fn fold_quoted_break(&mut self, value: &mut String, parent: isize) -> Option<&'a str> {
        if self.pending.is_some() {
            return None;
        }
        let mut blank_lines = 0usize;
        loop {
            let raw = self.raw_line()?;
            let trimmed = raw.trim_start_matches([' ', '\t']);
            if trimmed.is_empty() {
                blank_lines += 1;
                continue;
            }
            let indent = raw.len() - raw.trim_start_matches(' ').len();
            if indent as isize <= parent || raw.starts_with('\t') {
                return None;
            }
            push_fold(value, blank_lines);
            return Some(trimmed);
        }
    }

    /// A double-quoted scalar; `rest` follows the opening quote.
    fn double_quoted(&mut self, rest: &'a str, parent: isize) -> Option<String> {
        let mut value = String::new();
        let mut line = rest;
        loop {
            let bytes = line.as_bytes();
            let (mut i, mut start) = (0, 0);
            let mut escaped_break = false;
            while i < bytes.len() {
                match bytes[i] {
                    b'"' => {
                        value.push_str(&line[start..i]);
                        return is_blank_or_comment(&line[i + 1..]).then_some(value);
                    }
                    b'\\' => {
                        value.push_str(&line[start..i]);
                        let Some(&code) = bytes.get(i + 1) else {
                            escaped_break = true;
                            break;
                        };
                        i += 2;
                        value.push(match code {
                            b'0' => '\0',
                            b'a' => '\x07',
                            b'b' => '\x08',
                            b't' | b'\t' => '\t',
                            b'n' => '\n',
                            b'v' => '\x0b',
                            b'f' => '\x0c',
                            b'r' => '\r',
                            b'e' => '\x1b',
                            b' ' => ' ',
                            b'"' => '"',
                            b'/' => '/',
                            b'\\' => '\\',
                            b'N' => '\u{85}',
                            b'_' => '\u{a0}',
                            b'L' => '\u{2028}',
                            b'P' => '\u{2029}',
                            b'x' | b'u' | b'U' => {
                                let digits = match code {
                                    b'x' => 2,
                                    b'u' => 4,
                                    _ => 8,
                                };
                                let hex = line.get(i..i + digits)?;
                                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                                    return None;
                                }
                                i += digits;
                                // Surrogate halves are not characters: left to the general parser.
                                char::from_u32(u32::from_str_radix(hex, 16).ok()?)?
                            }
                            _ => return None,
                        });
                        start = i;
                    }
                    _ => i += 1,
                }
            }
            if escaped_break {
                // `\` at the end of a line: the break and the next line's indentation vanish.
                let raw = self.raw_line()?;
                let indent = raw.len() - raw.trim_start_matches(' ').len();
                let trimmed = raw.trim_start_matches([' ', '\t']);
                if trimmed.is_empty() || indent as isize <= parent || raw.starts_with('\t') {
                    return None;
                }
                line = trimmed;
                continue;
            }
            value.push_str(line[start..].trim_end_matches([' ', '\t']));
            line = self.fold_quoted_break(&mut value, parent)?;
        }
    }

    /// A literal (`|`) or folded (`>`) block scalar; `header` is the indicator and the rest of
    /// its line. Content lines are those indented at least as much as the first non-blank one
    /// (which must be deeper than `parent`), and blank lines.
    fn block_scalar(&mut self, header: &'a str, parent: isize) -> Option<()> {
        if self.pending.is_some() {
            return None;
        }
        let literal = header.starts_with('|');
        let chomp = match strip_comment(&header[1..]) {
            "" => Chomp::Clip,
            "-" => Chomp::Strip,
            "+" => Chomp::Keep,
            // Explicit indentation indicators (`|2`): left to the general parser.
            _ => return None,
        };
        let base = usize::try_from(parent + 1).unwrap_or(0);
        let mut indent: Option<usize> = None;
        let mut lines: Vec<&'a str> = Vec::new();
        let mut leading_blank_max = 0usize;
        loop {
            let save = self.pos;
            let Some(raw) = self.raw_line() else { break };
            let spaces = raw.len() - raw.trim_start_matches(' ').len();
            let rest = &raw[spaces..];
            if rest.is_empty() {
                if indent.is_none() {
                    leading_blank_max = leading_blank_max.max(spaces);
                }
                lines.push(raw);
                continue;
            }
            let content_indent = match indent {
                Some(i) => i,
                None => {
                    if rest.starts_with('\t') {
                        return None;
                    }
                    spaces
                }
            };
            if spaces < content_indent || spaces < base {
                if rest.starts_with('\t') {
                    return None;
                }
                self.pos = save;
                break;
            }
            if spaces == 0 && document_marker(rest.trim_end())? != Marker::None {
                self.pos = save;
                break;
            }
            if indent.is_none() {
                if leading_blank_max > spaces {
                    return None;
                }
                indent = Some(spaces);
            }
            lines.push(raw);
        }
        let indent = indent.unwrap_or(base);
        let mut value = String::new();
        let mut has_text = false;
        let mut blank_run = 0usize;
        for raw in &lines {
            if raw.trim_start_matches(' ').is_empty() {
                if raw.len() > indent {
                    // Spaces beyond the indentation on a blank line are content: left to the
                    // general parser.
                    return None;
                }
                blank_run += 1;
                continue;
            }
            let text = &raw[indent..];
            if !literal && text.starts_with([' ', '\t']) {
                // More-indented lines of a folded scalar keep their breaks: not handled here.
                return None;
            }
            let breaks = match (has_text, literal) {
                (false, _) => blank_run,
                (true, true) => blank_run + 1,
                (true, false) if blank_run == 0 => {
                    value.push(' ');
                    0
                }
                (true, false) => blank_run,
            };
            value.extend(std::iter::repeat_n('\n', breaks));
            value.push_str(text);
            has_text = true;
            blank_run = 0;
        }
        match (chomp, has_text) {
            (Chomp::Strip, _) => {}
            (Chomp::Clip, true) => value.push('\n'),
            (Chomp::Clip, false) => {}
            (Chomp::Keep, true) => value.extend(std::iter::repeat_n('\n', blank_run + 1)),
            (Chomp::Keep, false) if blank_run == 0 => {}
            (Chomp::Keep, false) => return None,
        }
        write_string(&mut self.out, &value);
        Some(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chomp {
    Clip,
    Strip,
    Keep,
}

/// The keys of one mapping, for the duplicate check (a linear scan while small).
#[derive(Default)]
struct Keys<'a> {
    few: Vec<Cow<'a, str>>,
    many: Option<HashSet<Cow<'a, str>>>,
}

impl<'a> Keys<'a> {
    fn insert(&mut self, key: Cow<'a, str>) -> bool {
        if let Some(many) = &mut self.many {
            return many.insert(key);
        }
        if self.few.contains(&key) {
            return false;
        }
        self.few.push(key);
        if self.few.len() > 16 {
            self.many = Some(self.few.drain(..).collect());
        }
        true
    }
}

/// A folded line break in a flow scalar: a space, or one line feed per blank line between.
fn push_fold(value: &mut String, blank_lines: usize) {
    if blank_lines == 0 {
        value.push(' ');
    } else {
        value.extend(std::iter::repeat_n('\n', blank_lines));
    }
}

fn document_marker(content: &str) -> Option<Marker> {
    for (prefix, marker) in [("---", Marker::DocumentStart), ("...", Marker::DocumentEnd)] {
        if let Some(rest) = content.strip_prefix(prefix) {
            if rest.is_empty() {
                return Some(marker);
            }
            if rest.starts_with([' ', '\t']) {
                // Only a comment may follow a marker here (`--- !tag`, `--- {}`: not handled).
                return is_blank_or_comment(rest).then_some(marker);
            }
        }
    }
    Some(Marker::None)
}

fn is_sequence_entry(content: &str) -> bool {
    content == "-" || content.starts_with("- ") || content.starts_with("-\t")
}

fn is_blank_or_comment(text: &str) -> bool {
    let trimmed = text.trim_start_matches([' ', '\t']);
    trimmed.is_empty() || (trimmed.starts_with('#') && trimmed.len() < text.len())
}

/// Everything before a ` #` comment, trailing whitespace removed.
fn strip_comment(text: &str) -> &str {
    let bytes = text.as_bytes();
    for i in 1..bytes.len() {
        if bytes[i] == b'#' && matches!(bytes[i - 1], b' ' | b'\t') {
            return text[..i].trim_end_matches([' ', '\t']);
        }
    }
    text.trim_end_matches([' ', '\t'])
}

/// Whether a line of a plain scalar is plain text (no `key: value` or `- ` structure in it).
fn plain_line_ok(text: &str) -> bool {
    !(text.ends_with(':')
        || text.contains(": ")
        || text.contains(":\t")
        || text.starts_with("- ")
        || text == "-")
}

/// `key: rest` on a line: the key (unquoted) and what follows the separator. `Some(None)` when
/// the line is not a mapping entry; `None` when it is outside the subset.
#[allow(clippy::type_complexity)]
fn split_key(content: &str) -> Option<Option<(Cow<'_, str>, &str)>> {
    let bytes = content.as_bytes();
    match bytes.first()? {
        b'"' | b'\'' => {
            let quote = bytes[0];
            // A quoted key on one line.
            let mut i = 1;
            let mut key = String::new();
            let mut start = 1;
            while i < bytes.len() {
                if bytes[i] == quote {
                    if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                        key.push_str(&content[start..=i]);
                        i += 2;
                        start = i;
                        continue;
                    }
                    key.push_str(&content[start..i]);
                    let after = &content[i + 1..];
                    let after_trim = after.trim_start_matches(' ');
                    return match after_trim.strip_prefix(':') {
                        Some(rest) if rest.is_empty() || rest.starts_with([' ', '\t']) => {
                            Some(Some((Cow::Owned(key), rest)))
                        }
                        // A quoted scalar, not a key; its reader checks the rest.
                        _ if is_blank_or_comment(after) => Some(None),
                        _ => None,
                    };
                }
                if quote == b'"' && bytes[i] == b'\\' {
                    // Escapes in keys: left to the general parser.
                    return None;
                }
                i += 1;
            }
            // A quoted scalar going on over more lines.
            Some(None)
        }
        b'&' | b'*' | b'!' | b'?' | b'%' | b'@' | b'`' | b'{' | b'[' | b'|' | b'>' | b'#'
        | b',' | b']' | b'}' => {
            if matches!(bytes[0], b'{' | b'[' | b'|' | b'>') {
                // A flow collection or block scalar as a whole node: decided by `value`.
                return Some(None);
            }
            None
        }
        _ => {
            let mut i = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b':' if i + 1 == bytes.len() || matches!(bytes[i + 1], b' ' | b'\t') => {
                        let key = &content[..i];
                        if key.ends_with([' ', '\t']) || key.is_empty() {
                            return None;
                        }
                        if matches!(key, "~" | "null" | "Null" | "NULL") {
                            return None;
                        }
                        return Some(Some((Cow::Borrowed(key), &content[i + 1..])));
                    }
                    b'#' if i > 0 && matches!(bytes[i - 1], b' ' | b'\t') => return Some(None),
                    _ => i += 1,
                }
            }
            Some(None)
        }
    }
}

/// A one-line plain scalar as JSON: null, a YAML 1.1 boolean, a decimal integer or a string;
/// `None` for forms whose resolution is left to the general parser.
fn write_plain(out: &mut String, text: &str) -> Option<()> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => {
            out.push_str("null");
            return Some(());
        }
        _ => {}
    }
    let lower_is = |words: &[&str]| words.iter().any(|w| text.eq_ignore_ascii_case(w));
    if lower_is(&["true", "yes", "y", "on"]) {
        out.push_str("true");
        return Some(());
    }
    if lower_is(&["false", "no", "n", "off"]) {
        out.push_str("false");
        return Some(());
    }
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let first = unsigned.bytes().next()?;
    if first.is_ascii_digit() || first == b'.' {
        let is_decimal = !text.starts_with('+')
            && unsigned.bytes().all(|b| b.is_ascii_digit())
            && (unsigned == "0" || !unsigned.starts_with('0'))
            && unsigned.len() <= 18;
        if is_decimal && text == "-0" {
            // `-0` resolves to an integer zero by one parser and a float by another.
            return None;
        }
        if is_decimal {
            out.push_str(text);
            return Some(());
        }
        // A number in another spelling (float, hexadecimal, `+1`, `1_000`) is left to the
        // general parser; anything else (`10.0.0.1`, `500m`, a UID, a date) is a string.
        if maybe_number(unsigned) {
            return None;
        }
    }
    write_string(out, text);
    Some(())
}

/// Whether the general parser could read `unsigned` (a plain scalar without its sign, starting
/// with a digit or a dot) as a number: a radix-prefixed or underscored integer, or anything the
/// float grammar accepts (`1.5`, `.5`, `1e3`, `1.`). Errs towards yes.
fn maybe_number(unsigned: &str) -> bool {
    let b = unsigned.as_bytes();
    if b.len() >= 2 && b[0] == b'0' && b"xXoObB".contains(&b[1]) {
        return true;
    }
    if b.iter().all(|c| c.is_ascii_digit() || *c == b'_') {
        return true;
    }
    let digits_from = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let mut i = digits_from(0);
    let mut digits = i;
    if b.get(i) == Some(&b'.') {
        let end = digits_from(i + 1);
        digits += end - i - 1;
        i = end;
    }
    if digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let end = digits_from(i);
        if end == i {
            return true;
        }
        i = end;
    }
    i == b.len()
}

/// A JSON string literal.
fn write_string(out: &mut String, text: &str) {
    out.push('"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\t' => "\\t",
            b'\r' => "\\r",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[start..i]);
        if escape.is_empty() {
            out.push_str(&format!("\\u{b:04x}"));
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&text[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::to_json;

    /// What the general parser makes of the stream: the one document, or an array of them.
    fn general(yaml: &str) -> Value {
        let mut documents: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
        if documents.len() == 1 {
            documents.remove(0)
        } else {
            Value::Array(documents)
        }
    }

    #[track_caller]
    fn agrees(yaml: &str) {
        let json = to_json(yaml).unwrap_or_else(|| panic!("fast path refused:\n{yaml}"));
        let fast: Value = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("invalid JSON {json:?} ({e}) from:\n{yaml}"));
        assert_eq!(fast, general(yaml), "from:\n{yaml}");
    }

    #[test]
    fn agrees_with_the_general_parser() {
        let cases = [
            "a: 1\n",
            "a: b\nc:\n  d: e\n  f: [ ]\ng: {}\n",
            "items:\n- name: x\n  value: 1\n- name: y\n  nested:\n    deep: true\n",
            "items:\n  - a\n  - b\n  -\n  - c: d\n    e: f\n",
            "list:\n-\n  a: 1\n- b\n",
            "# head\na: 1 # trailing\n\n# between\nb: 'x # not a comment'\nc: x#y\n",
            "v: [] # empty\nw: {} \n",
            "s: ''\nt: \"\"\nu: 'it''s'\nv: \"tab\\there \\\"q\\\" \\\\ \\u00e9 \\x41 \\/\"\n",
            "n1: ~\nn2: null\nn3: Null\nn4:\nn5: NULL\n",
            "b1: true\nb2: False\nb3: yes\nb4: No\nb5: on\nb6: OFF\nb7: y\nb8: n\n",
            "i1: 0\ni2: 42\ni3: -7\ni4: 123456789012345678\n",
            "s1: 10.244.0.5\ns2: 500m\ns3: 128Mi\ns4: v1.2.3\ns5: -foo\ns6: 1.2.3\ns7: app:latest\n",
            "s8: http://x.example/a?b=c&d\ns9: a,b\ns10: x{y}[z]\ns11: 'true'\ns12: \"1000\"\n",
            "msg: 'a long message that was folded\n  by the emitter over\n  three lines'\nnext: 1\n",
            "msg: a long plain message folded\n  over two lines\nnext: 1\n",
            "msg: \"double quoted folded\n  here, with an escaped\\\n  break and\n\n  a blank line\"\n",
            "msg: 'keeps\n\n\n  two breaks'\n",
            "lit: |\n  line 1\n    indented\n\n  line 3\nnext: x\n",
            "lit: |-\n  no trailing\n  break\n\n",
            "lit: |+\n  keep\n\n\nnext: 1\n",
            "fold: >\n  folded\n  text\n\n  paragraph\nnext: 1\n",
            "fold: >-\n  folded\n  stripped\n",
            "lit: |\n  # not a comment\n  --- not a marker\nn: 1\n",
            "seq:\n- |\n  in a sequence\n- >-\n  folded\n  item\n",
            "empty_block: |\nnext: 1\n",
            "'quoted key': 1\n\"dq key\": 2\n8080: port\ntrue: t\nkey with spaces: v\n",
            "a:\n  b:\n    c:\n      - d: 1\n        e:\n        - f\n",
            "---\na: 1\n---\nb: 2\n...\n---\n# only a comment\n---\nc: 3\n",
            "- a: 1\n- b: 2\n",
            "plain scalar document\n",
            "crlf: 1\r\nnext: two\r\n",
            "unicode: héllo wörld ✓\nemoji: \"\\U0001F600\"\n",
            "colon: a:b\nurl: x://y\ntime: 12:30\n",
            "k: -1a2g\nl: +x\nm: .x.y\nuid: 00000000-0000-4000-8000-000000000000\n",
            "d: 2026-01-01\nt: 2026-01-01T00:00:00Z\nv: 1.2.3-rc.1\nip: 10.0.0.1\nx: -1x\n",
        ];
        for yaml in cases {
            agrees(yaml);
        }
    }

    #[test]
    fn leaves_the_rest_to_the_general_parser() {
        let refused = [
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "a: {b: 1}\n",
            "a: [1, 2]\n",
            "? complex\n: key\n",
            "%YAML 1.2\n---\na: 1\n",
            "a:\n\tb: 1\n",
            "a: 1\na: 2\n",
            "<<: {a: 1}\n",
            "f: 1.5\n",
            "h: 0x1F\n",
            "o: 0o17\n",
            "p: +1\n",
            "z: 007\n",
            "u: 1_000\n",
            "e: 1e3\n",
            "e2: 1.5E-3\n",
            "dot: .5\n",
            "trail: 5.\n",
            "neg0: -0\n",
            "lit: |2\n   x\n",
            "fold: >\n  a\n    more indented\n",
            "--- {a: 1}\n",
            "- - nested\n",
            "a: b: c\n",
            "a: x\n    y: z\n",
            "a: 'unterminated\n",
            "",
            "# only comments\n",
            "\u{feff}a: 1\n",
            "a: \"\\ud800\"\n",
        ];
        for yaml in refused {
            assert!(to_json(yaml).is_none(), "accepted:\n{yaml}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_like_the_general_parser() {
        let mut yaml = String::new();
        for depth in 0..70 {
            yaml.push_str(&"  ".repeat(depth));
            yaml.push_str("k:\n");
        }
        assert!(to_json(&yaml).is_none());
        assert!(serde_saphyr::from_str::<Value>(&yaml).is_err());
    }

    /// Values written by the general serializer read back identically, and mostly fast.
    #[test]
    fn serializer_output_round_trips() {
        let mut accepted = 0;
        let samples: Vec<Value> = (0..200)
            .map(|i| {
                serde_json::json!({
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {
                        "name": format!("app-{i}"),
                        "namespace": "team",
                        "generation": i,
                        "labels": {"app": "x", "tier": if i % 2 == 0 { "web" } else { "1" }},
                        "annotations": {
                            "note": format!("a message with: colons, #hashes and 'quotes' {i}"),
                            "multi": "first line\nsecond line\n",
                            "empty": "",
                            "spaces": "  padded  ",
                        },
                    },
                    "spec": {
                        "replicas": i % 5,
                        "paused": i % 7 == 0,
                        "template": {"spec": {"containers": [
                            {"name": "c", "args": ["--flag", "-v", "2", "true", "null", "~"]},
                        ]}},
                        "selector": {},
                        "list": [],
                    },
                    "status": {"conditions": [{"type": "Available", "status": "True",
                        "message": "x".repeat(i % 120) + " tail words here"}]},
                })
            })
            .collect();
        for value in &samples {
            let yaml = serde_saphyr::to_string(value).unwrap();
            assert_eq!(&general(&yaml), value, "general parser round trip:\n{yaml}");
            if let Some(json) = to_json(&yaml) {
                accepted += 1;
                let fast: Value = serde_json::from_str(&json).unwrap();
                assert_eq!(&fast, value, "fast path:\n{yaml}");
            }
        }
        assert!(accepted >= 190, "fast path took only {accepted} of 200");
    }

    /// Random values — strings full of YAML's special characters and number-, bool- and
    /// null-like texts, nesting, empty collections — written by the general serializer: what
    /// the fast reader accepts, it reads exactly as the general parser does.
    #[test]
    fn random_values_read_the_same_both_ways() {
        struct Lcg(u64);
        impl Lcg {
            fn below(&mut self, n: u64) -> u64 {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (self.0 >> 33) % n
            }
        }
        const PIECES: &[&str] = &[
            "a",
            "key",
            " ",
            ": ",
            "#",
            " #x",
            "'",
            "\"",
            "\\",
            "\n",
            "\t",
            "-",
            "- ",
            "?",
            "{",
            "}",
            "[",
            "]",
            ",",
            "&a",
            "*a",
            "!t",
            "|",
            ">",
            "%",
            "@",
            "`",
            "1",
            "0",
            "1.5",
            "0x1F",
            "1e3",
            "+1",
            "-0",
            "007",
            "1_000",
            "yes",
            "No",
            "on",
            "~",
            "null",
            "true",
            "é",
            "✓",
            "10.0.0.1",
            "2026-01-01",
            "500m",
            "---",
            "...",
            "  ",
            "x:y",
            "http://a/b?c#d",
        ];
        fn text(rng: &mut Lcg) -> String {
            (0..rng.below(4) + 1)
                .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
                .collect()
        }
        fn value(rng: &mut Lcg, depth: u32) -> Value {
            match rng.below(if depth > 3 { 4 } else { 7 }) {
                0 => Value::String(text(rng)),
                1 => serde_json::json!(rng.below(2000) as i64 - 1000),
                2 => Value::Bool(rng.below(2) == 0),
                3 => Value::Null,
                4 | 5 => Value::Object(
                    (0..rng.below(4))
                        .map(|i| (format!("{}{i}", text(rng)), value(rng, depth + 1)))
                        .collect(),
                ),
                _ => Value::Array((0..rng.below(4)).map(|_| value(rng, depth + 1)).collect()),
            }
        }
        let mut rng = Lcg(2026);
        let (mut accepted, mut total) = (0, 0);
        for _ in 0..3000 {
            let v =
                serde_json::json!({"apiVersion": "v1", "kind": "X", "data": value(&mut rng, 0)});
            let Ok(yaml) = serde_saphyr::to_string(&v) else {
                continue;
            };
            let Ok(general) = serde_saphyr::from_str::<Value>(&yaml) else {
                continue;
            };
            total += 1;
            if let Some(json) = to_json(&yaml) {
                accepted += 1;
                let fast: Value = serde_json::from_str(&json)
                    .unwrap_or_else(|e| panic!("invalid JSON ({e}) from:\n{yaml}"));
                assert_eq!(fast, general, "from:\n{yaml}");
            }
        }
        assert!(total > 2500, "{total}");
        assert!(
            accepted * 3 > total * 2,
            "fast path took only {accepted} of {total}"
        );
    }
}
