"""Writes one benchmark's section into docs/benchmarks.md (or another page, `path`): replaces
the text between its `<!-- NAME:begin -->` and `<!-- NAME:end -->` markers, or appends it the
first time."""
import os
import pathlib
import re

HEADER = ("# Benchmarks\n\nEvery figure here comes from `make bench` on the project's machine "
          "(2 cores, 24 GiB). Each section says what it compares against and whether that was "
          "measured in the same run.\n\n")


def write(name, body, path="docs/benchmarks.md"):
    commit = os.environ.get("STRATA_BENCH_COMMIT", "unknown")
    body = f"{body.strip()}\n\nMeasured on the tree at commit `{commit}` (`bench/run.sh` builds what it runs)."
    section = f"<!-- {name}:begin -->\n{body}\n<!-- {name}:end -->\n"
    path = pathlib.Path(path)
    text = path.read_text() if path.exists() else HEADER
    pattern = re.compile(rf"<!-- {re.escape(name)}:begin -->.*?<!-- {re.escape(name)}:end -->\n", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text += "\n" + section
    path.write_text(text)
