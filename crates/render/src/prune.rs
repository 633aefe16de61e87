//! Writing the tree and pruning it: compare what this run produced with what is on disk, then
//! write new and changed files and delete exactly the files that carry our exact header and were
//! not produced this time. A file without the header (a user's own Secret manifest, a README) is
//! never touched; a file whose header was edited is left alone with a warning, even when this run
//! produced the same path.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::diff::unified;
use crate::error::{RenderError, Result};
use crate::keys::HEADER;
use crate::layout::OutputFile;

/// What a run would change in the output directory. Paths are relative to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<OutputFile>,
    /// New content, and the content on disk.
    pub changed: Vec<(OutputFile, String)>,
    pub unchanged: Vec<PathBuf>,
    /// Generated files this run did not produce, with their content.
    pub removed: Vec<(PathBuf, String)>,
    /// Files left alone and why.
    pub warnings: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

/// How a file on disk relates to us, judged by its first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// First line is exactly [`HEADER`].
    Generated,
    /// First line mentions strata render but is not the header: edited, or a look-alike.
    Edited,
    /// Anything else: the user's.
    Foreign,
}

pub fn ownership(content: &str) -> Ownership {
    let first = content.lines().next().unwrap_or_default();
    if first == HEADER {
        Ownership::Generated
    } else if first.starts_with('#') && first.to_ascii_lowercase().contains("strata render") {
        Ownership::Edited
    } else {
        Ownership::Foreign
    }
}

/// Compares `files` with the tree under `out` (which may not exist yet).
pub fn changes(out: &Path, files: &[OutputFile]) -> Result<Changes> {
    let mut result = Changes::default();
    // A first render into a new directory: nothing to read or prune (saves a failed open per
    // file).
    if !out.exists() {
        result.added = files.to_vec();
        return Ok(result);
    }
    let produced: BTreeSet<&Path> = files.iter().map(|f| f.path.as_path()).collect();
    for file in files {
        let full = out.join(&file.path);
        match read_text(&full)? {
            None => result.added.push(file.clone()),
            Some(existing) => match ownership(&existing) {
                Ownership::Generated if existing == file.content => {
                    result.unchanged.push(file.path.clone())
                }
                Ownership::Generated => result.changed.push((file.clone(), existing)),
                Ownership::Edited | Ownership::Foreign => result.warnings.push(format!(
                    "{}: not overwritten: its first line is not the strata render header (edited, or not ours)",
                    full.display()
                )),
            },
        }
    }
    let mut on_disk = Vec::new();
    walk(out, Path::new(""), &mut on_disk)?;
    for relative in on_disk {
        if produced.contains(relative.as_path()) {
            continue;
        }
        let full = out.join(&relative);
        let Some(existing) = read_text(&full)? else {
            continue;
        };
        match ownership(&existing) {
            Ownership::Generated => result.removed.push((relative, existing)),
            Ownership::Edited => result.warnings.push(format!(
                "{}: left alone: its header was edited, so it is no longer pruned",
                full.display()
            )),
            Ownership::Foreign => {}
        }
    }
    Ok(result)
}

/// Regular files under `dir`, relative to the output root. Symbolic links are not followed and
/// `.git` is skipped: neither is ever ours.
fn walk(root: &Path, relative: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let dir = root.join(relative);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(RenderError::io(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| RenderError::io(&dir, e))?;
        let kind = entry
            .file_type()
            .map_err(|e| RenderError::io(entry.path(), e))?;
        names.push((entry.file_name(), kind));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in names {
        let path = relative.join(&name);
        if kind.is_dir() && name != ".git" {
            walk(root, &path, out)?;
        } else if kind.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// The file's text; `None` when it does not exist. A binary file reads as foreign text.
fn read_text(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => Ok(Some(String::new())),
        Err(e) => Err(RenderError::io(path, e)),
    }
}

/// Writes added and changed files and deletes removed ones, then removes directories the
/// deletions left empty.
pub fn apply(out: &Path, changes: &Changes) -> Result<()> {
    let writes: Vec<_> = changes
        .added
        .iter()
        .chain(changes.changed.iter().map(|(f, _)| f))
        .collect();
    // Each directory once, then the files from a few threads: creating hundreds of small
    // files is mostly waiting on the file system, which overlaps well.
    let parents: BTreeSet<PathBuf> = writes
        .iter()
        .filter_map(|file| out.join(&file.path).parent().map(Path::to_path_buf))
        .collect();
    for parent in &parents {
        std::fs::create_dir_all(parent).map_err(|e| RenderError::io(parent, e))?;
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get() * 2);
    let chunk = writes.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = writes
            .chunks(chunk)
            .map(|files| {
                scope.spawn(move || {
                    for file in files {
                        let full = out.join(&file.path);
                        std::fs::write(&full, &file.content)
                            .map_err(|e| RenderError::io(&full, e))?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(RenderError::io(
                        out,
                        std::io::Error::other("a writer thread panicked"),
                    ))
                })
            })
            .collect::<Result<Vec<()>>>()
    })?;
    for (relative, _) in &changes.removed {
        let full = out.join(relative);
        std::fs::remove_file(&full).map_err(|e| RenderError::io(&full, e))?;
        let mut dir = full.parent();
        while let Some(d) = dir {
            if d == out || !d.starts_with(out) {
                break;
            }
            // Fails (and stops) on the first directory that still holds something.
            if std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
    Ok(())
}

/// The unified diff of every change, paths shown relative to `out` under `a/` and `b/`.
pub fn diff_text(changes: &Changes) -> String {
    let mut entries: Vec<(PathBuf, String)> = Vec::new();
    for file in &changes.added {
        let name = file.path.display();
        entries.push((
            file.path.clone(),
            unified("/dev/null", &format!("b/{name}"), "", &file.content, 3),
        ));
    }
    for (file, old) in &changes.changed {
        let name = file.path.display();
        entries.push((
            file.path.clone(),
            unified(
                &format!("a/{name}"),
                &format!("b/{name}"),
                old,
                &file.content,
                3,
            ),
        ));
    }
    for (path, old) in &changes.removed {
        let name = path.display();
        entries.push((
            path.clone(),
            unified(&format!("a/{name}"), "/dev/null", old, "", 3),
        ));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.into_iter().map(|(_, text)| text).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn ownership_table() {
        let cases = [
            (format!("{HEADER}\nx: 1\n"), Ownership::Generated),
            (format!("{HEADER} \nx: 1\n"), Ownership::Edited),
            (
                "# Code generated by strata render; edited by me\n".to_string(),
                Ownership::Edited,
            ),
            (
                "# Generated by Strata Render, do not edit\n".to_string(),
                Ownership::Edited,
            ),
            (
                "# Code generated by reckoner; DO NOT EDIT.\n".to_string(),
                Ownership::Foreign,
            ),
            ("apiVersion: v1\n".to_string(), Ownership::Foreign),
            (String::new(), Ownership::Foreign),
        ];
        for (content, want) in cases {
            assert_eq!(ownership(&content), want, "{content:?}");
        }
    }
}
