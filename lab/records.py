"""What the lab's measuring tools keep between runs: a JSON record of rows, each run's rows
replacing the record's of the same key, and a Markdown table between two markers in a document
(lab/trace_teeth.py in traces/README.md, lab/findings_under.py in spec/FINDINGS.md); a test of
each tool holds the document to the record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable


def merge_record(path: Path, rows: list[dict], key: Callable[[dict], tuple],
                 order: Callable[[dict], tuple] | None = None) -> list[dict]:
    """The record at `path` with this run's rows in place of its rows of the same key, sorted by
    `order` (default: the key), written back; returns every row."""
    new = {key(r) for r in rows}
    kept = [r for r in (json.loads(path.read_text()) if path.is_file() else []) if key(r) not in new]
    merged = sorted(kept + rows, key=order or key)
    path.write_text(json.dumps(merged, indent=1) + "\n")
    return merged


def replace_marked(path: Path, begin: str, end: str, body: str) -> None:
    """Replace what lies between the markers `begin` and `end` in `path` with a newline and `body`."""
    text = path.read_text()
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    path.write_text(head + begin + "\n" + body + end + tail)
