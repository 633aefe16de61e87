//! Reading objects from YAML/JSON files, directories and standard input, for `strata status`
//! and `strata wait`: multi-document YAML, `kind: List` (and typed `*List`) flattened,
//! directories read recursively in name order. Errors name the source and document index.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::compact::{Compact, Many, Observed};
use crate::error::StatusError;
use crate::object::{Fields, str_or};
use crate::policy::PolicyFields;

/// One object read from input, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// File path, or `-` for standard input.
    pub source: String,
    /// 0-based index of the YAML document in its source.
    pub index: usize,
    pub object: Value,
}

impl Document {
    fn field<'a>(&'a self, name: &str) -> &'a str {
        crate::object::str_or(&self.object, &["metadata", name], "")
    }

    pub fn api_version(&self) -> &str {
        crate::object::str_or(&self.object, &["apiVersion"], "")
    }

    pub fn kind(&self) -> &str {
        crate::object::str_or(&self.object, &["kind"], "")
    }

    pub fn name(&self) -> &str {
        self.field("name")
    }

    pub fn namespace(&self) -> &str {
        self.field("namespace")
    }
}

/// Splits a YAML stream into documents at `---` lines (and drops `...` end markers), as
/// [`parse`] numbers them.
pub fn split_documents(text: &str) -> Vec<String> {
    let mut documents = vec![String::new()];
    for line in text.lines() {
        let is_separator = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        if is_separator {
            documents.push(line[3..].trim_start().to_string() + "\n");
        } else if line == "..." {
            continue;
        } else if let Some(current) = documents.last_mut() {
            current.push_str(line);
            current.push('\n');
        }
    }
    // A stream that starts with `---` has an empty first document; it is not counted.
    if text.trim_start().starts_with("---")
        && documents.first().is_some_and(|d| d.trim().is_empty())
    {
        documents.remove(0);
    }
    documents
}

/// Parser limits for one YAML document of `len` bytes. The general parser's defaults (250,000
/// nodes, 1,000,000 events) refuse a `kubectl get -o yaml` dump of a mid-size cluster; limits
/// that grow with the input accept any document that fits in memory, while alias expansion —
/// the one way a small text becomes a huge value (a "billion laughs" document) — stays bounded
/// by a limit that grows only with the input too, so memory stays proportional to it.
fn yaml_options(len: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    // Every node and event takes at least a byte or two of input.
    budget.max_nodes = budget.max_nodes.max(len);
    budget.max_events = budget.max_events.max(len.saturating_mul(2));
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(len);
    budget.max_documents = budget.max_documents.max(len / 4);
    let mut options = serde_saphyr::options! { budget: Some(budget) };
    options.alias_limits.max_total_replayed_events = MAX_ALIAS_REPLAYS.max(len / 8);
    options
}

/// Values copied out of aliases in one document, at least: enough for any real manifest's
/// anchors, a few tens of MB at most when abused.
const MAX_ALIAS_REPLAYS: usize = 100_000;

/// Parses the objects in one YAML/JSON text: multi-document YAML, list objects and bare
/// arrays of objects are flattened.
pub fn parse(source: &str, text: &str) -> Result<Vec<Document>, StatusError> {
    // JSON (one value) and the common block-style YAML have fast readers; anything they do
    // not take goes to the general YAML parser, which also words the errors.
    if looks_like_json(text)
        && let Ok(value) = serde_json::from_str::<Value>(text)
    {
        let mut out = Vec::new();
        push_objects(source, 0, value, &mut out)?;
        return Ok(out);
    }
    if let Some((json, indices)) = crate::block_yaml::to_json_documents(text)
        && let Some(documents) = parse_json_documents(source, &json, &indices)
    {
        return documents;
    }
    parse_general(source, text)
}

/// Whether a text is JSON rather than YAML (it opens an object or an array).
pub fn looks_like_json(text: &str) -> bool {
    let trimmed = text.trim_start();
    trimmed.starts_with('{') || trimmed.starts_with('[')
}

/// [`parse`] with the general YAML parser only: for a text the fast readers did not take.
pub fn parse_general(source: &str, text: &str) -> Result<Vec<Document>, StatusError> {
    let mut out = Vec::new();
    for (index, document) in split_documents(text).into_iter().enumerate() {
        let only_comments = document
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
        if only_comments {
            continue;
        }
        let value: Value =
            serde_saphyr::from_str_with_options(&document, yaml_options(document.len())).map_err(
                |e| StatusError::Input {
                    source_name: source.to_string(),
                    index,
                    reason: format!("invalid YAML: {}", first_line(&e.to_string())),
                },
            )?;
        push_objects(source, index, value, &mut out)?;
    }
    Ok(out)
}

/// The objects of a YAML stream already turned into JSON by
/// [`crate::block_yaml::to_json_documents`] (`None` if `json` is not that).
pub fn parse_json_documents(
    source: &str,
    json: &str,
    indices: &[usize],
) -> Option<Result<Vec<Document>, StatusError>> {
    let values: Vec<Value> = serde_json::from_str(json).ok()?;
    if values.len() != indices.len() {
        return None;
    }
    let mut out = Vec::new();
    for (value, &index) in values.into_iter().zip(indices) {
        if let Err(e) = push_objects(source, index, value, &mut out) {
            return Some(Err(e));
        }
    }
    Some(Ok(out))
}

/// Appends the objects of one document (null: none).
fn push_objects(
    source: &str,
    index: usize,
    value: Value,
    out: &mut Vec<Document>,
) -> Result<(), StatusError> {
    if value.is_null() {
        return Ok(());
    }
    let error = |reason: String| StatusError::Input {
        source_name: source.to_string(),
        index,
        reason,
    };
    flatten(value, &mut |object| {
        validate(&object).map_err(&error)?;
        out.push(Document {
            source: source.to_string(),
            index,
            object,
        });
        Ok(())
    })
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

fn validate(object: &Value) -> Result<(), String> {
    let map = object
        .as_object()
        .ok_or("not a mapping (expected a Kubernetes object)")?;
    for field in ["apiVersion", "kind"] {
        match map.get(field) {
            Some(Value::String(s)) if !s.is_empty() => {}
            Some(Value::String(_)) | None | Some(Value::Null) => {
                return Err(format!("missing field {field}"));
            }
            Some(_) => return Err(format!("field {field} is not a string")),
        }
    }
    match map.get("metadata") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err("field metadata is not a mapping".into()),
    }
}

/// Calls `emit` for the object, or for each item of a list object.
fn flatten(
    value: Value,
    emit: &mut dyn FnMut(Value) -> Result<(), StatusError>,
) -> Result<(), StatusError> {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let is_list = kind == "List"
        || (kind.ends_with("List") && value.get("items").is_some_and(Value::is_array));
    if let Value::Array(items) = value {
        // A bare array of objects (what `jq` pipelines produce).
        for item in items {
            flatten(item, emit)?;
        }
        return Ok(());
    }
    if !is_list {
        return emit(value);
    }
    let api_version = value.get("apiVersion").cloned().unwrap_or(Value::Null);
    let item_kind = kind.strip_suffix("List").unwrap_or_default().to_string();
    let items = match value {
        Value::Object(mut map) => match map.remove("items") {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    for mut item in items {
        // Typed lists (PodList from the raw API) leave apiVersion/kind off their items.
        if kind != "List"
            && let Some(map) = item.as_object_mut()
        {
            map.entry("apiVersion")
                .or_insert_with(|| api_version.clone());
            map.entry("kind")
                .or_insert_with(|| Value::String(item_kind.clone()));
        }
        flatten(item, emit)?;
    }
    Ok(())
}

/// Reads every `-f` argument: a file, a directory (recursively; `.yaml`, `.yml`, `.json`, in
/// name order) or `-` for standard input.
pub fn read_sources(sources: &[String]) -> Result<Vec<Document>, StatusError> {
    let mut out = Vec::new();
    for (source, text) in read_texts(sources)? {
        out.extend(parse(&source, &text)?);
    }
    Ok(out)
}

/// The text of every `-f` argument, as [`read_sources`] finds them: `(source name, text)`.
pub fn read_texts(sources: &[String]) -> Result<Vec<(String, String)>, StatusError> {
    let mut out = Vec::new();
    for source in sources {
        if source == "-" {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| StatusError::Io(format!("-: reading standard input: {e}")))?;
            out.push(("-".to_string(), text));
            continue;
        }
        let path = Path::new(source);
        let metadata =
            std::fs::metadata(path).map_err(|e| StatusError::Io(format!("{source}: {e}")))?;
        let files = if metadata.is_dir() {
            let mut files = Vec::new();
            collect_manifests(path, &mut files)?;
            files
        } else {
            vec![path.to_path_buf()]
        };
        for file in files {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| StatusError::Io(format!("{}: {e}", file.display())))?;
            out.push((file.display().to_string(), text));
        }
    }
    Ok(out)
}

/// A JSON text (one object, or a list object such as `kubectl get -o json` prints) decoded
/// straight into the compact status-only form. `None` when the text is not JSON, or has
/// anything [`parse`] would report or treat specially (a missing `kind`, a non-string field,
/// nested lists): the caller then uses [`parse`], which gives the exact error.
pub fn parse_compact(text: &str) -> Option<Vec<Observed<'_>>> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        // A bare array of objects (or the documents of a YAML stream, see block_yaml).
        let objects = Observed::many_from_json(text).ok()?;
        return all_regular(&objects).then_some(objects);
    }
    if !trimmed.starts_with('{') {
        return None;
    }
    let envelope: Envelope = serde_json::from_str(text).ok()?;
    let is_list =
        envelope.kind == "List" || (envelope.kind.ends_with("List") && envelope.items.is_some());
    let objects = if is_list {
        let mut items = envelope.items?;
        // Typed lists (PodList from the raw API) leave apiVersion/kind off their items.
        let item_kind = envelope.kind.strip_suffix("List").unwrap_or_default();
        for item in &mut items {
            if envelope.kind != "List"
                && let Observed::Compact(compact) = item
            {
                compact.fill_type(&envelope.api_version, item_kind);
            }
        }
        items
    } else {
        vec![Observed::from_json(text).ok()?]
    };
    all_regular(&objects).then_some(objects)
}

/// One object of a JSON text, decoded compactly, with its own text so that rules needing more
/// than the compact form holds (pods for a workload, health expressions) decode it in full.
#[derive(Debug)]
pub struct Spanned<'a> {
    pub compact: Compact<'a>,
    /// The object's JSON text.
    pub text: &'a str,
    /// The object is an item of a typed list (`PodList`): the list's apiVersion and item kind,
    /// which its items may leave off.
    pub list_type: Option<Arc<(String, String)>>,
}

impl Spanned<'_> {
    /// The object in full, decoded from its text, typed as [`parse`] types it.
    pub fn full(&self) -> Result<Value, serde_json::Error> {
        let mut object: Value = serde_json::from_str(self.text)?;
        if let (Some(list_type), Some(map)) = (&self.list_type, object.as_object_mut()) {
            map.entry("apiVersion")
                .or_insert_with(|| Value::String(list_type.0.clone()));
            map.entry("kind")
                .or_insert_with(|| Value::String(list_type.1.clone()));
        }
        Ok(object)
    }
}

/// An object to judge with [`crate::policy::Rules::evaluate_all`].
// Almost every object is spanned and lives inline in a Vec; boxing it would cost an allocation
// per object for the sake of the rare full one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Judged<'a> {
    /// Decoded compactly, with its text.
    Spanned(Spanned<'a>),
    /// Decoded in full (input the compact reader does not take).
    Full(Value),
}

impl Judged<'_> {
    pub fn api_version(&self) -> &str {
        match self {
            Judged::Spanned(s) => s.compact.api_version(),
            Judged::Full(o) => str_or(o, &["apiVersion"], ""),
        }
    }

    pub fn kind(&self) -> &str {
        match self {
            Judged::Spanned(s) => s.compact.kind(),
            Judged::Full(o) => str_or(o, &["kind"], ""),
        }
    }

    pub fn namespace(&self) -> &str {
        match self {
            Judged::Spanned(s) => s.compact.namespace(),
            Judged::Full(o) => str_or(o, &["metadata", "namespace"], ""),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Judged::Spanned(s) => s.compact.name(),
            Judged::Full(o) => str_or(o, &["metadata", "name"], ""),
        }
    }
}

/// [`parse_compact`] keeping each object's text (see [`Spanned`]), appended to `out`: one pass
/// over the text, whose items are found by decoding them in place, so no object is read twice
/// unless a rule asks for it in full. `false`, with `out` as it was, in the cases where
/// [`parse_compact`] gives `None`.
pub fn parse_spanned_into<'a>(text: &'a str, out: &mut Vec<Judged<'a>>) -> bool {
    let before = out.len();
    let bytes = text.as_bytes();
    let start = skip_whitespace(bytes, 0);
    let read = match bytes.get(start) {
        // A bare array of objects (or the documents of a YAML stream, see block_yaml).
        Some(b'[') => spanned_items(text, start, out),
        Some(b'{') => spanned_envelope(text, start, out),
        _ => None,
    };
    let regular = |o: &Judged| matches!(o, Judged::Spanned(s) if is_regular(&s.compact));
    match read {
        Some(end)
            if skip_whitespace(bytes, end) == bytes.len() && out[before..].iter().all(regular) =>
        {
            true
        }
        _ => {
            out.truncate(before);
            false
        }
    }
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while bytes
        .get(at)
        .is_some_and(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
    {
        at += 1;
    }
    at
}

/// Decodes one value of type `T` at `text[at..]`: the value and where it ends.
fn value_at<'a, T: serde::Deserialize<'a>>(text: &'a str, at: usize) -> Option<(T, usize)> {
    let mut stream = serde_json::Deserializer::from_str(&text[at..]).into_iter::<T>();
    let value = stream.next()?.ok()?;
    Some((value, at + stream.byte_offset()))
}

/// Appends the items of the array opening at `text[open]`; the position after it.
fn spanned_items<'a>(text: &'a str, open: usize, out: &mut Vec<Judged<'a>>) -> Option<usize> {
    let bytes = text.as_bytes();
    // Objects are rarely under 512 bytes of JSON: reserving for that many saves the growth
    // copies of a large list (untouched capacity costs no memory).
    out.reserve(text.len().saturating_sub(open) / 512);
    let mut at = skip_whitespace(bytes, open + 1);
    if bytes.get(at) == Some(&b']') {
        return Some(at + 1);
    }
    loop {
        let begin = skip_whitespace(bytes, at);
        let (compact, end): (Compact, usize) = value_at(text, begin)?;
        out.push(Judged::Spanned(Spanned {
            compact,
            text: &text[begin..end],
            list_type: None,
        }));
        at = skip_whitespace(bytes, end);
        match bytes.get(at)? {
            b',' => at += 1,
            b']' => return Some(at + 1),
            _ => return None,
        }
    }
}

/// A JSON object at `text[open]`: appends a list object's items, or the object itself; the
/// position after it.
fn spanned_envelope<'a>(text: &'a str, open: usize, out: &mut Vec<Judged<'a>>) -> Option<usize> {
    let bytes = text.as_bytes();
    let before = out.len();
    let mut api_version = None;
    let mut kind = None;
    let mut items = false;
    let mut at = skip_whitespace(bytes, open + 1);
    let end = if bytes.get(at) == Some(&b'}') {
        at + 1
    } else {
        loop {
            let (key, after): (std::borrow::Cow<str>, usize) =
                value_at(text, skip_whitespace(bytes, at))?;
            at = skip_whitespace(bytes, after);
            if bytes.get(at) != Some(&b':') {
                return None;
            }
            at = skip_whitespace(bytes, at + 1);
            at = match key.as_ref() {
                "apiVersion" | "kind" => {
                    let (value, after): (String, usize) = value_at(text, at)?;
                    // A repeated key: leave the exact reading to the full decoder.
                    let slot = if key == "kind" {
                        &mut kind
                    } else {
                        &mut api_version
                    };
                    if slot.replace(value).is_some() {
                        return None;
                    }
                    after
                }
                "items" if bytes.get(at) == Some(&b'[') && !items => {
                    items = true;
                    spanned_items(text, at, out)?
                }
                _ => value_at::<Skipped>(text, at)?.1,
            };
            at = skip_whitespace(bytes, at);
            match bytes.get(at)? {
                b',' => at += 1,
                b'}' => break at + 1,
                _ => return None,
            }
        }
    };
    let kind = kind.unwrap_or_default();
    let is_list = kind == "List" || (kind.ends_with("List") && items);
    if !is_list {
        out.truncate(before);
        let (compact, object_end): (Compact, usize) = value_at(text, open)?;
        if object_end != end {
            return None;
        }
        out.push(Judged::Spanned(Spanned {
            compact,
            text: &text[open..end],
            list_type: None,
        }));
        return Some(end);
    }
    if !items {
        return None;
    }
    if kind != "List" {
        // Typed lists (PodList from the raw API) leave apiVersion/kind off their items.
        let list_type = Arc::new((
            api_version.unwrap_or_default(),
            kind.strip_suffix("List").unwrap_or_default().to_string(),
        ));
        for item in &mut out[before..] {
            if let Judged::Spanned(item) = item {
                item.compact.fill_type(&list_type.0, &list_type.1);
                item.list_type = Some(list_type.clone());
            }
        }
    }
    Some(end)
}

/// A value read to its end and dropped, as strictly as [`crate::compact::Checked`] reads it.
struct Skipped;

impl<'de> serde::Deserialize<'de> for Skipped {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::DeserializeSeed;
        crate::compact::Checked.deserialize(deserializer)?;
        Ok(Skipped)
    }
}

/// Whether every object decoded compactly with nothing `parse` must report or treat specially;
/// otherwise the whole text goes the full way.
fn all_regular(objects: &[Observed<'_>]) -> bool {
    objects
        .iter()
        .all(|o| matches!(o, Observed::Compact(c) if is_regular(c)))
}

/// A compactly decoded object with nothing `parse` must report or treat specially: a regular
/// shape, a type, and not a nested list.
fn is_regular(c: &Compact<'_>) -> bool {
    !c.is_irregular()
        && !c.api_version().is_empty()
        && !c.kind().is_empty()
        && !c.kind().ends_with("List")
}

/// The top of a JSON text: its type and, if it is a list, its items (decoded compactly).
struct Envelope<'a> {
    api_version: String,
    kind: String,
    items: Option<Vec<Observed<'a>>>,
}

impl<'de> serde::Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EnvelopeVisitor;
        impl<'de> serde::de::Visitor<'de> for EnvelopeVisitor {
            type Value = Envelope<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut envelope = Envelope {
                    api_version: String::new(),
                    kind: String::new(),
                    items: None,
                };
                while let Some(key) = map.next_key::<std::borrow::Cow<str>>()? {
                    match key.as_ref() {
                        "apiVersion" => envelope.api_version = map.next_value()?,
                        "kind" => envelope.kind = map.next_value()?,
                        "items" => envelope.items = Some(map.next_value_seed(Many(0))?),
                        _ => map.next_value_seed(crate::compact::Checked)?,
                    }
                }
                Ok(envelope)
            }
        }
        deserializer.deserialize_map(EnvelopeVisitor)
    }
}

fn collect_manifests(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), StatusError> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| StatusError::Io(format!("{}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect_manifests(&entry, files)?;
        } else if entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            files.push(entry);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spanned(text: &str) -> Option<Vec<Judged<'_>>> {
        let mut out = vec![Judged::Full(serde_json::json!({"kind": "Earlier"}))];
        if !parse_spanned_into(text, &mut out) {
            assert_eq!(out.len(), 1, "a refused text leaves the output as it was");
            return None;
        }
        Some(out.split_off(1))
    }

    /// Each object keeps exactly its own text, decodes in full to what [`parse`] gives, and
    /// its compact form is the one [`parse_compact`] gives.
    #[test]
    fn spanned_objects_keep_their_text() {
        let texts = [
            r#" [ {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","x":[1,{"}":"]"}]}} ,
                 {"kind":"Pod","apiVersion":"v1","metadata":{"name":"b\"q"},"status":{"phase":"Running"}}] "#,
            r#"{"kind":"List","metadata":{"resourceVersion":""},"items":[{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"c"}}],"apiVersion":"v1"}"#,
            // A typed list whose kind comes after its items; the items have no type of their own.
            r#"{"items":[{"metadata":{"name":"p1","namespace":"n"}},{"metadata":{"name":"p2"},"status":{"phase":"Pending"}}],"apiVersion":"v1","kind":"PodList","metadata":{}}"#,
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"items":[1,2],"spec":{"n":1.5}}"#,
            "[]",
            r#"{"apiVersion":"v1","kind":"List","items":[]}"#,
        ];
        for text in texts {
            let objects = spanned(text).unwrap_or_else(|| panic!("refused: {text}"));
            let documents = parse("f", text).unwrap();
            let compact = parse_compact(text).unwrap();
            assert_eq!(objects.len(), documents.len(), "{text}");
            for ((object, document), observed) in objects.iter().zip(&documents).zip(&compact) {
                let Judged::Spanned(s) = object else {
                    panic!("decoded in full: {text}")
                };
                assert_eq!(s.full().unwrap(), document.object, "{text}");
                assert!(
                    matches!(observed, Observed::Compact(c) if *c == s.compact),
                    "{text}"
                );
                assert_eq!(
                    (
                        object.api_version(),
                        object.kind(),
                        object.namespace(),
                        object.name()
                    ),
                    (
                        document.api_version(),
                        document.kind(),
                        document.namespace(),
                        document.name()
                    )
                );
            }
        }
    }

    #[test]
    fn spanned_reading_refuses_what_parse_must_word() {
        for text in [
            r#"[{"apiVersion":"v1","kind":"ConfigMap"},]"#,
            r#"[{"apiVersion":"v1","kind":"ConfigMap"}] x"#,
            r#"[{"apiVersion":"v1","kind":"ConfigMap"}"#,
            r#"[{"kind":"ConfigMap"}]"#,
            r#"[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generation":"1"}}]"#,
            r#"[{"apiVersion":"v1","kind":"List","items":[]}]"#,
            r#"[3]"#,
            r#"{"apiVersion":"v1","kind":"List"}"#,
            r#"{"apiVersion":"v1","kind":"List","kind":"List","items":[]}"#,
            r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap"}] "x":1}"#,
            "apiVersion: v1\nkind: ConfigMap\n",
        ] {
            assert!(spanned(text).is_none(), "{text}");
        }
    }

    #[test]
    fn multi_document_and_lists() {
        let text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n# just a comment\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: b}\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: c, namespace: x}\n...\n";
        let docs = parse("f.yaml", text).unwrap();
        let names: Vec<(&str, &str, usize)> =
            docs.iter().map(|d| (d.kind(), d.name(), d.index)).collect();
        assert_eq!(
            names,
            vec![
                ("ConfigMap", "a", 0),
                ("Secret", "b", 2),
                ("Deployment", "c", 2)
            ]
        );
        assert_eq!(docs[2].namespace(), "x");
    }

    #[test]
    fn typed_lists_fill_item_kinds() {
        let text =
            r#"{"apiVersion": "v1", "kind": "PodList", "items": [{"metadata": {"name": "p"}}]}"#;
        let docs = parse("pods.json", text).unwrap();
        assert_eq!(
            (docs[0].api_version(), docs[0].kind(), docs[0].name()),
            ("v1", "Pod", "p")
        );
    }

    #[test]
    fn errors_name_source_and_document_index() {
        let cases = [
            (
                "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nmetadata: {name: a}\n",
                "f.yaml: document index 1: missing field kind",
            ),
            (
                "apiVersion: v1\nkind: [x\n",
                "f.yaml: document index 0: invalid YAML",
            ),
            (
                "- a\n- b\n",
                "f.yaml: document index 0: not a mapping (expected a Kubernetes object)",
            ),
            (
                "apiVersion: v1\nkind: List\nitems:\n- 7\n",
                "f.yaml: document index 0: not a mapping (expected a Kubernetes object)",
            ),
            (
                "---\n# c\n---\napiVersion: v1\nkind: A\nmetadata: {name: a}\n---\nkind: B\n",
                "f.yaml: document index 2: missing field apiVersion",
            ),
            (
                "# c\n---\napiVersion: v1\nkind: A\nmetadata:\n  name: a\n---\nkind: B\n",
                "f.yaml: document index 2: missing field apiVersion",
            ),
            (
                "kind: ConfigMap\n",
                "f.yaml: document index 0: missing field apiVersion",
            ),
            (
                "apiVersion: v1\nkind: 7\n",
                "f.yaml: document index 0: field kind is not a string",
            ),
        ];
        for (text, want) in cases {
            let err = parse("f.yaml", text).unwrap_err().to_string();
            assert!(err.starts_with(want), "{text:?}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn json_lists_decode_compactly_unless_parse_must_speak() {
        let list = r#"{"apiVersion": "v1", "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}], "kind": "List"}"#;
        let objects = parse_compact(list).unwrap();
        assert!(matches!(objects[0], Observed::Compact(_)));
        assert_eq!((objects[0].kind(), objects[0].name()), ("Pod", "a"));
        let typed =
            r#"{"apiVersion": "v1", "kind": "PodList", "items": [{"metadata": {"name": "b"}}]}"#;
        let objects = parse_compact(typed).unwrap();
        assert_eq!(
            (
                objects[0].api_version(),
                objects[0].kind(),
                objects[0].name()
            ),
            ("v1", "Pod", "b")
        );
        let single = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}"#;
        assert_eq!(parse_compact(single).unwrap()[0].name(), "c");
        for fallback in [
            "apiVersion: v1\nkind: Pod\n",
            r#"{"apiVersion": "v1", "metadata": {"name": "no-kind"}}"#,
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": null}"#,
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"generation": "1"}}"#,
            r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "PodList", "items": []}]}"#,
            r#"{"apiVersion": "v1", "kind": "List", "items": {}}"#,
            r#"{"apiVersion": "v1", "kind": "Pod""#,
            // What the full decoding refuses, in parts the compact form skips.
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": 1e999}}"#,
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "\ud800"}}"#,
            r#"{"apiVersion": "v1", "kind": "List", "x": [1e999], "items": []}"#,
            r#"{"apiVersion": "v1", "kind": "Pod", "spec": [1e999]}"#,
            r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": 1e999}}]}"#,
            r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "status": {"conditions": [{"type": "Ready", "x": "\ud800"}]}}]}"#,
        ] {
            assert!(parse_compact(fallback).is_none(), "{fallback}");
        }
    }

    #[test]
    fn bare_arrays_of_objects_are_read_like_lists() {
        let json = r#"[{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}}]}]"#;
        let yaml = "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n- apiVersion: v1\n  kind: List\n  items:\n  - apiVersion: v1\n    kind: Secret\n    metadata:\n      name: b\n";
        for text in [json, yaml] {
            let docs = parse("f", text).unwrap();
            let names: Vec<(&str, &str)> = docs.iter().map(|d| (d.kind(), d.name())).collect();
            assert_eq!(names, vec![("ConfigMap", "a"), ("Secret", "b")], "{text}");
        }
        let flat = r#"[{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}]"#;
        let objects = parse_compact(flat).unwrap();
        assert_eq!((objects[0].kind(), objects[0].name()), ("Pod", "p"));
        assert!(
            parse_compact(json).is_none(),
            "nested lists go the full way"
        );
    }

    /// A document far beyond the general parser's default budget (250,000 nodes).
    fn big_list(objects: usize) -> String {
        let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for i in 0..objects {
            text.push_str(&format!(
                "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c{i}\n    namespace: n\n  data:\n    a: x\n    b: y\n    c: z\n"
            ));
        }
        text
    }

    #[test]
    fn documents_of_any_size_are_read_by_both_paths() {
        let text = big_list(20_000);
        let fast = parse("big.yaml", &text).unwrap();
        assert_eq!(fast.len(), 20_000);
        assert_eq!(fast[19_999].name(), "c19999");
        // The general parser (what a construct outside the fast subset falls back to) takes it
        // too, with the same result: an anchor on the first item sends it there.
        let general_text = text.replacen("    a: x\n", "    a: &first x\n", 1);
        assert!(crate::block_yaml::to_json(&general_text).is_none());
        let general = parse("big.yaml", &general_text).unwrap();
        assert_eq!(general, fast);
    }

    #[test]
    fn alias_bombs_are_refused() {
        // Each level doubles ten times: 10^9 strings from a few hundred bytes.
        let mut bomb = String::from(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\na: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for pair in names.windows(2) {
            let [prev, next] = pair else { unreachable!() };
            let refs = vec![format!("*{prev}"); 10].join(",");
            bomb.push_str(&format!("{next}: &{next} [{refs}]\n"));
        }
        let err = parse("bomb.yaml", &bomb).unwrap_err().to_string();
        assert!(
            err.starts_with("bomb.yaml: document index 0: invalid YAML"),
            "{err}"
        );
        assert!(err.to_lowercase().contains("alias"), "{err}");
    }
}
