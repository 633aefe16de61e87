//! The [`FieldPath`] type: building paths, JSON pointers, and resolving a path (merge-key
//! selectors included) in an object.

use serde_json::Value;

use super::SchemaError;

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
/// digits); [`Display`](std::fmt::Display) always writes the quoted form, so text round-trips.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(pub Vec<Segment>);

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

    pub(super) fn key(&self, key: &str) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::test_support::{key, path};
    use serde_json::json;

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
}
