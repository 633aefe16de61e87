//! Capabilities profiles: the Kubernetes version and API versions a cluster serves, so charts
//! that branch on `.Capabilities` render as they would there (`--kube-version`,
//! `--api-versions`), plus the cluster-scoped kinds of its CRDs for namespace placement.
//! `strata render capture-profile` writes one from a live cluster.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{RenderError, Result, yaml_message};
use crate::split::Scopes;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    /// `v1.34.4`: becomes `--kube-version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_version: Option<String>,
    /// `group/version` and `group/version/Kind` entries: become `--api-versions`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_versions: Vec<String>,
    /// Cluster-scoped kinds beyond the built-in ones, as `Kind.group` (`Kind` for the core group).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_scoped: Vec<String>,
}

impl Profile {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| RenderError::Profile {
            file: path.display().to_string(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    pub fn parse(file: &str, text: &str) -> Result<Self> {
        let profile: Profile = serde_saphyr::from_str(text).map_err(|e| RenderError::Profile {
            file: file.to_string(),
            message: yaml_message(&e),
        })?;
        let bad = |message: String| RenderError::Profile {
            file: file.to_string(),
            message,
        };
        if let Some(version) = &profile.kube_version
            && !looks_like_version(version)
        {
            return Err(bad(format!(
                "kubeVersion: {version:?} is not a version like v1.34.4"
            )));
        }
        for (i, entry) in profile.api_versions.iter().enumerate() {
            if entry.is_empty() || entry.contains(',') || entry.contains(char::is_whitespace) {
                return Err(bad(format!(
                    "apiVersions[{i}]: {entry:?} is not group/version"
                )));
            }
        }
        for (i, entry) in profile.cluster_scoped.iter().enumerate() {
            if entry.is_empty() || entry.starts_with('.') {
                return Err(bad(format!(
                    "clusterScoped[{i}]: {entry:?} is not Kind.group"
                )));
            }
        }
        Ok(profile)
    }

    pub fn to_yaml(&self) -> Result<String> {
        serde_saphyr::to_string(self).map_err(|e| RenderError::Profile {
            file: "profile".into(),
            message: e.to_string(),
        })
    }

    /// Adds the profile's cluster-scoped kinds to `scopes`.
    pub fn add_scopes(&self, scopes: &mut Scopes) {
        for entry in &self.cluster_scoped {
            match entry.split_once('.') {
                Some((kind, group)) => scopes.add(group, kind),
                None => scopes.add("", entry),
            }
        }
    }

    /// Sorted, de-duplicated lists, so a captured profile diffs cleanly between captures.
    pub fn normalized(mut self) -> Self {
        self.api_versions.sort();
        self.api_versions.dedup();
        self.cluster_scoped.sort();
        self.cluster_scoped.dedup();
        self
    }
}

fn looks_like_version(version: &str) -> bool {
    let bare = version.strip_prefix('v').unwrap_or(version);
    let mut parts = bare.splitn(3, '.');
    let major = parts.next().unwrap_or_default();
    let minor = parts.next().unwrap_or_default();
    !major.is_empty()
        && major.chars().all(|c| c.is_ascii_digit())
        && !minor.is_empty()
        && minor
            .chars()
            .take_while(|c| *c != '-' && *c != '+')
            .all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn parses_and_round_trips() {
        let text = "kubeVersion: v1.34.4\napiVersions:\n  - monitoring.coreos.com/v1\n  - monitoring.coreos.com/v1/ServiceMonitor\nclusterScoped: [ClusterIssuer.cert-manager.io, Widget]\n";
        let profile = Profile::parse("p.yaml", text).unwrap();
        assert_eq!(profile.kube_version.as_deref(), Some("v1.34.4"));
        let again = Profile::parse("p.yaml", &profile.to_yaml().unwrap()).unwrap();
        assert_eq!(again, profile);
        let mut scopes = Scopes::default();
        profile.add_scopes(&mut scopes);
        assert!(scopes.is_cluster_scoped("cert-manager.io", "ClusterIssuer"));
        assert!(scopes.is_cluster_scoped("", "Widget"));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("kubeVersion: latest\n", "p.yaml: kubeVersion: \"latest\""),
            ("apiVersions: ['a/v1,b/v1']\n", "p.yaml: apiVersions[0]"),
            ("clusterScoped: ['.x']\n", "p.yaml: clusterScoped[0]"),
            (
                "kubeversion: v1.2\n",
                "p.yaml: line 1 column 1: unknown field `kubeversion`",
            ),
        ];
        for (text, want) in cases {
            let error = Profile::parse("p.yaml", text).unwrap_err().to_string();
            assert!(error.starts_with(want), "{text}: {error}");
        }
    }
}
