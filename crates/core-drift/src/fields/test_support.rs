//! Helpers shared by the tests of several `fields` submodules.

use super::{FieldPath, ListBound, Segment};

pub(super) fn key(k: &str) -> Segment {
    Segment::Key(k.to_string())
}

pub(super) fn path(text: &str) -> FieldPath {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} does not parse: {e}"))
}

pub(super) fn texts(paths: &[FieldPath]) -> Vec<String> {
    paths.iter().map(ToString::to_string).collect()
}

pub(super) fn bound(text: &str, min: usize, max: Option<usize>) -> ListBound {
    ListBound {
        path: path(text),
        min,
        max,
    }
}
