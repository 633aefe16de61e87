//! Field paths and the sets of fields the drift observer watches. Pure.
//!
//! A [`FieldPath`] addresses one value inside a Kubernetes object. List elements are addressed
//! by position (`args[0]`) or by merge key (`containers[name=app]`); the merge key survives a
//! webhook inserting a sidecar ahead of ours, a position does not. [`ObservedFields`] come from
//! a manifest ([`default_fields`]), a Krake observer-schema entry ([`krake_schema_fields`]) or
//! text paths ([`selector_fields`]).

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

/// One step of a [`FieldPath`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Segment {
    /// A member of an object.
    Key(String),
    /// An element of a list, by position.
    Index(usize),
    /// The element of a list of objects whose member `key` is the string `value` (a number
    /// member matches its decimal rendering, so `[containerPort=80]` works).
    Select { key: String, value: String },
}

/// A path into a Kubernetes object; the empty path is the object itself.
///
/// Text form: dotted keys, `[N]` for a position, `[key=value]` for a merge-key selector,
/// `["key"]` for a key holding `.`, `[`, `]`, `"` or `\` (label and annotation keys), e.g.
/// `metadata.labels["app.kubernetes.io/name"]` or `spec.template.spec.containers[name=app].image`.
/// Parsing also takes `[app.kubernetes.io/name]` (an unquoted bracket key that is not all
/// digits); [`Display`](fmt::Display) always writes the quoted form, so text round-trips.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(pub Vec<Segment>);

/// A bound on a list's length, from a Krake observer schema.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListBound {
    pub path: FieldPath,
    pub min: usize,
    /// `None`: unlimited.
    pub max: Option<usize>,
}

/// The fields compared between the dry-run prediction and the live object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservedFields {
    /// Each is compared whole: a path to an object or list compares the subtree.
    pub leaves: Vec<FieldPath>,
    pub list_bounds: Vec<ListBound>,
}

/// An invalid field path, JSON pointer or observer schema.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// `position` counts characters from 1; one past the end for "ended too early".
    #[error("field path {text:?}: {reason} at character {position}")]
    PathSyntax {
        text: String,
        position: usize,
        reason: String,
    },
    #[error("json pointer {pointer:?}: {reason}")]
    Pointer { pointer: String, reason: String },
    #[error("observer schema entry: must be an object, got {found}")]
    EntryNotObject { found: String },
    /// `apiVersion`, `kind`, `metadata.name` or `metadata.namespace` is missing or not a
    /// non-empty string.
    #[error("observer schema entry: {field}: {reason}")]
    Identification { field: &'static str, reason: String },
    #[error("observer schema {object}: {path}: an observed leaf must be null, got {value}")]
    LeafNotNull {
        object: String,
        path: String,
        value: String,
    },
    #[error(
        "observer schema {object}: list {path}: must end with a control dictionary \
         {{observer_schema_list_min_length, observer_schema_list_max_length}}"
    )]
    MissingListControl { object: String, path: String },
    #[error("observer schema {object}: list {path}: {field}: {reason}")]
    ListControl {
        object: String,
        path: String,
        field: String,
        reason: String,
    },
    #[error(
        "observer schema {object}: list {path}: observer_schema_list_max_length {max} is below \
         observer_schema_list_min_length {min}"
    )]
    ListMaxBelowMin {
        object: String,
        path: String,
        min: usize,
        max: usize,
    },
    #[error(
        "observer schema {object}: list {path}: observer_schema_list_max_length {max} is below \
         the {observed} observed elements"
    )]
    ListMaxBelowObserved {
        object: String,
        path: String,
        max: usize,
        observed: usize,
    },
    #[error("observer schema {object}: {path}: observer_schema_merge_key: {reason}")]
    MergeKey {
        object: String,
        path: String,
        reason: String,
    },
}

impl FieldPath {
    /// The object itself.
    pub fn root() -> Self {
        FieldPath(Vec::new())
    }

    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// This path extended by one segment.
    pub fn child(&self, segment: Segment) -> Self {
        let mut segments = self.0.clone();
        segments.push(segment);
        FieldPath(segments)
    }

    fn key(&self, key: &str) -> Self {
        self.child(Segment::Key(key.to_string()))
    }

    /// Whether `prefix` equals this path or is an ancestor of it.
    pub fn starts_with(&self, prefix: &FieldPath) -> bool {
        self.0.starts_with(&prefix.0)
    }

    /// This path with each merge-key selector replaced by the selected element's position in
    /// `object` (what a JSON pointer can say); `None` where `object` lacks a selected element.
    pub fn positional_in(&self, object: &Value) -> Option<FieldPath> {
        let mut current = Some(object);
        let mut segments = Vec::with_capacity(self.0.len());
        for segment in &self.0 {
            let (segment, next) = match segment {
                Segment::Key(key) => (segment.clone(), current.and_then(|v| v.get(key))),
                Segment::Index(index) => (segment.clone(), current.and_then(|v| v.get(*index))),
                Segment::Select { key, value } => {
                    let items = current.and_then(Value::as_array)?;
                    let (index, element) = select(items, key, value)?;
                    (Segment::Index(index), Some(element))
                }
            };
            segments.push(segment);
            current = next;
        }
        Some(FieldPath(segments))
    }

    /// Parses an RFC 6901 pointer (`/spec/containers/0/image`, `~1` for `/`, `~0` for `~`).
    /// A pointer cannot say whether `0` is a position or a map key; like the API server's JSON
    /// patches we take digits (without a leading zero) as a position.
    pub fn from_json_pointer(pointer: &str) -> Result<Self, SchemaError> {
        let error = |reason: String| SchemaError::Pointer {
            pointer: pointer.to_string(),
            reason,
        };
        if pointer.is_empty() {
            return Ok(FieldPath::root());
        }
        let Some(rest) = pointer.strip_prefix('/') else {
            return Err(error("must be empty or start with '/'".to_string()));
        };
        let mut segments = Vec::new();
        for token in rest.split('/') {
            let mut key = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    key.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => key.push('~'),
                    Some('1') => key.push('/'),
                    other => {
                        let after = other.map(String::from).unwrap_or_default();
                        return Err(error(format!(
                            "invalid escape \"~{after}\" in segment {token:?} (only ~0 and ~1)"
                        )));
                    }
                }
            }
            let is_index = key == "0"
                || (!key.is_empty()
                    && !key.starts_with('0')
                    && key.bytes().all(|b| b.is_ascii_digit()));
            match key.parse::<usize>() {
                Ok(index) if is_index => segments.push(Segment::Index(index)),
                _ => segments.push(Segment::Key(key)),
            }
        }
        Ok(FieldPath(segments))
    }

    /// The RFC 6901 pointer of this path; `None` when it holds a merge-key selector, which a
    /// pointer cannot express (resolve the element's position first).
    pub fn to_json_pointer(&self) -> Option<String> {
        let mut pointer = String::new();
        for segment in &self.0 {
            pointer.push('/');
            match segment {
                Segment::Key(key) => pointer.push_str(&key.replace('~', "~0").replace('/', "~1")),
                Segment::Index(index) => pointer.push_str(&index.to_string()),
                Segment::Select { .. } => return None,
            }
        }
        Some(pointer)
    }
}

impl From<Vec<Segment>> for FieldPath {
    fn from(segments: Vec<Segment>) -> Self {
        FieldPath(segments)
    }
}

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

/// A merge-key member as a selector value: strings as they are, numbers in decimal.
pub(crate) fn selector_value(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The position and element of a list selected by merge key.
pub(crate) fn select<'a>(items: &'a [Value], key: &str, value: &str) -> Option<(usize, &'a Value)> {
    items.iter().enumerate().find(|(_, item)| {
        item.get(key)
            .and_then(selector_value)
            .is_some_and(|v| v == value)
    })
}

/// The value at `path`, or `None` where the object lacks it.
pub fn resolve<'a>(value: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    path.0
        .iter()
        .try_fold(value, |current, segment| match segment {
            Segment::Key(key) => current.as_object()?.get(key),
            Segment::Index(index) => current.as_array()?.get(*index),
            Segment::Select { key, value } => {
                select(current.as_array()?, key, value).map(|(_, item)| item)
            }
        })
}

impl ObservedFields {
    /// Both sets, sorted and without repeats.
    pub fn merge(mut self, other: ObservedFields) -> ObservedFields {
        self.leaves.extend(other.leaves);
        self.list_bounds.extend(other.list_bounds);
        self.normalised()
    }

    fn normalised(mut self) -> ObservedFields {
        self.leaves.sort();
        self.leaves.dedup();
        self.list_bounds.sort();
        self.list_bounds.dedup();
        self
    }
}

/// Members tried in order as a list's merge key when observing a manifest: the keys the
/// Kubernetes API declares for its associative lists (containers, ports, volume mounts,
/// devices, host aliases, affinity terms, service ports, tolerations/items).
const MERGE_KEYS: [&str; 8] = [
    "name",
    "containerPort",
    "mountPath",
    "devicePath",
    "ip",
    "topologyKey",
    "port",
    "key",
];

/// The member that identifies each element of `items`: present as a string or number in every
/// element, with no two alike.
fn merge_key(items: &[Value]) -> Option<&'static str> {
    MERGE_KEYS.into_iter().find(|key| {
        let mut seen = std::collections::BTreeSet::new();
        items.iter().all(|item| {
            item.get(key)
                .and_then(selector_value)
                .is_some_and(|value| seen.insert(value))
        })
    })
}

/// "Observe every field the manifest declares" (Krake's default observer schema): every leaf
/// (scalar, null, empty object, empty list) except `apiVersion`, `kind`, `status` and, in
/// `metadata`, anything but `labels` and `annotations` entries (the API server owns the rest).
/// Elements of a list of objects with a merge key are addressed by selector, so a sidecar a
/// webhook inserts ahead of ours shifts nothing. Unlike Krake, no list length bounds: an
/// injected sidecar is not drift.
pub fn default_fields(manifest: &Value) -> ObservedFields {
    let mut leaves = Vec::new();
    if let Some(members) = manifest.as_object() {
        for (key, value) in members {
            match key.as_str() {
                "apiVersion" | "kind" | "status" => {}
                "metadata" => {
                    let metadata = FieldPath::root().key(key);
                    for observed in ["labels", "annotations"] {
                        if let Some(entries) = value.get(observed) {
                            collect_leaves(entries, metadata.key(observed), &mut leaves);
                        }
                    }
                }
                _ => collect_leaves(value, FieldPath::root().key(key), &mut leaves),
            }
        }
    }
    ObservedFields {
        leaves,
        list_bounds: Vec::new(),
    }
    .normalised()
}

fn collect_leaves(value: &Value, path: FieldPath, leaves: &mut Vec<FieldPath>) {
    match value {
        Value::Object(members) if !members.is_empty() => {
            for (key, member) in members {
                collect_leaves(member, path.key(key), leaves);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let key = items
                .iter()
                .all(Value::is_object)
                .then(|| merge_key(items))
                .flatten();
            for (index, item) in items.iter().enumerate() {
                let segment =
                    match key.and_then(|k| Some((k, item.get(k).and_then(selector_value)?))) {
                        Some((key, value)) => Segment::Select {
                            key: key.to_string(),
                            value,
                        },
                        None => Segment::Index(index),
                    };
                collect_leaves(item, path.child(segment), leaves);
            }
        }
        _ => leaves.push(path),
    }
}

/// The control dictionary that ends every list of a Krake observer schema.
const LIST_MIN: &str = "observer_schema_list_min_length";
const LIST_MAX: &str = "observer_schema_list_max_length";
/// Our extension: a list element of the schema may name its merge key, see
/// [`krake_schema_fields`].
const MERGE_KEY: &str = "observer_schema_merge_key";

/// The observed fields of one entry of a Krake observer schema.
///
/// The entry is a copy of the resource's shape whose leaves are `null` (observed), except the
/// identification `apiVersion`, `kind`, `metadata.name` (required) and `metadata.namespace`
/// (optional), which hold non-empty strings and are not observed. Every list ends with a control
/// dictionary `{observer_schema_list_min_length: N, observer_schema_list_max_length: M}`
/// (`M` = 0: unlimited) that becomes a [`ListBound`]; the elements before it are matched by
/// position.
///
/// Extension: an element `{observer_schema_merge_key: name, name: app, image: null}` is matched
/// by merge key instead (`containers[name=app].image`). Its key member holds the value to match
/// (a string or number); the key path (`containers[name=app].name`) is observed too, so a
/// removed element shows as drift even when the element observes nothing else.
pub fn krake_schema_fields(entry: &Value) -> Result<ObservedFields, SchemaError> {
    let Some(members) = entry.as_object() else {
        return Err(SchemaError::EntryNotObject {
            found: json_type(entry).to_string(),
        });
    };
    identification(members.get("apiVersion"), "apiVersion")?;
    let kind = identification(members.get("kind"), "kind")?;
    let Some(metadata) = members.get("metadata").and_then(Value::as_object) else {
        return Err(SchemaError::Identification {
            field: "metadata",
            reason: "required object".to_string(),
        });
    };
    let name = identification(metadata.get("name"), "metadata.name")?;
    let namespace = match metadata.get("namespace") {
        None => None,
        namespace => Some(identification(namespace, "metadata.namespace")?),
    };
    let object = match namespace {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    };

    let mut walk = SchemaWalk {
        object,
        fields: ObservedFields::default(),
    };
    for (key, value) in members {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                let path = FieldPath::root().key(key);
                for (key, value) in metadata {
                    if key != "name" && key != "namespace" {
                        walk.value(value, path.key(key))?;
                    }
                }
            }
            _ => walk.value(value, FieldPath::root().key(key))?,
        }
    }
    Ok(walk.fields.normalised())
}

fn identification<'a>(
    value: Option<&'a Value>,
    field: &'static str,
) -> Result<&'a str, SchemaError> {
    match value {
        Some(Value::String(text)) if !text.is_empty() => Ok(text),
        Some(Value::String(_)) => Err(SchemaError::Identification {
            field,
            reason: "must not be empty".to_string(),
        }),
        None => Err(SchemaError::Identification {
            field,
            reason: "required non-empty string".to_string(),
        }),
        Some(other) => Err(SchemaError::Identification {
            field,
            reason: format!("must be a string, got {}", json_type(other)),
        }),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

struct SchemaWalk {
    /// `Kind ns/name`, for errors.
    object: String,
    fields: ObservedFields,
}

impl SchemaWalk {
    fn value(&mut self, value: &Value, path: FieldPath) -> Result<(), SchemaError> {
        match value {
            Value::Null => self.fields.leaves.push(path),
            Value::Object(members) => {
                for (key, member) in members {
                    self.value(member, path.key(key))?;
                }
            }
            Value::Array(items) => self.list(items, path)?,
            other => {
                return Err(SchemaError::LeafNotNull {
                    object: self.object.clone(),
                    path: path.to_string(),
                    value: other.to_string(),
                });
            }
        }
        Ok(())
    }

    fn list(&mut self, items: &[Value], path: FieldPath) -> Result<(), SchemaError> {
        let control = match items.split_last() {
            Some((Value::Object(last), _)) if is_control(last) => last,
            _ => {
                return Err(SchemaError::MissingListControl {
                    object: self.object.clone(),
                    path: path.to_string(),
                });
            }
        };
        let elements = &items[..items.len() - 1];
        let (min, max) = self.control(control, &path)?;
        let max = match max {
            0 => None,
            max if max < min => {
                return Err(SchemaError::ListMaxBelowMin {
                    object: self.object.clone(),
                    path: path.to_string(),
                    min,
                    max,
                });
            }
            max if max < elements.len() => {
                return Err(SchemaError::ListMaxBelowObserved {
                    object: self.object.clone(),
                    path: path.to_string(),
                    max,
                    observed: elements.len(),
                });
            }
            max => Some(max),
        };

        let mut selected = std::collections::BTreeSet::new();
        for (index, element) in elements.iter().enumerate() {
            let element_path = path.child(Segment::Index(index));
            match element {
                Value::Object(members) if is_control(members) => {
                    return Err(SchemaError::ListControl {
                        object: self.object.clone(),
                        path: path.to_string(),
                        field: format!("[{index}]"),
                        reason: "the control dictionary must be the last element".to_string(),
                    });
                }
                Value::Object(members) if members.contains_key(MERGE_KEY) => {
                    let (key, value) = self.selector(members, &element_path)?;
                    let selected_path = path.child(Segment::Select {
                        key: key.clone(),
                        value,
                    });
                    if !selected.insert(selected_path.clone()) {
                        return Err(self.merge_key_error(
                            &element_path,
                            format!("another element already selects {selected_path}"),
                        ));
                    }
                    self.selected_element(members, &key, selected_path)?;
                }
                element => self.value(element, element_path)?,
            }
        }
        self.fields.list_bounds.push(ListBound { path, min, max });
        Ok(())
    }

    /// Reads `(min, max)` from a list's control dictionary.
    fn control(
        &self,
        control: &Map<String, Value>,
        path: &FieldPath,
    ) -> Result<(usize, usize), SchemaError> {
        let error = |field: &str, reason: String| SchemaError::ListControl {
            object: self.object.clone(),
            path: path.to_string(),
            field: field.to_string(),
            reason,
        };
        if let Some(unexpected) = control.keys().find(|k| *k != LIST_MIN && *k != LIST_MAX) {
            return Err(error(
                unexpected,
                "unexpected member in the control dictionary".to_string(),
            ));
        }
        let length = |field: &str| match control.get(field) {
            None => Err(error(field, "required non-negative integer".to_string())),
            Some(value) => value
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    error(
                        field,
                        format!("must be a non-negative integer, got {value}"),
                    )
                }),
        };
        Ok((length(LIST_MIN)?, length(LIST_MAX)?))
    }

    /// The `(key, value)` selector an element with `observer_schema_merge_key` stands for.
    fn selector(
        &self,
        members: &Map<String, Value>,
        element_path: &FieldPath,
    ) -> Result<(String, String), SchemaError> {
        let key = match members.get(MERGE_KEY) {
            Some(Value::String(key)) if !key.is_empty() && key != MERGE_KEY => key,
            other => {
                let found = other.map(|v| v.to_string()).unwrap_or_default();
                return Err(self.merge_key_error(
                    element_path,
                    format!("must name a member of the element, got {found}"),
                ));
            }
        };
        let Some(value) = members.get(key).and_then(selector_value) else {
            return Err(self.merge_key_error(
                element_path,
                format!("member {key:?} must hold the string or number to match"),
            ));
        };
        Ok((key.clone(), value))
    }

    /// The members of an element matched by merge key `key`, at `element_path`.
    fn selected_element(
        &mut self,
        members: &Map<String, Value>,
        key: &str,
        element_path: FieldPath,
    ) -> Result<(), SchemaError> {
        self.fields.leaves.push(element_path.key(key));
        for (member, value) in members {
            if member != key && member != MERGE_KEY {
                self.value(value, element_path.key(member))?;
            }
        }
        Ok(())
    }

    fn merge_key_error(&self, path: &FieldPath, reason: String) -> SchemaError {
        SchemaError::MergeKey {
            object: self.object.clone(),
            path: path.to_string(),
            reason,
        }
    }
}

fn is_control(members: &Map<String, Value>) -> bool {
    members.contains_key(LIST_MIN) || members.contains_key(LIST_MAX)
}

/// Observes each text path whole (a path to an object or list compares its subtree).
pub fn selector_fields(paths: &[String]) -> Result<ObservedFields, SchemaError> {
    let leaves = paths
        .iter()
        .map(|path| path.parse())
        .collect::<Result<Vec<FieldPath>, _>>()?;
    Ok(ObservedFields {
        leaves,
        list_bounds: Vec::new(),
    }
    .normalised())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(k: &str) -> Segment {
        Segment::Key(k.to_string())
    }

    fn sel(k: &str, v: &str) -> Segment {
        Segment::Select {
            key: k.to_string(),
            value: v.to_string(),
        }
    }

    fn path(text: &str) -> FieldPath {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} does not parse: {e}"))
    }

    fn texts(paths: &[FieldPath]) -> Vec<String> {
        paths.iter().map(ToString::to_string).collect()
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

    #[test]
    fn json_pointers() {
        let cases = [
            ("root", "", FieldPath::root()),
            ("keys", "/spec/replicas", path("spec.replicas")),
            (
                "digits are a position",
                "/spec/containers/0/image",
                path("spec.containers[0].image"),
            ),
            (
                "escaped slash",
                "/metadata/labels/app.kubernetes.io~1name",
                path(r#"metadata.labels["app.kubernetes.io/name"]"#),
            ),
            (
                "escaped tilde before a one",
                "/metadata/annotations/a~01",
                FieldPath(vec![key("metadata"), key("annotations"), key("a~1")]),
            ),
            (
                "leading zero is a key",
                "/data/01",
                FieldPath(vec![key("data"), key("01")]),
            ),
            ("dash is a key", "/a/-", FieldPath(vec![key("a"), key("-")])),
            ("empty key", "/", FieldPath(vec![key("")])),
        ];
        for (name, pointer, want) in cases {
            let parsed = FieldPath::from_json_pointer(pointer);
            assert_eq!(parsed.as_ref(), Ok(&want), "{name}: from");
            assert_eq!(
                want.to_json_pointer().as_deref(),
                Some(pointer),
                "{name}: to"
            );
        }
        assert_eq!(path("containers[name=app]").to_json_pointer(), None);

        let errors = [
            (
                "no leading slash",
                "spec/replicas",
                "must be empty or start with '/'",
            ),
            ("unknown escape", "/a~2", r#"invalid escape "~2""#),
            ("dangling tilde", "/a~", r#"invalid escape "~""#),
        ];
        for (name, pointer, want) in errors {
            match FieldPath::from_json_pointer(pointer) {
                Err(SchemaError::Pointer { pointer: p, reason }) => {
                    assert_eq!(p, pointer, "{name}");
                    assert!(reason.contains(want), "{name}: {reason}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn resolving() {
        let object = json!({
            "metadata": {"labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"containers": [
                {"name": "istio-proxy", "ports": [{"containerPort": 15090}]},
                {"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 80}]},
            ]},
        });
        let cases = [
            ("root", "", Some(object.clone())),
            (
                "label with dots",
                r#"metadata.labels["app.kubernetes.io/name"]"#,
                Some(json!("web")),
            ),
            (
                "by position",
                "spec.containers[1].image",
                Some(json!("nginx:1.27")),
            ),
            (
                "by merge key",
                "spec.containers[name=app].image",
                Some(json!("nginx:1.27")),
            ),
            (
                "by numeric merge key",
                "spec.containers[name=app].ports[containerPort=80]",
                Some(json!({"containerPort": 80})),
            ),
            ("subtree", "metadata", Some(object["metadata"].clone())),
            ("missing key", "spec.replicas", None),
            ("no such element", "spec.containers[name=db].image", None),
            ("position past the end", "spec.containers[2]", None),
            ("selector on an object", "metadata[name=x]", None),
            ("key on a list", "spec.containers.name", None),
            ("key below a scalar", "spec.containers[1].image.tag", None),
        ];
        for (name, text, want) in cases {
            let path = if text.is_empty() {
                FieldPath::root()
            } else {
                path(text)
            };
            assert_eq!(resolve(&object, &path), want.as_ref(), "{name}");
        }
        assert_eq!(
            path("spec.containers[name=app].ports[containerPort=80]").positional_in(&object),
            Some(path("spec.containers[1].ports[0]")),
        );
        assert_eq!(
            path("spec.containers[name=db]").positional_in(&object),
            None
        );
    }

    fn deployment_manifest() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "labels": {"app.kubernetes.io/name": "web"},
                "annotations": {"strata.dev/layer": "apps"},
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [{
                            "name": "app",
                            "image": "nginx:1.27",
                            "args": ["--port", "80"],
                            "env": [
                                {"name": "MODE", "value": "prod"},
                                {"name": "EMPTY", "value": ""},
                            ],
                            "ports": [{"containerPort": 80, "protocol": "TCP"}],
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                        }],
                        "volumes": [{"name": "cache", "emptyDir": {}}],
                        "tolerations": [],
                        "nodeSelector": null,
                    },
                },
            },
            "status": {"replicas": 2},
        })
    }

    #[test]
    fn default_fields_table() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "deployment",
                deployment_manifest(),
                vec![
                    r#"metadata.annotations["strata.dev/layer"]"#,
                    r#"metadata.labels["app.kubernetes.io/name"]"#,
                    "spec.replicas",
                    "spec.selector.matchLabels.app",
                    "spec.template.metadata.labels.app",
                    "spec.template.spec.containers[name=app].args[0]",
                    "spec.template.spec.containers[name=app].args[1]",
                    "spec.template.spec.containers[name=app].env[name=EMPTY].name",
                    "spec.template.spec.containers[name=app].env[name=EMPTY].value",
                    "spec.template.spec.containers[name=app].env[name=MODE].name",
                    "spec.template.spec.containers[name=app].env[name=MODE].value",
                    "spec.template.spec.containers[name=app].image",
                    "spec.template.spec.containers[name=app].name",
                    "spec.template.spec.containers[name=app].ports[containerPort=80].containerPort",
                    "spec.template.spec.containers[name=app].ports[containerPort=80].protocol",
                    "spec.template.spec.containers[name=app].volumeMounts[name=cache].mountPath",
                    "spec.template.spec.containers[name=app].volumeMounts[name=cache].name",
                    "spec.template.spec.nodeSelector",
                    "spec.template.spec.tolerations",
                    "spec.template.spec.volumes[name=cache].emptyDir",
                    "spec.template.spec.volumes[name=cache].name",
                ],
            ),
            (
                "repeated names fall back to the next merge key",
                json!({"spec": {"ports": [
                    {"name": "http", "port": 80},
                    {"name": "http", "port": 8080},
                ]}}),
                vec![
                    "spec.ports[port=80].name",
                    "spec.ports[port=80].port",
                    "spec.ports[port=8080].name",
                    "spec.ports[port=8080].port",
                ],
            ),
            (
                "no unique merge key: by position",
                json!({"spec": {"rules": [{"host": "a"}, {"host": "b"}]}}),
                vec!["spec.rules[0].host", "spec.rules[1].host"],
            ),
            (
                "a key missing from one element: by position",
                json!({"spec": {"items": [{"name": "a"}, {"other": 1}]}}),
                vec!["spec.items[0].name", "spec.items[1].other"],
            ),
            (
                "mixed elements: by position",
                json!({"spec": {"items": [{"name": "a"}, "b"]}}),
                vec!["spec.items[0].name", "spec.items[1]"],
            ),
            (
                "tolerations keyed by key",
                json!({"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}),
                vec![
                    "spec.tolerations[key=gpu].key",
                    "spec.tolerations[key=gpu].operator",
                ],
            ),
            (
                "metadata other than labels and annotations is the server's",
                json!({"metadata": {"name": "x", "finalizers": ["a"], "labels": {}}}),
                vec!["metadata.labels"],
            ),
            ("not an object", json!(["a"]), vec![]),
            (
                "only identification",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
                vec![],
            ),
        ];
        for (name, manifest, want) in cases {
            let fields = default_fields(&manifest);
            assert_eq!(texts(&fields.leaves), want, "{name}");
            assert_eq!(fields.list_bounds, vec![], "{name}: no list bounds");
        }
    }

    fn service_entry(spec: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": spec,
        })
    }

    fn bound(text: &str, min: usize, max: Option<usize>) -> ListBound {
        ListBound {
            path: path(text),
            min,
            max,
        }
    }

    #[test]
    fn krake_schema_accepted() {
        let cases: Vec<(&str, Value, Vec<&str>, Vec<ListBound>)> = vec![
            (
                "service with a bounded list",
                service_entry(json!({
                    "type": null,
                    "ports": [
                        {"port": null, "protocol": null},
                        {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 2},
                    ],
                })),
                vec!["spec.ports[0].port", "spec.ports[0].protocol", "spec.type"],
                vec![bound("spec.ports", 1, Some(2))],
            ),
            (
                "max 0 is unlimited",
                service_entry(json!({"ports": [
                    {"observer_schema_list_min_length": 0, "observer_schema_list_max_length": 0},
                ]})),
                vec![],
                vec![bound("spec.ports", 0, None)],
            ),
            (
                "null list elements and nested lists",
                service_entry(json!({"externalIPs": [
                    null,
                    [null, {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 1}],
                    {"observer_schema_list_min_length": 2, "observer_schema_list_max_length": 3},
                ]})),
                vec!["spec.externalIPs[0]", "spec.externalIPs[1][0]"],
                vec![
                    bound("spec.externalIPs", 2, Some(3)),
                    bound("spec.externalIPs[1]", 1, Some(1)),
                ],
            ),
            (
                "metadata beyond identification is observed, no namespace needed",
                json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "cfg", "labels": {"app.kubernetes.io/name": null}},
                    "data": {"mode": null},
                }),
                vec![r#"metadata.labels["app.kubernetes.io/name"]"#, "data.mode"],
                vec![],
            ),
            (
                "merge-key extension",
                json!({
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "web"},
                    "spec": {"template": {"spec": {"containers": [
                        {"observer_schema_merge_key": "name", "name": "app", "image": null,
                         "ports": [
                            {"observer_schema_merge_key": "containerPort", "containerPort": 80,
                             "protocol": null},
                            {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 0},
                         ]},
                        {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 0},
                    ]}}},
                }),
                vec![
                    "spec.template.spec.containers[name=app].image",
                    "spec.template.spec.containers[name=app].name",
                    "spec.template.spec.containers[name=app].ports[containerPort=80].containerPort",
                    "spec.template.spec.containers[name=app].ports[containerPort=80].protocol",
                ],
                vec![
                    bound("spec.template.spec.containers", 1, None),
                    bound("spec.template.spec.containers[name=app].ports", 1, None),
                ],
            ),
        ];
        for (name, entry, want_leaves, want_bounds) in cases {
            let fields = krake_schema_fields(&entry).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut want_leaves: Vec<FieldPath> = want_leaves.into_iter().map(path).collect();
            want_leaves.sort();
            assert_eq!(texts(&fields.leaves), texts(&want_leaves), "{name}: leaves");
            assert_eq!(fields.list_bounds, want_bounds, "{name}: bounds");
        }
    }

    #[test]
    fn krake_schema_refused() {
        let object = "Service shop/web".to_string();
        let control =
            json!({"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 1});
        let cases: Vec<(&str, Value, SchemaError)> = vec![
            (
                "not an object",
                json!([]),
                SchemaError::EntryNotObject {
                    found: "a list".into(),
                },
            ),
            (
                "missing apiVersion",
                json!({"kind": "Service", "metadata": {"name": "web"}}),
                SchemaError::Identification {
                    field: "apiVersion",
                    reason: "required non-empty string".into(),
                },
            ),
            (
                "empty kind",
                json!({"apiVersion": "v1", "kind": "", "metadata": {"name": "web"}}),
                SchemaError::Identification {
                    field: "kind",
                    reason: "must not be empty".into(),
                },
            ),
            (
                "missing metadata",
                json!({"apiVersion": "v1", "kind": "Service"}),
                SchemaError::Identification {
                    field: "metadata",
                    reason: "required object".into(),
                },
            ),
            (
                "null name",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": null}}),
                SchemaError::Identification {
                    field: "metadata.name",
                    reason: "must be a string, got null".into(),
                },
            ),
            (
                "numeric namespace",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": 3}}),
                SchemaError::Identification {
                    field: "metadata.namespace",
                    reason: "must be a string, got a number".into(),
                },
            ),
            (
                "non-null leaf",
                service_entry(json!({"replicas": 3})),
                SchemaError::LeafNotNull {
                    object: object.clone(),
                    path: "spec.replicas".into(),
                    value: "3".into(),
                },
            ),
            (
                "non-null list element",
                service_entry(json!({"ports": ["x", control.clone()]})),
                SchemaError::LeafNotNull {
                    object: object.clone(),
                    path: "spec.ports[0]".into(),
                    value: "\"x\"".into(),
                },
            ),
            (
                "missing control dictionary",
                service_entry(json!({"ports": [{"port": null}]})),
                SchemaError::MissingListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                },
            ),
            (
                "empty list has no control dictionary",
                service_entry(json!({"ports": []})),
                SchemaError::MissingListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                },
            ),
            (
                "control dictionary not last",
                service_entry(json!({"ports": [
                    control.clone(),
                    {"port": null},
                    {"observer_schema_list_min_length": 0, "observer_schema_list_max_length": 0},
                ]})),
                SchemaError::ListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    field: "[0]".into(),
                    reason: "the control dictionary must be the last element".into(),
                },
            ),
            (
                "control dictionary without max",
                service_entry(json!({"ports": [{"observer_schema_list_min_length": 1}]})),
                SchemaError::ListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    field: "observer_schema_list_max_length".into(),
                    reason: "required non-negative integer".into(),
                },
            ),
            (
                "negative min",
                service_entry(json!({"ports": [
                    {"observer_schema_list_min_length": -1, "observer_schema_list_max_length": 0},
                ]})),
                SchemaError::ListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    field: "observer_schema_list_min_length".into(),
                    reason: "must be a non-negative integer, got -1".into(),
                },
            ),
            (
                "unexpected control member",
                service_entry(json!({"ports": [
                    {"observer_schema_list_min_length": 0, "observer_schema_list_max_length": 0, "port": null},
                ]})),
                SchemaError::ListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    field: "port".into(),
                    reason: "unexpected member in the control dictionary".into(),
                },
            ),
            (
                "max below min",
                service_entry(json!({"ports": [
                    {"observer_schema_list_min_length": 3, "observer_schema_list_max_length": 2},
                ]})),
                SchemaError::ListMaxBelowMin {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    min: 3,
                    max: 2,
                },
            ),
            (
                "max below the observed elements",
                service_entry(json!({"ports": [
                    {"port": null}, {"port": null},
                    {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 1},
                ]})),
                SchemaError::ListMaxBelowObserved {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    max: 1,
                    observed: 2,
                },
            ),
            (
                "merge key naming a missing member",
                service_entry(json!({"ports": [
                    {"observer_schema_merge_key": "name", "port": null}, control.clone(),
                ]})),
                SchemaError::MergeKey {
                    object: object.clone(),
                    path: "spec.ports[0]".into(),
                    reason: "member \"name\" must hold the string or number to match".into(),
                },
            ),
            (
                "merge key not a string",
                service_entry(json!({"ports": [
                    {"observer_schema_merge_key": null, "port": null}, control.clone(),
                ]})),
                SchemaError::MergeKey {
                    object: object.clone(),
                    path: "spec.ports[0]".into(),
                    reason: "must name a member of the element, got null".into(),
                },
            ),
            (
                "two elements selecting the same",
                service_entry(json!({"ports": [
                    {"observer_schema_merge_key": "name", "name": "http"},
                    {"observer_schema_merge_key": "name", "name": "http"},
                    {"observer_schema_list_min_length": 0, "observer_schema_list_max_length": 0},
                ]})),
                SchemaError::MergeKey {
                    object: object.clone(),
                    path: "spec.ports[1]".into(),
                    reason: "another element already selects spec.ports[name=http]".into(),
                },
            ),
        ];
        for (name, entry, want) in cases {
            assert_eq!(krake_schema_fields(&entry), Err(want), "{name}");
        }
        let message = krake_schema_fields(&service_entry(json!({"ports": [{"port": null}]})))
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("observer schema Service shop/web: list spec.ports: must end"),
            "{message}"
        );
    }

    #[test]
    fn selector_fields_table() {
        // name, paths → leaves or the error
        type Case = (
            &'static str,
            Vec<&'static str>,
            Result<Vec<&'static str>, &'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "sorted, repeats dropped",
                vec![
                    "spec.template.spec.containers[name=app]",
                    "spec.replicas",
                    "spec.replicas",
                ],
                Ok(vec![
                    "spec.replicas",
                    "spec.template.spec.containers[name=app]",
                ]),
            ),
            ("none", vec![], Ok(vec![])),
            (
                "a bad path",
                vec!["spec.replicas", "spec..x"],
                Err("field path \"spec..x\": empty key at character 6"),
            ),
        ];
        for (name, paths, want) in cases {
            let paths: Vec<String> = paths.into_iter().map(String::from).collect();
            let got = selector_fields(&paths)
                .map(|f| {
                    assert_eq!(f.list_bounds, vec![], "{name}");
                    texts(&f.leaves)
                })
                .map_err(|e| e.to_string());
            let want = want
                .map(|w| w.into_iter().map(String::from).collect::<Vec<_>>())
                .map_err(String::from);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn merging() {
        let a = ObservedFields {
            leaves: vec![path("spec.replicas"), path("spec.b")],
            list_bounds: vec![bound("spec.ports", 1, None)],
        };
        let b = ObservedFields {
            leaves: vec![path("spec.a"), path("spec.replicas")],
            list_bounds: vec![
                bound("spec.ports", 1, None),
                bound("spec.ports", 0, Some(2)),
            ],
        };
        let merged = a.merge(b);
        assert_eq!(texts(&merged.leaves), ["spec.a", "spec.b", "spec.replicas"]);
        assert_eq!(
            merged.list_bounds,
            [
                bound("spec.ports", 0, Some(2)),
                bound("spec.ports", 1, None)
            ]
        );
    }
}
