"""Table definitions and partition ids, computed the way ClickHouse computes them.

ClickHouse's rule (MergeTreePartition::getID): when every value of the partition key is
integral, the id is the values in decimal joined by '-', a Date value written as YYYYMMDD; an
empty key gives "all"; any other key gives a hash. So `PARTITION BY (toYYYYMM(date), user_id % 16)`
puts 2024-01-15 / user 21 in partition "202401-5" (the RFC's examples write "202401_5").

Supported key expressions: a column, `toYYYYMM(col)`, `toDate(col)`, `col % N`, `intDiv(col, N)`,
and tuples of them. Keys that are not integral (a String column) are refused: ClickHouse's
hash id is not reproduced here.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Callable

COLUMN_TYPES = {"Date", "DateTime", "UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64",
                "String"}
_PARTITION_ID = re.compile(r"^(all|-?\d+(--?\d+)*)$")


class TableDefinitionError(ValueError):
    """A table definition or partition key the reference cannot accept."""


class BadPartitionId(ValueError):
    """A string that cannot be a partition id of an integral partition key."""


def check_partition_id(pid: str) -> str:
    if not isinstance(pid, str) or not _PARTITION_ID.match(pid):
        raise BadPartitionId(f"malformed partition id {pid!r}: expected integers joined by '-' (e.g. '202401-5') or 'all'")
    return pid


def _as_date(v: Any) -> dt.date:
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    if isinstance(v, str):
        return dt.date.fromisoformat(v[:10])
    raise TypeError(f"not a date: {v!r}")


@dataclass(frozen=True)
class KeyExpr:
    text: str
    column: str
    fn: Callable[[Any], int]


def _column_value(ctype: str) -> Callable[[Any], int]:
    if ctype == "Date":
        return lambda v: int(_as_date(v).strftime("%Y%m%d"))
    if ctype == "DateTime":
        return lambda v: int(v.timestamp()) if isinstance(v, dt.datetime) else int(v)
    return int


def _parse_expr(text: str, columns: dict[str, str]) -> KeyExpr:
    t = text.strip()
    patterns: list[tuple[str, Callable[[re.Match], tuple[str, Callable[[Any], int]]]]] = [
        (r"toYYYYMM\(\s*(\w+)\s*\)", lambda m: (m[1], lambda v: int(_as_date(v).strftime("%Y%m")))),
        (r"toDate\(\s*(\w+)\s*\)", lambda m: (m[1], lambda v: int(_as_date(v).strftime("%Y%m%d")))),
        (r"intDiv\(\s*(\w+)\s*,\s*(\d+)\s*\)", lambda m: (m[1], lambda v, n=int(m[2]): int(v) // n)),
        (r"(\w+)\s*%\s*(\d+)", lambda m: (m[1], lambda v, n=int(m[2]): int(v) % n)),
        (r"(\w+)", lambda m: (m[1], None)),
    ]
    for pat, build in patterns:
        m = re.fullmatch(pat, t)
        if not m:
            continue
        col, fn = build(m)
        if col not in columns:
            raise TableDefinitionError(f"partition key {t!r} uses unknown column {col!r}; columns are {sorted(columns)}")
        if columns[col] == "String":
            raise TableDefinitionError(f"partition key {t!r} is not integral (String column {col!r}): ClickHouse would "
                                       "use a hash partition id, which the reference does not reproduce")
        if pat.startswith("intDiv") or "%" in pat:
            if columns[col] in ("Date", "DateTime"):
                raise TableDefinitionError(f"partition key {t!r}: arithmetic on {columns[col]} column {col!r} is not supported")
            if int(m[2]) == 0:
                raise TableDefinitionError(f"partition key {t!r} divides by zero")
        return KeyExpr(t, col, fn or _column_value(columns[col]))
    raise TableDefinitionError(f"unsupported partition key expression {t!r}: use a column, toYYYYMM(col), "
                               "toDate(col), col % N, intDiv(col, N), or a tuple of them")


def _split_tuple(text: str) -> list[str]:
    t = text.strip()
    if not (t.startswith("(") and t.endswith(")")):
        return [t]
    inner, parts, depth, cur = t[1:-1], [], 0, ""
    for ch in inner:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    # "(user_id % 16)" is one parenthesised expression, "()" / "tuple()" an empty key.
    return [p.strip() for p in parts]


@dataclass(frozen=True)
class Table:
    """A ReplicatedMergeTree table in selective mode: columns, partition key, sort key, settings."""

    name: str
    columns: tuple[tuple[str, str], ...]
    partition_by: str
    order_by: tuple[str, ...]
    replication_factor: int = 2

    def __post_init__(self):
        cols = dict(self.columns)
        for c, ty in self.columns:
            if ty not in COLUMN_TYPES:
                raise TableDefinitionError(f"column {c!r} has unsupported type {ty!r}; supported: {sorted(COLUMN_TYPES)}")
        for c in self.order_by:
            if c not in cols:
                raise TableDefinitionError(f"ORDER BY uses unknown column {c!r}")
        if self.replication_factor < 1:
            raise TableDefinitionError(f"replication_factor must be >= 1, not {self.replication_factor}")
        key = self.partition_by.strip()
        exprs = [] if key in ("", "tuple()", "()") else [_parse_expr(e, cols) for e in _split_tuple(key)]
        object.__setattr__(self, "_key", exprs)

    def partition_id(self, row: dict[str, Any]) -> str:
        """The partition id of one row (a dict column -> value)."""
        try:
            values = [e.fn(row[e.column]) for e in self._key]
        except KeyError as e:
            raise TableDefinitionError(f"row lacks partition key column {e.args[0]!r}: {row}") from None
        return "-".join(str(v) for v in values) if values else "all"

    def split_by_partition(self, rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """The RFC's INSERT routing first step: a block split into sub-blocks by partition."""
        out: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            out.setdefault(self.partition_id(row), []).append(row)
        return out


# The RFC's example table.
EVENTS = Table("events", (("date", "Date"), ("user_id", "UInt64"), ("event", "String")),
               "(toYYYYMM(date), user_id % 16)", ("date", "user_id"), replication_factor=2)
