"""A history written to disk as it is recorded, so that one history spans any number of kills of
the process that records it (`reference run --attach`, issue 38).

The journal is a folder of JSON-lines files, one per history table (`{table}.jsonl`), each row
appended as it is recorded and flushed before the recorder goes on; `sent.jsonl` adds what no
table holds yet: an INSERT that left the client and has no answer. A kill -9 loses nothing that
was flushed (the kernel has it), so the journal is the history up to the kill, save perhaps a last
line cut short, which `load` drops and truncates away before anything is appended after it.
Flushed, not fsync'd: the fault this serves is the process's death, not the machine's; an fsync
per row would cost a disk round trip per recorded event (BENCHMARKS.md measures the flush).

What a kill leaves unanswered is answered by `load` as a client sees it: an INSERT that was sent
and never answered is `unknown` (the connection broke: it may or may not have been written), at
the step the history resumes from; a query or an operator's command in flight leaves no row (no
client was told anything).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

SENT = "sent"   # not a history table: INSERTs sent, with the row_ids of each sub-block
# A snapshot's tables (History.snapshot), written in this order with the assignments last.
SNAPSHOT_TABLES = ("metadata", "queued_mutations", "migrations", "parts")

# Every column of a step of the logical clock: the history resumes after the largest.
STEP_COLUMNS = ("step", "sent_step", "ack_step", "start_step", "end_step", "snapshot_step", "drop_step")


class BadJournal(ValueError):
    """A journal folder that cannot be read as one (a line other than the last is not JSON, ...)."""


@dataclass
class Resumed:
    """What `load` read: the tables, the INSERTs sent and never answered, the step to go on from."""
    tables: dict[str, list[dict]]
    unanswered: list[dict]   # the `sent` records without an answer: {block_id, sent_step, subs: {p: [row_id]}}
    step: int
    sent: list[dict]   # every `sent` record (block_rows is rebuilt from them)


class Journal:
    """Appends rows to `folder/{table}.jsonl`, each flushed before `append` returns."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}

    def append(self, table: str, rows: list[dict]) -> None:
        if not rows:
            return
        f = self._files.get(table)
        if f is None:
            f = self._files[table] = open(self.folder / f"{table}.jsonl", "a", encoding="utf-8")
        # One write per call: the rows of one event (an INSERT's sub-block, a snapshot) go out
        # together, and a kill cuts at most the last line.
        f.write("".join(json.dumps(r, default=str) + "\n" for r in rows))
        f.flush()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


def _read_lines(path: Path) -> list[dict]:
    """The rows of one journal file; a last line a kill cut short is dropped and cut off the file
    (the next append starts a line of its own). A bad line before the last is refused."""
    data = path.read_bytes()
    rows, good = [], 0
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        if not line:
            good += 1
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:   # the last, unterminated: the write the kill cut short
                break
            raise BadJournal(f"{path}: line {i + 1} is not JSON (only a last line can be cut short)") from None
        good += len(line) + 1
    if good < len(data):
        with open(path, "r+b") as f:
            f.truncate(good)
            os.fsync(f.fileno())
    return rows


def load(folder: str | Path, tables: list[str]) -> Resumed:
    """The journal's rows per table (every name in `tables`, empty if never written), its INSERTs
    sent and not answered, and the first step after everything it recorded."""
    folder = Path(folder)
    unknown = sorted(p.stem for p in folder.glob("*.jsonl") if p.stem not in tables and p.stem != SENT)
    if unknown:
        raise BadJournal(f"{folder}: {', '.join(unknown)}.jsonl is not a table of the history")
    out = {t: _read_lines(folder / f"{t}.jsonl") if (folder / f"{t}.jsonl").exists() else [] for t in tables}
    # The clock goes on after every step recorded, a snapshot's cut short included.
    step = max([r[c] for rows in out.values() for r in rows for c in STEP_COLUMNS if isinstance(r.get(c), int)]
               + [0])
    # A snapshot the kill cut short (its assignments, written last, missing) is dropped whole: the
    # checkers would read its parts against no assignment. A snapshot of a table with no
    # partition has none either; dropping it loses an observation of nothing.
    whole = {r["snapshot_step"] for r in out.get("assignments", ())}
    for t in SNAPSHOT_TABLES:
        if t in out:
            out[t] = [r for r in out[t] if r["snapshot_step"] in whole]
    sent = _read_lines(folder / f"{SENT}.jsonl") if (folder / f"{SENT}.jsonl").exists() else []
    answered = {(r["block_id"], r["sent_step"], r["partition_id"]) for r in out.get("inserts", ())}
    unanswered = []
    for s in sent:
        subs = {p: ids for p, ids in s["subs"].items() if (s["block_id"], s["sent_step"], p) not in answered}
        if subs:
            unanswered.append({**s, "subs": subs})
    return Resumed(out, unanswered, max([step] + [s["sent_step"] for s in sent]) + 1, sent)
