//! Layer dependencies: `dependsOn` entries, version constraints, Kubernetes versions, and
//! dependency cycles. Pure; used by the controller and by the admission webhook.

use std::collections::{BTreeMap, BTreeSet};

/// A version as numbers; `v1.30.2-eks-abc` → [1, 30, 2] (vendor suffixes ignored).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub Vec<u64>);

impl Version {
    /// Tolerant parsing: optional `v`, one to three numeric parts, anything after a `-` or `+`
    /// ignored. `None` for free-form versions (which then only match exactly).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let core = text.split(['-', '+']).next()?;
        if core.is_empty() {
            return None;
        }
        let parts: Option<Vec<u64>> = core.split('.').map(|p| p.parse().ok()).collect();
        parts.filter(|p| !p.is_empty() && p.len() <= 3).map(Version)
    }

    /// Compares with missing parts as 0 (`1.29` == `1.29.0`).
    fn cmp_padded(&self, other: &Version) -> std::cmp::Ordering {
        let get = |v: &Version, i: usize| v.0.get(i).copied().unwrap_or(0);
        (0..3)
            .map(|i| get(self, i).cmp(&get(other, i)))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    }
}

/// One comparison in a constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Comparator {
    /// `1.2.0` without an operator: the exact version string, as Kraan compares it.
    Exact(String),
    Eq(Version),
    Gt(Version),
    Ge(Version),
    Lt(Version),
    Le(Version),
    /// `^1.2`: same major (or same minor below 1.0), at least 1.2.
    Caret(Version),
    /// `~1.2`: same major.minor, at least 1.2.
    Tilde(Version),
}

impl Comparator {
    fn matches(&self, version: &str) -> bool {
        if let Comparator::Exact(want) = self {
            return version == want;
        }
        let Some(v) = Version::parse(version) else {
            return false;
        };
        use std::cmp::Ordering::*;
        match self {
            Comparator::Exact(_) => false,
            Comparator::Eq(c) => v.cmp_padded(c) == Equal,
            Comparator::Gt(c) => v.cmp_padded(c) == Greater,
            Comparator::Ge(c) => v.cmp_padded(c) != Less,
            Comparator::Lt(c) => v.cmp_padded(c) == Less,
            Comparator::Le(c) => v.cmp_padded(c) != Greater,
            Comparator::Caret(c) => {
                let major = c.0.first().copied().unwrap_or(0);
                let same = if major == 0 {
                    v.0.first() == Some(&0) && v.0.get(1) == c.0.get(1)
                } else {
                    v.0.first() == Some(&major)
                };
                same && v.cmp_padded(c) != Less
            }
            Comparator::Tilde(c) => {
                v.0.first() == c.0.first()
                    && v.0.get(1).copied().unwrap_or(0) == c.0.get(1).copied().unwrap_or(0)
                    && v.cmp_padded(c) != Less
            }
        }
    }
}

/// A parsed `dependsOn` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    pub layer: String,
    /// All must match; empty = any version.
    pub constraints: Vec<Comparator>,
}

impl Dependency {
    pub fn accepts(&self, version: &str) -> bool {
        self.constraints.iter().all(|c| c.matches(version))
    }
}

/// Whether `name` is a valid object name (DNS-1123 subdomain).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Parses `name`, `name@1.2.0`, `name@>=1.2`, `name@>=1.2,<2`, `name@^1.2`, `name@~1.2`.
pub fn parse_dependency(entry: &str) -> Result<Dependency, String> {
    let entry = entry.trim();
    let (layer, constraint) = match entry.split_once('@') {
        Some((layer, c)) => (layer, Some(c)),
        None => (entry, None),
    };
    if !valid_name(layer) {
        return Err(format!(
            "{layer:?} is not a valid layer name (lowercase letters, digits, '-' and '.')"
        ));
    }
    let mut constraints = Vec::new();
    if let Some(constraint) = constraint {
        if constraint.trim().is_empty() {
            return Err("empty version after '@'".into());
        }
        for part in constraint.split(',').map(str::trim) {
            let (op, rest) = ["\u{3e}=", "<=", ">", "<", "=", "^", "~"]
                .iter()
                .find_map(|op| part.strip_prefix(op).map(|rest| (*op, rest.trim())))
                .unwrap_or(("", part));
            if op.is_empty() {
                if part.is_empty() || part.contains(char::is_whitespace) {
                    return Err(format!("invalid version {part:?}"));
                }
                constraints.push(Comparator::Exact(part.to_string()));
                continue;
            }
            let version = Version::parse(rest)
                .ok_or_else(|| format!("{part:?}: {rest:?} is not a version like 1.2 or 1.2.3"))?;
            constraints.push(match op {
                ">=" => Comparator::Ge(version),
                "<=" => Comparator::Le(version),
                ">" => Comparator::Gt(version),
                "<" => Comparator::Lt(version),
                "=" => Comparator::Eq(version),
                "^" => Comparator::Caret(version),
                _ => Comparator::Tilde(version),
            });
        }
    }
    Ok(Dependency {
        layer: layer.to_string(),
        constraints,
    })
}

/// Whether the cluster version satisfies a `k8sVersion` prerequisite (tolerant on both sides).
pub fn k8s_version_satisfied(required: &str, cluster: &str) -> Result<bool, String> {
    let want = Version::parse(required)
        .ok_or_else(|| format!("k8sVersion {required:?} is not a version like v1.29 or 1.30.2"))?;
    let have = Version::parse(cluster)
        .ok_or_else(|| format!("cluster version {cluster:?} is not a version"))?;
    Ok(have.cmp_padded(&want) != std::cmp::Ordering::Less)
}

/// Every dependency cycle through `start` in the graph `layer → its dependencies`, as the
/// path `a -> b -> a` (the first found, in name order, for a deterministic message).
pub fn cycle_through(
    start: &str,
    graph: &BTreeMap<String, BTreeSet<String>>,
) -> Option<Vec<String>> {
    fn walk(
        node: &str,
        start: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(node).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(next, start, graph, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    walk(start, start, graph, &mut path, &mut seen).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(
            Version::parse("v1.30.2-eks-1a2b"),
            Some(Version(vec![1, 30, 2]))
        );
        assert_eq!(Version::parse("1.29"), Some(Version(vec![1, 29])));
        assert_eq!(Version::parse("v1.16"), Some(Version(vec![1, 16])));
        assert_eq!(Version::parse("0.1.01"), Some(Version(vec![0, 1, 1])));
        assert_eq!(Version::parse("latest"), None);
        assert_eq!(Version::parse("1.2.3.4"), None);
    }

    #[test]
    fn k8s_versions() {
        let cases = [
            ("v1.16", "v1.34.4", true),
            ("1.29", "v1.29.0", true),
            ("v1.30.2", "v1.30.2-eks-abc", true),
            ("v1.35", "v1.34.4", false),
            ("1.34.5", "v1.34.4", false),
        ];
        for (want, have, ok) in cases {
            assert_eq!(
                k8s_version_satisfied(want, have),
                Ok(ok),
                "{want} vs {have}"
            );
        }
        assert!(k8s_version_satisfied("one", "v1.34").is_err());
    }

    #[test]
    fn dependencies() {
        let accepts =
            |entry: &str, version: &str| parse_dependency(entry).unwrap().accepts(version);
        assert!(accepts("base", "anything"));
        assert!(accepts("base@0.1.01", "0.1.01"));
        assert!(
            !accepts("base@0.1.01", "0.1.1"),
            "Kraan's exact string match"
        );
        assert!(accepts("base@>=1.2", "1.10.0"));
        assert!(!accepts("base@>=1.2", "1.1.9"));
        assert!(accepts("base@>=1.2,<2", "1.9"));
        assert!(!accepts("base@>=1.2,<2", "2.0.0"));
        assert!(accepts("base@^1.2", "1.7.0") && !accepts("base@^1.2", "2.0.0"));
        assert!(accepts("base@~1.2", "1.2.9") && !accepts("base@~1.2", "1.3.0"));
        assert!(
            !accepts("base@>=1.2", "free-form"),
            "non-numeric versions never satisfy a range"
        );
        for bad in ["", "Base", "base@", "base@>=x", "-base", "ba se@1"] {
            assert!(parse_dependency(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cycles() {
        let graph: BTreeMap<String, BTreeSet<String>> = [
            ("a", vec!["b"]),
            ("b", vec!["c"]),
            ("c", vec!["a"]),
            ("d", vec!["a"]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
        .collect();
        assert_eq!(
            cycle_through("a", &graph),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        assert_eq!(
            cycle_through("d", &graph),
            None,
            "d depends on a cycle but is not in one"
        );
    }
}
