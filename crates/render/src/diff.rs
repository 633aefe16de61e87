//! Unified line diffs for `strata render --diff` (no diff crate in the workspace; rendered
//! files are small, so a longest-common-subsequence table is plenty).

/// One line of an edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit<'a> {
    Same(&'a str),
    Removed(&'a str),
    Added(&'a str),
}

/// Above this many table cells the diff shows the whole file replaced instead of an LCS.
const MAX_CELLS: usize = 16_000_000;

fn edits<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<Edit<'a>> {
    // Common prefix and suffix first: most rendered changes touch a few lines.
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (a, b) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );
    let mut out: Vec<Edit> = old[..prefix].iter().map(|l| Edit::Same(l)).collect();
    if a.len().saturating_mul(b.len()) > MAX_CELLS {
        out.extend(a.iter().map(|l| Edit::Removed(l)));
        out.extend(b.iter().map(|l| Edit::Added(l)));
    } else {
        // lcs[i][j]: length of the LCS of a[i..] and b[j..].
        let width = b.len() + 1;
        let mut lcs = vec![0u32; (a.len() + 1) * width];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                lcs[i * width + j] = if a[i] == b[j] {
                    lcs[(i + 1) * width + j + 1] + 1
                } else {
                    lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            if i < a.len() && j < b.len() && a[i] == b[j] {
                out.push(Edit::Same(a[i]));
                i += 1;
                j += 1;
            } else if i < a.len()
                && (j == b.len() || lcs[(i + 1) * width + j] >= lcs[i * width + j + 1])
            {
                // Removals before additions, as `diff -u` prints them.
                out.push(Edit::Removed(a[i]));
                i += 1;
            } else {
                out.push(Edit::Added(b[j]));
                j += 1;
            }
        }
    }
    out.extend(old[old.len() - suffix..].iter().map(|l| Edit::Same(l)));
    out
}

/// A unified diff of `old` → `new` with `context` lines around each change; empty when equal.
/// `/dev/null` as a name marks an added or removed file, as `diff -u` does.
pub fn unified(old_name: &str, new_name: &str, old: &str, new: &str, context: usize) -> String {
    if old == new {
        return String::new();
    }
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let script = edits(&old_lines, &new_lines);
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    // Indices of changed edits, grouped into hunks whose context windows touch.
    let changed: Vec<usize> = script
        .iter()
        .enumerate()
        .filter(|(_, e)| !matches!(e, Edit::Same(_)))
        .map(|(i, _)| i)
        .collect();
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &i in &changed {
        let start = i.saturating_sub(context);
        let end = (i + context + 1).min(script.len());
        match groups.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => groups.push((start, end)),
        }
    }
    for (start, end) in groups {
        // Line numbers (1-based) where the hunk starts in each file.
        let (mut old_line, mut new_line) = (1, 1);
        for edit in &script[..start] {
            match edit {
                Edit::Same(_) => {
                    old_line += 1;
                    new_line += 1;
                }
                Edit::Removed(_) => old_line += 1,
                Edit::Added(_) => new_line += 1,
            }
        }
        let hunk = &script[start..end];
        let old_count = hunk.iter().filter(|e| !matches!(e, Edit::Added(_))).count();
        let new_count = hunk
            .iter()
            .filter(|e| !matches!(e, Edit::Removed(_)))
            .count();
        let range = |line: usize, count: usize| {
            if count == 0 {
                format!("{},0", line - 1)
            } else {
                format!("{line},{count}")
            }
        };
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            range(old_line, old_count),
            range(new_line, new_count)
        ));
        for edit in hunk {
            let (mark, line) = match edit {
                Edit::Same(l) => (' ', l),
                Edit::Removed(l) => ('-', l),
                Edit::Added(l) => ('+', l),
            };
            out.push(mark);
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, &str, &str, &str)] = &[
            ("equal", "a\nb\n", "a\nb\n", ""),
            (
                "added file",
                "",
                "a\nb\n",
                "--- old\n+++ new\n@@ -0,0 +1,2 @@\n+a\n+b\n",
            ),
            (
                "removed file",
                "a\n",
                "",
                "--- old\n+++ new\n@@ -1,1 +0,0 @@\n-a\n",
            ),
            (
                "one line changed in the middle",
                "1\n2\n3\n4\n5\n6\n7\n8\n9\n",
                "1\n2\n3\n4\nfive\n6\n7\n8\n9\n",
                "--- old\n+++ new\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n",
            ),
            (
                "two hunks",
                "a\n1\n2\n3\n4\n5\n6\n7\n8\nb\n",
                "A\n1\n2\n3\n4\n5\n6\n7\n8\nB\n",
                "--- old\n+++ new\n@@ -1,4 +1,4 @@\n-a\n+A\n 1\n 2\n 3\n@@ -7,4 +7,4 @@\n 6\n 7\n 8\n-b\n+B\n",
            ),
            (
                "insertion",
                "a\nc\n",
                "a\nb\nc\n",
                "--- old\n+++ new\n@@ -1,2 +1,3 @@\n a\n+b\n c\n",
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(unified("old", "new", old, new, 3), *want, "{name}");
        }
    }
}
