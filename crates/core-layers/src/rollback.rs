//! Rollback (`spec.rollback`): which revisions a layer keeps, how they are packed into the one
//! Secret that holds them, and which kept revision a rollback restores. Pure: the
//! layer-controller reads and writes the Secret, the `strata` CLI explains it.
//!
//! What is kept is what the layer applied: its manifests as rendered (variables substituted),
//! before the layer's own labels are added, with the version they were applied at. Restoring
//! one applies exactly that again, whatever the source or the variables hold now.

use std::io::{Read as _, Write as _};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::crd::{HistoryEntry, KeptRevision};
use crate::error::{LayerError, Result};
use crate::objects::ObjectRef;
use crate::source::Manifest;

/// Deployed revisions kept when `spec.rollback.keep` is not set.
pub const DEFAULT_KEEP: u32 = 2;
/// Most deployed revisions a layer may keep.
pub const MAX_KEEP: u32 = 10;
/// Largest compressed size of everything one layer keeps: a Secret holds at most 1 MiB, and
/// its base64 form in etcd a third more.
pub const MAX_STORE_BYTES: usize = 768 * 1024;
/// Longest Secret name (a DNS subdomain).
const MAX_NAME: usize = 253;
const STORE_PREFIX: &str = "strata-revisions.";

/// One kept revision, as stored (compressed JSON, one Secret data key each).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StoredRevision {
    pub revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// `spec.version` the manifests were applied at (it is in their labels and annotations).
    pub version: String,
    /// The rendered manifests, in apply-file order.
    pub manifests: Vec<Value>,
}

impl StoredRevision {
    /// The attempt this revision was: source revision and layer generation.
    pub fn key(&self) -> (&str, Option<i64>) {
        (&self.revision, self.generation)
    }

    /// The kept manifests as the apply takes them; an object without apiVersion, kind or
    /// name (a hand-edited Secret) is an error naming it.
    pub fn to_manifests(&self) -> Result<Vec<Manifest>> {
        self.manifests
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let origin = format!("kept revision {}: object {i}", self.revision);
                let field = |path: &[&str]| {
                    core_status::object::lookup(value, path)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                let (api_version, kind, name) = (
                    field(&["apiVersion"]),
                    field(&["kind"]),
                    field(&["metadata", "name"]),
                );
                if api_version.is_empty() || kind.is_empty() || name.is_empty() {
                    return Err(LayerError::Manifest(format!(
                        "{origin}: missing apiVersion, kind or metadata.name"
                    )));
                }
                let namespace = field(&["metadata", "namespace"]);
                Ok(Manifest {
                    object: ObjectRef::new(&api_version, &kind, Some(&namespace), &name),
                    api_version,
                    origin,
                    value: value.clone(),
                })
            })
            .collect()
    }
}

/// A kept revision and its compressed form.
#[derive(Clone, Debug)]
pub struct Packed {
    pub revision: StoredRevision,
    pub bytes: Vec<u8>,
    /// How many manifests it holds (also once [`Packed::light`] dropped them).
    objects: usize,
}

impl Packed {
    pub fn new(revision: StoredRevision) -> Result<Self> {
        let json = serde_json::to_vec(&revision)
            .map_err(|e| LayerError::Source(format!("encoding a kept revision: {e}")))?;
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder
            .write_all(&json)
            .and_then(|()| encoder.finish())
            .map(|bytes| Self {
                objects: revision.manifests.len(),
                revision,
                bytes,
            })
            .map_err(|e| LayerError::Source(format!("compressing a kept revision: {e}")))
    }

    /// Unpacks one data value of the Secret (`key` names it in errors).
    pub fn unpack(key: &str, bytes: &[u8]) -> Result<Self> {
        let mut json = Vec::new();
        GzDecoder::new(bytes)
            .read_to_end(&mut json)
            .map_err(|e| LayerError::Source(format!("kept revision {key}: not gzip: {e}")))?;
        let revision: StoredRevision = serde_json::from_slice(&json)
            .map_err(|e| LayerError::Source(format!("kept revision {key}: {e}")))?;
        Ok(Self {
            objects: revision.manifests.len(),
            revision,
            bytes: bytes.to_vec(),
        })
    }

    /// Without its decoded manifests, for keeping in memory: the packed bytes alone are what
    /// a write of the Secret needs (decoded JSON trees take ten times or more the memory).
    pub fn light(&self) -> Self {
        Self {
            revision: StoredRevision {
                revision: self.revision.revision.clone(),
                generation: self.revision.generation,
                version: self.revision.version.clone(),
                manifests: Vec::new(),
            },
            bytes: self.bytes.clone(),
            objects: self.objects,
        }
    }

    /// Its entry in `status.keptRevisions`.
    pub fn summary(&self) -> KeptRevision {
        KeptRevision {
            revision: self.revision.revision.clone(),
            generation: self.revision.generation,
            version: self.revision.version.clone(),
            objects: u32::try_from(self.objects).unwrap_or(u32::MAX),
            bytes: self.bytes.len() as u64,
        }
    }
}

/// The name of the Secret holding `layer`'s kept revisions (in the controller's namespace):
/// `strata-revisions.<layer>`, or, for a name too long for that, its start and a hash.
pub fn store_name(layer: &str) -> String {
    let name = format!("{STORE_PREFIX}{layer}");
    if name.len() <= MAX_NAME {
        return name;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, layer.as_bytes());
    let hash: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let room = MAX_NAME - STORE_PREFIX.len() - hash.len() - 1;
    let start = layer[..room].trim_end_matches(['.', '-']);
    format!("{STORE_PREFIX}{start}-{hash}")
}

/// The Secret data key of the `i`-th kept revision (newest first).
pub fn data_key(i: usize) -> String {
    format!("revision-{i}")
}

/// How many deployed revisions `keep` means.
pub fn keep_count(keep: Option<u32>) -> usize {
    keep.unwrap_or(DEFAULT_KEEP).clamp(1, MAX_KEEP) as usize
}

/// What the store holds after the attempt `new` is applied: `new` first, then the kept
/// revisions that ran healthy by `history` (deployed, or restored by a rollback), newest
/// first, at most `keep` of them, and all of it within [`MAX_STORE_BYTES`] (the oldest go
/// first). Returns the kept set and, when `new` alone is too large, why it is not kept.
pub fn retain(
    new: Packed,
    old: Vec<Packed>,
    history: &[HistoryEntry],
    keep: usize,
) -> (Vec<Packed>, Option<String>) {
    let good = |p: &Packed| {
        history.iter().any(|h| {
            h.was_good()
                && h.revision == p.revision.revision
                && h.generation == p.revision.generation
        })
    };
    let mut out = Vec::with_capacity(keep + 1);
    let mut note = None;
    if new.bytes.len() > MAX_STORE_BYTES {
        note = Some(format!(
            "revision {} is not kept for rollback: its manifests take {} bytes compressed, over the {} a layer may keep",
            new.revision.revision,
            new.bytes.len(),
            MAX_STORE_BYTES
        ));
    }
    let new_key = (new.revision.revision.clone(), new.revision.generation);
    if note.is_none() {
        out.push(new);
    }
    let mut total: usize = out.iter().map(|p| p.bytes.len()).sum();
    for packed in old
        .into_iter()
        .filter(|p| (p.revision.revision.clone(), p.revision.generation) != new_key && good(p))
        .take(keep)
    {
        if total + packed.bytes.len() > MAX_STORE_BYTES {
            break;
        }
        total += packed.bytes.len();
        out.push(packed);
    }
    (out, note)
}

/// Which kept revision a rollback restores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// The newest kept revision that ran healthy and is not the failed attempt.
    LastGood,
    /// The newest kept revision whose source revision is this one, or starts with it.
    Revision(&'a str),
    /// This exact attempt (continuing a rollback already decided).
    Exactly(&'a str, Option<i64>),
}

/// The kept revision `target` names, never the attempt `failed` itself; an error says what
/// is kept instead.
pub fn choose<'a>(
    kept: &'a [Packed],
    history: &[HistoryEntry],
    failed: (&str, Option<i64>),
    target: Target<'_>,
) -> std::result::Result<&'a StoredRevision, String> {
    let candidates = || {
        kept.iter()
            .map(|p| &p.revision)
            .filter(move |r| r.key() != failed)
    };
    let found = match target {
        Target::LastGood => candidates().find(|r| {
            history
                .iter()
                .any(|h| h.was_good() && h.revision == r.revision && h.generation == r.generation)
        }),
        Target::Revision(wanted) => candidates().find(|r| r.revision.starts_with(wanted)),
        Target::Exactly(revision, generation) => {
            candidates().find(|r| r.key() == (revision, generation))
        }
    };
    found.ok_or_else(|| {
        let listed: Vec<String> = candidates()
            .map(|r| match r.generation {
                Some(g) => format!("{} (generation {g})", r.revision),
                None => r.revision.clone(),
            })
            .collect();
        let kept = if listed.is_empty() {
            "no other revision is kept".to_string()
        } else {
            format!("kept: {}", listed.join(", "))
        };
        match target {
            Target::LastGood => format!("no deployed revision is kept to roll back to ({kept})"),
            Target::Revision(wanted) | Target::Exactly(wanted, _) => {
                format!("revision {wanted:?} is not kept ({kept})")
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn stored(revision: &str, generation: i64, objects: usize) -> StoredRevision {
        StoredRevision {
            revision: revision.into(),
            generation: Some(generation),
            version: format!("v{generation}"),
            manifests: (0..objects)
                .map(|i| {
                    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("cm-{i}"), "namespace": "apps"},
                        "data": {"k": format!("{revision}-{i}")}})
                })
                .collect(),
        }
    }

    fn history(entries: &[(&str, i64, &str)]) -> Vec<HistoryEntry> {
        entries
            .iter()
            .map(|(revision, generation, outcome)| HistoryEntry {
                revision: (*revision).into(),
                version: String::new(),
                generation: Some(*generation),
                outcome: Some((*outcome).into()),
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn packing_round_trips_and_compresses() {
        let revision = stored("main@sha1:aaa", 3, 50);
        let packed = Packed::new(revision.clone()).unwrap();
        let json = serde_json::to_vec(&revision).unwrap().len();
        assert!(
            packed.bytes.len() * 3 < json,
            "{} vs {json}",
            packed.bytes.len()
        );
        let back = Packed::unpack("revision-0", &packed.bytes).unwrap();
        assert_eq!(back.revision, revision);
        assert_eq!(packed.summary().objects, 50);
        let light = packed.light();
        assert!(light.revision.manifests.is_empty());
        assert_eq!(
            light.summary(),
            packed.summary(),
            "the same entry, without the manifests"
        );
        assert_eq!(light.bytes, packed.bytes);
        let bad = Packed::unpack("revision-1", b"not gzip").unwrap_err();
        assert!(
            bad.to_string().contains("kept revision revision-1"),
            "{bad}"
        );
    }

    #[test]
    fn kept_manifests_carry_their_identity() {
        let manifests = stored("r1", 1, 2).to_manifests().unwrap();
        assert_eq!(manifests[1].object.to_string(), "ConfigMap apps/cm-1");
        assert_eq!(manifests[1].origin, "kept revision r1: object 1");
        let mut broken = stored("r1", 1, 1);
        broken.manifests[0]["metadata"]["name"] = Value::Null;
        let e = broken.to_manifests().unwrap_err().to_string();
        assert!(e.contains("kept revision r1: object 0"), "{e}");
    }

    #[test]
    fn retain_table() {
        let pack = |r: &str, g: i64| Packed::new(stored(r, g, 1)).unwrap();
        let keys = |kept: &[Packed]| -> Vec<String> {
            kept.iter()
                .map(|p| format!("{}#{}", p.revision.revision, p.revision.generation.unwrap()))
                .collect()
        };
        let deployed = history(&[
            ("r3", 3, "Failed"),
            ("r2", 2, "Deployed"),
            ("r1", 1, "RolledBack"),
        ]);
        for (case, new, old, keep, want) in [
            (
                "the new attempt first, then the good ones, newest first",
                pack("r4", 4),
                vec![pack("r3", 3), pack("r2", 2), pack("r1", 1)],
                2,
                vec!["r4#4", "r2#2", "r1#1"],
            ),
            (
                "keep bounds the good ones; a failed attempt is never kept",
                pack("r4", 4),
                vec![pack("r3", 3), pack("r2", 2), pack("r1", 1)],
                1,
                vec!["r4#4", "r2#2"],
            ),
            (
                "the same attempt again replaces its entry",
                pack("r2", 2),
                vec![pack("r2", 2), pack("r1", 1)],
                2,
                vec!["r2#2", "r1#1"],
            ),
            (
                "same revision, another generation: both kept",
                pack("r2", 5),
                vec![pack("r2", 2)],
                2,
                vec!["r2#5", "r2#2"],
            ),
        ] {
            let (kept, note) = retain(new, old, &deployed, keep);
            assert_eq!(keys(&kept), want, "{case}");
            assert_eq!(note, None, "{case}");
        }
    }

    #[test]
    fn retain_stays_within_the_secret() {
        // Random hex: compresses to about half, so `kib` of it take about kib/2 compressed.
        let big = |r: &str, g: i64, kib: usize| {
            let mut s = stored(r, g, 1);
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ g as u64;
            let noise: String = (0..kib * 1024 / 16)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    format!("{x:016x}")
                })
                .collect();
            s.manifests[0]["data"]["k"] = noise.into();
            Packed::new(s).unwrap()
        };
        let deployed = history(&[("r2", 2, "Deployed"), ("r1", 1, "Deployed")]);
        let (kept, note) = retain(
            big("r3", 3, 1200),
            vec![big("r2", 2, 1200), big("r1", 1, 10)],
            &deployed,
            2,
        );
        let names: Vec<&str> = kept.iter().map(|p| p.revision.revision.as_str()).collect();
        assert_eq!(
            names,
            vec!["r3"],
            "r2 does not fit beside r3; r1 is older than it"
        );
        assert_eq!(note, None);
        let (kept, note) = retain(big("r3", 3, 4000), vec![big("r1", 1, 10)], &deployed, 2);
        let names: Vec<&str> = kept.iter().map(|p| p.revision.revision.as_str()).collect();
        assert_eq!(names, vec!["r1"]);
        assert!(
            note.unwrap()
                .starts_with("revision r3 is not kept for rollback")
        );
    }

    #[test]
    fn choose_table() {
        let kept: Vec<Packed> = [("r3", 3), ("r2", 2), ("r2", 1), ("r0", 0)]
            .iter()
            .map(|(r, g)| Packed::new(stored(r, *g, 1)).unwrap())
            .collect();
        let h = history(&[
            ("r3", 3, "Failed"),
            ("r2", 2, "Failed"),
            ("r2", 1, "Deployed"),
            ("r0", 0, "Deployed"),
        ]);
        let pick = |failed: (&str, Option<i64>), target| {
            choose(&kept, &h, failed, target)
                .map(|r| format!("{}#{}", r.revision, r.generation.unwrap()))
        };
        assert_eq!(pick(("r3", Some(3)), Target::LastGood).unwrap(), "r2#1");
        assert_eq!(
            pick(("r2", Some(1)), Target::LastGood).unwrap(),
            "r0#0",
            "never the failed attempt"
        );
        assert_eq!(
            pick(("r3", Some(3)), Target::Revision("r0")).unwrap(),
            "r0#0"
        );
        assert_eq!(
            pick(("r3", Some(3)), Target::Revision("r2")).unwrap(),
            "r2#2",
            "newest of a revision"
        );
        assert_eq!(
            pick(("r3", Some(3)), Target::Exactly("r2", Some(1))).unwrap(),
            "r2#1"
        );
        let e = pick(("r3", Some(3)), Target::Revision("zz")).unwrap_err();
        assert_eq!(
            e,
            "revision \"zz\" is not kept (kept: r2 (generation 2), r2 (generation 1), r0 (generation 0))"
        );
        let none = choose(&kept[..1], &h, ("r3", Some(3)), Target::LastGood).unwrap_err();
        assert_eq!(
            none,
            "no deployed revision is kept to roll back to (no other revision is kept)"
        );
    }

    #[test]
    fn store_names_fit() {
        assert_eq!(store_name("apps"), "strata-revisions.apps");
        let long = "a".repeat(250);
        let name = store_name(&long);
        assert_eq!(name.len(), MAX_NAME.min(name.len()));
        assert!(
            name.len() <= MAX_NAME && name.starts_with("strata-revisions.aaa"),
            "{name}"
        );
        assert_ne!(store_name(&long), store_name(&"a".repeat(251)));
    }
}
