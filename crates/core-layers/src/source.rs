//! Reading a layer's manifests from its source: a Flux `GitRepository`, `OCIRepository` or
//! `Bucket` artifact (downloaded from `status.artifact.url`, its digest verified, its size
//! bounded, path traversal rejected), or a ConfigMap for clusters without Flux.
//!
//! The pure half (readiness of a source object, digest, unpacking, selecting and parsing a
//! layer's directory) is separate from the one HTTP call, so it is tested with tables.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use serde_json::Value;

use crate::error::LayerError;
use crate::objects::{ObjectRef, SourceState};

/// Flux source kinds and the API group they live in.
pub const FLUX_GROUP: &str = "source.toolkit.fluxcd.io";
pub const FLUX_KINDS: [&str; 3] = ["GitRepository", "OCIRepository", "Bucket"];
pub const CONFIGMAP_KIND: &str = "ConfigMap";

/// Unpacked files of an artifact, keyed by their path without a leading `./`.
pub type Files = BTreeMap<String, Vec<u8>>;

/// Limits on what a source may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest artifact download, in bytes.
    pub max_artifact_bytes: u64,
    /// Largest total of unpacked files, in bytes (a gzip bomb stops here).
    pub max_unpacked_bytes: u64,
    pub download_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_artifact_bytes: 50 << 20,
            max_unpacked_bytes: 200 << 20,
            download_timeout: Duration::from_secs(30),
        }
    }
}

/// Where to download an artifact and how to check it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    pub url: String,
    pub revision: String,
    /// `sha256:<hex>` (Flux ≥ 2.1), or the legacy `checksum` as `sha256:<hex>`.
    pub digest: Option<String>,
}

/// Reads a Flux source object: Ready with an artifact for its current generation, or why not.
pub fn flux_artifact(source: &Value) -> Result<Artifact, String> {
    use core_status::object::{int_or, lookup, str_or};
    let ready = lookup(source, &["status", "conditions"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| str_or(c, &["type"], "") == "Ready");
    let generation = int_or(source, &["metadata", "generation"], 0);
    let observed = int_or(source, &["status", "observedGeneration"], -1);
    match ready {
        Some(c) if str_or(c, &["status"], "") == "True" => {}
        Some(c) => {
            return Err(format!(
                "source is not Ready: {}",
                str_or(c, &["message"], "no message")
            ));
        }
        None => return Err("source has no Ready condition yet".into()),
    }
    if generation != 0 && observed != generation {
        return Err(format!(
            "source status is for generation {observed}, the source is at generation {generation}"
        ));
    }
    let artifact = lookup(source, &["status", "artifact"]).ok_or("source has no artifact yet")?;
    let url = str_or(artifact, &["url"], "");
    let revision = str_or(artifact, &["revision"], "");
    if url.is_empty() || revision.is_empty() {
        return Err("source artifact has no url or revision".into());
    }
    let digest = match str_or(artifact, &["digest"], "") {
        "" => match str_or(artifact, &["checksum"], "") {
            "" => None,
            checksum => Some(format!("sha256:{checksum}")),
        },
        digest => Some(digest.to_string()),
    };
    Ok(Artifact {
        url: url.to_string(),
        revision: revision.to_string(),
        digest,
    })
}

/// Checks `bytes` against a `<algorithm>:<hex>` digest. An artifact without a digest is
/// refused: nothing unverified is applied.
pub fn verify_digest(bytes: &[u8], digest: Option<&str>) -> Result<(), LayerError> {
    let digest = digest.ok_or_else(|| {
        LayerError::Artifact("the source artifact publishes no digest to verify".into())
    })?;
    let (algorithm, want) = digest.split_once(':').ok_or_else(|| {
        LayerError::Artifact(format!("digest {digest:?} is not <algorithm>:<hex>"))
    })?;
    let algorithm_ref = match algorithm {
        "sha256" => &ring::digest::SHA256,
        "sha384" => &ring::digest::SHA384,
        "sha512" => &ring::digest::SHA512,
        other => {
            return Err(LayerError::Artifact(format!(
                "digest algorithm {other:?} is not supported (sha256, sha384, sha512)"
            )));
        }
    };
    let got = hex(ring::digest::digest(algorithm_ref, bytes).as_ref());
    if !got.eq_ignore_ascii_case(want) {
        return Err(LayerError::Artifact(format!(
            "digest mismatch: the artifact is {algorithm}:{got}, the source says {digest}"
        )));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A content digest for sources without one of their own (ConfigMaps).
pub fn content_digest(files: &Files) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for (path, data) in files {
        context.update(path.as_bytes());
        context.update(&[0]);
        context.update(&(data.len() as u64).to_be_bytes());
        context.update(data);
    }
    format!("sha256:{}", hex(context.finish().as_ref()))
}

/// Unpacks a gzipped tarball in memory. Entries that escape the root (absolute, `..`) fail
/// the whole artifact; links and special files are skipped (only regular files matter).
pub fn unpack(bytes: &[u8], limits: &Limits) -> Result<Files, LayerError> {
    let gz = flate2::read::GzDecoder::new(bytes);
    let mut archive = tar::Archive::new(gz);
    let mut files = Files::new();
    let mut total: u64 = 0;
    let entries = archive
        .entries()
        .map_err(|e| LayerError::Artifact(format!("not a tar.gz archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| LayerError::Artifact(format!("corrupt archive: {e}")))?;
        let raw_path = entry
            .path()
            .map_err(|e| LayerError::Artifact(format!("bad entry name: {e}")))?
            .to_string_lossy()
            .to_string();
        let path = normalise_entry(&raw_path)?;
        if !entry.header().entry_type().is_file() || path.is_empty() {
            continue;
        }
        let size = entry.header().size().unwrap_or(0);
        total += size;
        if total > limits.max_unpacked_bytes {
            return Err(LayerError::Artifact(format!(
                "unpacked content exceeds {} bytes",
                limits.max_unpacked_bytes
            )));
        }
        // Sized from the header: growing by doubling left up to half of each file unused, and
        // unpacked sources stay cached (one per source and revision).
        let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        (&mut entry)
            .take(limits.max_unpacked_bytes + 1)
            .read_to_end(&mut data)
            .map_err(|e| LayerError::Artifact(format!("reading {path}: {e}")))?;
        files.insert(path, data);
    }
    Ok(files)
}

/// `./a/b.yaml` → `a/b.yaml`; refuses absolute paths and `..`.
fn normalise_entry(path: &str) -> Result<String, LayerError> {
    if path.starts_with('/') || path.starts_with('\\') {
        return Err(LayerError::Artifact(format!(
            "archive entry {path:?} has an absolute path"
        )));
    }
    let mut parts = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                return Err(LayerError::Artifact(format!(
                    "archive entry {path:?} escapes the archive root"
                )));
            }
            other => parts.push(other),
        }
    }
    Ok(parts.join("/"))
}

/// One object of a layer, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub object: ObjectRef,
    pub api_version: String,
    /// `file: document N`, for error messages.
    pub origin: String,
    pub value: Value,
}

/// The manifests of a layer: every `.yaml`/`.yml`/`.json` file under `path`, recursively,
/// in path order; multi-document YAML and `kind: List` flattened. A path with no file at all
/// is an error (a typo must not prune a whole layer); a directory without manifests is an
/// empty layer.
pub fn layer_manifests(files: &Files, path: &str) -> Result<Vec<Manifest>, LayerError> {
    layer_manifests_with(files, path, &BTreeMap::new())
}

/// [`layer_manifests`] with `vars` substituted into every object (`spec.postBuild`, see
/// [`crate::substitute`]) before its identity is taken, so a variable may name an object. One
/// object that cannot be substituted fails the whole layer: nothing partial is applied.
pub fn layer_manifests_with(
    files: &Files,
    path: &str,
    vars: &BTreeMap<String, String>,
) -> Result<Vec<Manifest>, LayerError> {
    let dir = normalise_entry(path).map_err(|_| {
        LayerError::Manifest(format!("spec.source.path {path:?} escapes the source root"))
    })?;
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let under: Vec<(&String, &Vec<u8>)> = files
        .iter()
        .filter(|(name, _)| name.starts_with(&prefix))
        .collect();
    if under.is_empty() && !dir.is_empty() {
        return Err(LayerError::Manifest(format!(
            "spec.source.path {path:?} does not exist in the source"
        )));
    }
    let mut manifests = Vec::new();
    let mut seen: BTreeMap<ObjectRef, String> = BTreeMap::new();
    for (name, data) in under {
        let is_manifest = [".yaml", ".yml", ".json"].iter().any(|e| name.ends_with(e));
        if !is_manifest {
            continue;
        }
        let file_name = name.rsplit('/').next().unwrap_or(name);
        if matches!(
            file_name,
            "kustomization.yaml" | "kustomization.yml" | "Kustomization"
        ) {
            return Err(LayerError::Manifest(format!(
                "{name}: kustomize overlays are not built by the layer-controller; commit the rendered manifests"
            )));
        }
        let text = std::str::from_utf8(data)
            .map_err(|_| LayerError::Manifest(format!("{name}: not UTF-8 text")))?;
        let text = crate::substitute::substitute_file(name, text, vars)?;
        let documents = core_status::input::parse(name, &text)
            .map_err(|e| LayerError::Manifest(e.to_string()))?;
        for doc in documents {
            let origin = format!("{}: document {}", doc.source, doc.index);
            let missing = |field: &str| LayerError::Manifest(format!("{origin}: missing {field}"));
            if doc.api_version().is_empty() {
                return Err(missing("apiVersion"));
            }
            if doc.kind().is_empty() {
                return Err(missing("kind"));
            }
            let raw_name = core_status::object::lookup(&doc.object, &["metadata", "name"]);
            if raw_name.is_some_and(|n| !n.is_string()) {
                return Err(LayerError::Manifest(format!(
                    "{origin}: metadata.name must be a string (YAML reads unquoted y, n, yes, no, on, off, true, false and numbers as other types: quote it)"
                )));
            }
            if doc.name().is_empty() {
                return Err(missing("metadata.name"));
            }
            let object = ObjectRef::new(
                doc.api_version(),
                doc.kind(),
                Some(doc.namespace()),
                doc.name(),
            );
            if let Some(first) = seen.insert(object.clone(), origin.clone()) {
                return Err(LayerError::Manifest(format!(
                    "{origin}: {object} is already defined at {first}"
                )));
            }
            manifests.push(Manifest {
                object,
                api_version: doc.api_version().to_string(),
                origin,
                value: doc.object,
            });
        }
    }
    Ok(manifests)
}

/// A ConfigMap source: each `data` key is a file at the root, so the layer path is `./`.
pub fn configmap_files(configmap: &Value) -> Files {
    let mut files = Files::new();
    if let Some(data) = configmap.get("data").and_then(Value::as_object) {
        for (key, value) in data {
            if let Some(text) = value.as_str() {
                files.insert(key.clone(), text.as_bytes().to_vec());
            }
        }
    }
    files
}

/// The revision of a ConfigMap source: a digest of its content, so no-op updates do not
/// count as a new revision.
pub fn configmap_revision(files: &Files) -> String {
    format!("configmap@{}", content_digest(files))
}

/// A source's state plus, when ready, its files.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub state: SourceState,
    pub files: Option<std::sync::Arc<Files>>,
}

/// Builds a gzipped tarball from files (tests, the benchmark and the e2e artifact server).
pub fn pack(files: &[(&str, &str)]) -> Vec<u8> {
    pack_entries(files, &[])
}

/// [`pack`], plus symbolic links `(path, target)` after the files (hostile-archive tests).
pub fn pack_entries(files: &[(&str, &str)], links: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (path, text) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        // `append_data` validates the path; writing the raw name lets tests build hostile
        // archives too. A name longer than the header's 100 bytes goes through
        // `append_data`, which writes a GNU long-name entry (as tar and Flux do) instead of
        // cutting it short.
        let bytes = path.as_bytes();
        if bytes.len() > header.as_old().name.len() {
            let _ = builder.append_data(&mut header, path, text.as_bytes());
            continue;
        }
        let name = header.as_old_mut().name.as_mut_slice();
        name[..bytes.len()].copy_from_slice(bytes);
        header.set_cksum();
        let _ = builder.append(&header, text.as_bytes());
    }
    for (path, target) in links {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        let _ = builder.append_link(&mut header, path, target);
    }
    builder
        .into_inner()
        .and_then(|gz| gz.finish())
        .unwrap_or_default()
}

/// `sha256:<hex>` of bytes, as Flux publishes it.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!(
        "sha256:{}",
        hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_entry_names_survive_packing() {
        let long = format!(
            "layers/{}/customresourcedefinition.apiextensions.k8s.io_x.yaml",
            "d".repeat(90)
        );
        let files = unpack(
            &pack(&[(long.as_str(), "a: 1"), ("short.yaml", "b: 2")]),
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(
            files.get(&long).map(Vec::as_slice),
            Some(&b"a: 1"[..]),
            "{files:?}"
        );
        assert!(files.contains_key("short.yaml"));
    }

    #[test]
    fn flux_source_readiness() {
        let ready = json!({
            "metadata": {"generation": 2},
            "status": {"observedGeneration": 2,
                "conditions": [{"type": "Ready", "status": "True", "message": "stored artifact"}],
                "artifact": {"url": "http://sc/x.tar.gz", "revision": "main@sha1:abc",
                    "digest": "sha256:00", "size": 10}}
        });
        let artifact = flux_artifact(&ready).unwrap();
        assert_eq!(artifact.revision, "main@sha1:abc");
        assert_eq!(artifact.digest.as_deref(), Some("sha256:00"));
        let cases = [
            (json!({"metadata": {"generation": 1}}), "no Ready condition"),
            (
                json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
                    "conditions": [{"type": "Ready", "status": "False", "message": "auth failed"}]}}),
                "auth failed",
            ),
            (
                json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 2,
                    "conditions": [{"type": "Ready", "status": "True"}], "artifact": {"url": "u", "revision": "r"}}}),
                "generation 2",
            ),
            (
                json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
                    "conditions": [{"type": "Ready", "status": "True"}]}}),
                "no artifact",
            ),
        ];
        for (source, want) in cases {
            let err = flux_artifact(&source).unwrap_err();
            assert!(err.contains(want), "{err} should mention {want}");
        }
        let legacy = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}],
            "artifact": {"url": "u", "revision": "r", "checksum": "ab"}}});
        assert_eq!(
            flux_artifact(&legacy).unwrap().digest.as_deref(),
            Some("sha256:ab")
        );
    }

    #[test]
    fn digests() {
        let bytes = b"hello";
        let good = sha256_digest(bytes);
        assert!(verify_digest(bytes, Some(&good)).is_ok());
        let cases = [
            (None, "no digest"),
            (Some("sha256:00"), "digest mismatch"),
            (Some("md5:00"), "not supported"),
            (Some("garbage"), "not <algorithm>:<hex>"),
        ];
        for (digest, want) in cases {
            let err = verify_digest(bytes, digest).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
        let sha512 = format!(
            "sha512:{}",
            hex(ring::digest::digest(&ring::digest::SHA512, bytes).as_ref())
        );
        assert!(verify_digest(bytes, Some(&sha512)).is_ok());
    }

    #[test]
    fn unpacking_rejects_traversal_and_bombs() {
        let good = pack(&[("./base/a.yaml", "x: 1\n"), ("base/sub/b.yml", "y: 2\n")]);
        let files = unpack(&good, &Limits::default()).unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            vec!["base/a.yaml", "base/sub/b.yml"]
        );
        for hostile in ["../etc/passwd", "/etc/passwd", "base/../../x"] {
            let err = unpack(&pack(&[(hostile, "x")]), &Limits::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(hostile), "{err}");
        }
        let big = "a".repeat(2000);
        let limits = Limits {
            max_unpacked_bytes: 1000,
            ..Limits::default()
        };
        let err = unpack(&pack(&[("big.yaml", &big)]), &limits)
            .unwrap_err()
            .to_string();
        assert!(err.contains("exceeds 1000 bytes"), "{err}");
        assert!(unpack(b"not gzip", &Limits::default()).is_err());
    }

    #[test]
    fn selecting_and_parsing_a_layer() {
        let cm = |name: &str| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: ns}}\n")
        };
        let mut files = Files::new();
        files.insert(
            "base/b.yaml".into(),
            format!("{}---\n{}", cm("b1"), cm("b2")).into_bytes(),
        );
        files.insert("base/a/x.json".into(), br#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}]}"#.to_vec());
        files.insert("base/README.md".into(), b"# docs".to_vec());
        files.insert("basement/c.yaml".into(), cm("c").into_bytes());
        files.insert("empty/README.md".into(), b"nothing".to_vec());
        let base = layer_manifests(&files, "./base").unwrap();
        let names: Vec<String> = base.iter().map(|m| m.object.to_string()).collect();
        assert_eq!(
            names,
            vec!["Secret s", "ConfigMap ns/b1", "ConfigMap ns/b2"]
        );
        assert_eq!(base[2].origin, "base/b.yaml: document 1");
        assert!(layer_manifests(&files, "./empty").unwrap().is_empty());
        let err = layer_manifests(&files, "./typo").unwrap_err().to_string();
        assert!(err.contains("does not exist"), "{err}");

        let mut bad = Files::new();
        bad.insert(
            "l/a.yaml".into(),
            format!(
                "{}---\nkind: ConfigMap\napiVersion: v1\nmetadata: {{namespace: ns}}\n",
                cm("a")
            )
            .into_bytes(),
        );
        let err = layer_manifests(&bad, "./l").unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid manifest: l/a.yaml: document 1: missing metadata.name"
        );
        let mut dup = Files::new();
        dup.insert("l/a.yaml".into(), cm("a").into_bytes());
        dup.insert("l/b.yaml".into(), cm("a").into_bytes());
        let err = layer_manifests(&dup, "./l").unwrap_err().to_string();
        assert!(
            err.contains("already defined at l/a.yaml: document 0"),
            "{err}"
        );
        let mut boolean = Files::new();
        boolean.insert(
            "l/a.yaml".into(),
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\n".to_vec(),
        );
        let err = layer_manifests(&boolean, "./l").unwrap_err().to_string();
        assert!(err.contains("metadata.name must be a string"), "{err}");
        let mut kustomize = Files::new();
        kustomize.insert("l/kustomization.yaml".into(), b"resources: []".to_vec());
        assert!(layer_manifests(&kustomize, "./l").is_err());
    }

    #[test]
    fn variables_are_substituted_before_identities_are_taken() {
        let mut files = Files::new();
        files.insert(
            "l/a.yaml".into(),
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \"${APP}-config\", namespace: \"${NS:=apps}\"}\ndata: {k: v}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: \"${MISSING}\"}\n".to_vec(),
        );
        let vars = BTreeMap::from([("APP".to_string(), "shop".to_string())]);
        // Without variables nothing is substituted: the second name stays as written.
        let plain = layer_manifests(&files, "./l").unwrap();
        assert_eq!(
            plain[0].object.to_string(),
            "ConfigMap ${NS:=apps}/${APP}-config"
        );
        // With them, the names are substituted, and the unset variable fails the layer,
        // naming file, document, line and variable.
        let err = layer_manifests_with(&files, "./l", &vars)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "substitution: l/a.yaml: document 1 (line 8): variable \"MISSING\" is not set and has no default"
        );
        files.insert(
            "l/a.yaml".into(),
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \"${APP}-config\", namespace: \"${NS:=apps}\"}\ndata: {k: v}\n".to_vec(),
        );
        let substituted = layer_manifests_with(&files, "./l", &vars).unwrap();
        assert_eq!(
            substituted[0].object.to_string(),
            "ConfigMap apps/shop-config"
        );
        assert_eq!(substituted[0].value["metadata"]["name"], "shop-config");
    }

    #[test]
    fn configmap_revisions_follow_content() {
        let a = configmap_files(&json!({"data": {"a.yaml": "x: 1"}}));
        let b = configmap_files(&json!({"data": {"a.yaml": "x: 2"}}));
        assert_ne!(configmap_revision(&a), configmap_revision(&b));
        assert_eq!(configmap_revision(&a), configmap_revision(&a.clone()));
    }
}
