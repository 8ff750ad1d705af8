"""Mutations (ALTER TABLE ... UPDATE / DELETE) as ReplicatedMergeTree keeps them: table-wide, one
`mutations/NNNNNNNNNN` znode holding the commands and, for every partition, the block number the
mutation took there. Data below that number is owed the mutation; a part inserted later was
born without it and owes nothing. The merge-selecting owner of a partition then writes one
MUTATE_PART per part into log/ ("mutate <part> to <part>_<block number>"), which every keeper of
the partition executes (protocol/replica.py).

The znode text is ReplicatedMergeTreeMutationEntry's: `format version: 1`, create time, source
replica, `block numbers count: N` and N lines `<partition>\\t<number>`, then the commands: 18.16
writes `commands: <escaped SQL>`, today's release `mutation commands:` and a list; both are read.

The reference applies a small command language to its rows, enough for the scenarios here:
`UPDATE col = <literal>[, col = <literal>] WHERE <cond>`, `DELETE WHERE <cond>`, and `CLEAR COLUMN
col`, where <cond> is `1` or `col = <literal>` / `col != <literal>` (literals: numbers, 'strings').
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from protocol.log_entry import BadLogEntry, escape, format_time, parse_time, unescape
from protocol.parts import PartName


class BadMutation(ValueError):
    """A mutation text or command the reference cannot read; the message names it."""


@dataclass(frozen=True)
class MutationEntry:
    commands: str                       # the SQL after ALTER TABLE t (e.g. "UPDATE event = 'x' WHERE 1")
    block_numbers: tuple[tuple[str, int], ...]   # (partition id, block number), sorted
    source_replica: str = ""
    create_time: int = 0

    def number_in(self, partition: str) -> int | None:
        return dict(self.block_numbers).get(partition)

    def format(self) -> bytes:
        lines = [f"format version: 1", f"create time: {format_time(self.create_time)}",
                 f"source replica: {self.source_replica}", f"block numbers count: {len(self.block_numbers)}"]
        lines += [f"{p}\t{n}" for p, n in self.block_numbers]
        return ("\n".join(lines) + f"\ncommands: {escape(self.commands)}").encode()

    @classmethod
    def parse(cls, data: bytes, where: str = "mutation") -> "MutationEntry":
        text = data.decode()
        lines = text.split("\n")
        try:
            if lines[0] != "format version: 1":
                raise BadMutation(f"expected 'format version: 1', found {lines[0]!r}")
            create = parse_time(_value(lines[1], "create time: "))
            source = _value(lines[2], "source replica: ")
            count = int(_value(lines[3], "block numbers count: "))
            numbers = []
            for line in lines[4:4 + count]:
                p, _, n = line.partition("\t")
                numbers.append((p, int(n)))
            rest = "\n".join(lines[4 + count:])
            if rest.startswith("commands: "):                 # 18.16
                commands = unescape(rest[len("commands: "):]).strip()
            elif rest.startswith("mutation commands:\n"):     # today's release
                commands = rest[len("mutation commands:\n"):].strip()
            else:
                raise BadMutation(f"expected the commands after the block numbers, found {rest[:40]!r}")
        except (IndexError, ValueError, BadLogEntry) as e:
            raise BadMutation(f"{where}: {e}") from None
        return cls(commands, tuple(sorted(numbers)), source, create)


def _value(line: str, prefix: str) -> str:
    if not line.startswith(prefix):
        raise BadMutation(f"expected {prefix!r}, found {line!r}")
    return line[len(prefix):]


# --- commands on rows -------------------------------------------------------------------------

_LITERAL = r"(?:-?\d+|'(?:[^'\\]|\\.)*')"


def _literal(text: str) -> Any:
    text = text.strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else unescape(text[1:-1])


def _condition(text: str) -> Callable[[dict], bool]:
    text = text.strip()
    if text == "1":
        return lambda row: True
    m = re.fullmatch(rf"(\w+)\s*(=|!=)\s*({_LITERAL})", text)
    if not m:
        raise BadMutation(f"unsupported WHERE condition {text!r}: use 1, col = literal or col != literal")
    col, op, value = m[1], m[2], _literal(m[3])
    if op == "=":
        return lambda row: str(row.get(col)) == str(value)
    return lambda row: str(row.get(col)) != str(value)


def row_function(commands: str) -> Callable[[dict], dict | None]:
    """The rows' transformation: a row in, the row changed or None (deleted) out."""
    c = commands.strip()
    if m := re.fullmatch(r"DELETE\s+WHERE\s+(.+)", c, re.I | re.S):
        where = _condition(m[1])
        return lambda row: None if where(row) else row
    if m := re.fullmatch(r"UPDATE\s+(.+?)\s+WHERE\s+(.+)", c, re.I | re.S):
        sets = {}
        for assignment in re.findall(rf"(\w+)\s*=\s*({_LITERAL})", m[1]):
            sets[assignment[0]] = _literal(assignment[1])
        if not sets:
            raise BadMutation(f"UPDATE without col = literal assignments: {commands!r}")
        where = _condition(m[2])
        return lambda row: {**row, **sets} if where(row) else row
    if m := re.fullmatch(r"CLEAR\s+COLUMN\s+(\w+)(?:\s+IN\s+PARTITION\s+\S+)?", c, re.I):
        col = m[1]
        return lambda row: {k: v for k, v in row.items() if k != col}
    raise BadMutation(f"unsupported mutation {commands!r}: UPDATE col = literal WHERE ..., DELETE WHERE ..., "
                      "or CLEAR COLUMN col")


def data_version(part: PartName) -> int:
    """MergeTreePartInfo::getDataVersion: the mutation a part reflects, or its first block."""
    return part.mutation or part.min_block


def owed(part: PartName, mutations: list[MutationEntry], upto: int | None = None) -> list[MutationEntry]:
    """The mutations a part does not reflect yet (up to number `upto`), in block-number order."""
    pending = [(m.number_in(part.partition), m) for m in mutations]
    pending = [(n, m) for n, m in pending
               if n is not None and n > data_version(part) and (upto is None or n <= upto)]
    return [m for _, m in sorted(pending, key=lambda x: x[0])]


def desired_version(part: PartName, mutations: list[MutationEntry]) -> int:
    """The mutation number the part must reach: that of the last mutation it does not reflect."""
    todo = owed(part, mutations)
    return todo[-1].number_in(part.partition) if todo else part.mutation


def mutate_rows(rows: list[dict], todo: list[MutationEntry]) -> list[dict]:
    for m in todo:
        fn = row_function(m.commands)
        rows = [out for r in rows if (out := fn(r)) is not None]
    return rows
