"""ReplicatedMergeTree's replication log and queue entries, in the text format ClickHouse itself
writes to `log/log-N` and `replicas/{r}/queue/queue-N` (ReplicatedMergeTreeLogEntryData::writeText
and readText), so that a tree the reference writes reads like a real server's and the filter has
to do what the C++ filter must: take the partition from a part name or a part range, since the
entries carry no partition field (the RFC's "no new log entry types").

Written as format version 4, what both 18.16 and today's release write for these entries; read
back: versions 1-6. Entry types and their text, after the four header lines:

    get\\n<part>                        GET_PART        an INSERT's part (ATTACH in 18.16 too)
    attach\\n<part>\\npart_checksum: <h> ATTACH_PART     today's ATTACH PARTITION
    merge\\n<part>...\\ninto\\n<part>\\ndeduplicate: 0   MERGE_PARTS
    mutate\\n<part>\\nto\\n<part>         MUTATE_PART     one part, to the mutation's block number
    drop\\n<range> (detach\\n<range>)    DROP_RANGE      range level 999999999
    clear_column\\n<col>\\nfrom\\n<range> CLEAR_COLUMN    (deprecated since 20.3: a mutation today)
    clear_index\\n<idx>\\nfrom\\n<range>  CLEAR_INDEX     (likewise)
    REPLACE_RANGE\\n<replace entry>     REPLACE_RANGE   REPLACE/ATTACH PARTITION FROM
    alter\\nalter_version\\n<n>...       ALTER_METADATA  today's ALTER of columns or settings
    sync_pinned_part_uuids            SYNC_PINNED_PART_UUIDS  part moves between shards: reload the pins
    clone_part_from_shard\\n<part>\\nsource_shard: <path>   CLONE_PART_FROM_SHARD  part moves: fetch into detached/

A queue entry is the log entry's text copied as is (pullLogsToQueue), so nothing in a queue
znode says which log entry it came from; ClickHouse keeps that in memory.
"""

from __future__ import annotations

import datetime as dt
import re
from functools import lru_cache
from dataclasses import dataclass, field, replace

from protocol.parts import BadPart, PartName

MAX_LEVEL = 999_999_999           # MergeTreePartInfo::MAX_LEVEL: a range covering every part in it
LEGACY_MAX_LEVEL = 4_294_967_295  # the same, as REPLACE_RANGE's drop range writes it
FORMAT_VERSION = 4

GET_PART, ATTACH_PART, MERGE_PARTS, MUTATE_PART = "GET_PART", "ATTACH_PART", "MERGE_PARTS", "MUTATE_PART"
DROP_RANGE, CLEAR_COLUMN, CLEAR_INDEX = "DROP_RANGE", "CLEAR_COLUMN", "CLEAR_INDEX"
REPLACE_RANGE, ALTER_METADATA = "REPLACE_RANGE", "ALTER_METADATA"
# Part moves between shards (seed 001; protocol/part_moves/): the writer and reader of
# ReplicatedMergeTreeLogEntry.cpp (ClickHouse master) give their text.
SYNC_PINNED_PART_UUIDS, CLONE_PART_FROM_SHARD = "SYNC_PINNED_PART_UUIDS", "CLONE_PART_FROM_SHARD"
# Entries that make a part by name (a fetch can bring it instead): what a CLONE target and a
# "virtual parts" view must count.
PART_PRODUCING = (GET_PART, ATTACH_PART, MERGE_PARTS, MUTATE_PART)
# The one type with no partition: ALTER_METADATA changes the table (the RFC's "always process").
# The RFC lists CLEAR_COLUMN and CLEAR_INDEX there too, but they name a part range, one partition.
# SYNC_PINNED_PART_UUIDS names no partition either: the pins are the table's (F29: a filter must
# process it; CLONE_PART_FROM_SHARD names its part, so its partition).
GLOBAL = (ALTER_METADATA, SYNC_PINNED_PART_UUIDS)


class BadLogEntry(ValueError):
    """Text that is not a log entry ClickHouse would read; the message says where it stops."""


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "'": "\\'", "\b": "\\b", "\f": "\\f", "\r": "\\r", "\0": "\\0"}
_UNESCAPES = {v[1]: k for k, v in _ESCAPES.items()}


def escape(s: str) -> str:
    """writeEscapedString: the `escape` manipulator of ClickHouse's WriteBuffer."""
    return "".join(_ESCAPES.get(c, c) for c in s)


def unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            out.append(_UNESCAPES.get(s[i + 1], s[i + 1]))
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def quoted_list(items) -> str:
    """writeQuoted of a vector<String>: ['a','b']."""
    return "[" + ",".join("'" + escape(x) + "'" for x in items) + "]"


def parse_quoted_list(text: str) -> tuple[str, ...]:
    t = text.strip()
    if not (t.startswith("[") and t.endswith("]")):
        raise BadLogEntry(f"expected a quoted list like ['a','b'], not {text!r}")
    return tuple(unescape(m) for m in re.findall(r"'((?:[^'\\]|\\.)*)'", t[1:-1]))


def format_time(ts: float) -> str:
    return dt.datetime.fromtimestamp(int(ts), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def parse_time(text: str) -> int:
    try:
        return int(dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc).timestamp())
    except ValueError:
        raise BadLogEntry(f"create_time {text!r} is not YYYY-MM-DD HH:MM:SS") from None


@dataclass(frozen=True)
class ReplaceRange:
    """REPLACE_RANGE's payload: drop the range, then attach these parts (copied from another table)."""
    drop_range_name: str
    from_database: str = ""
    from_table: str = ""
    source_parts: tuple[str, ...] = ()
    new_parts: tuple[str, ...] = ()
    part_checksums: tuple[str, ...] = ()
    columns_version: int = 0

    def format(self) -> str:
        return (f"drop_range_name: {self.drop_range_name}\nfrom_database: {escape(self.from_database)}\n"
                f"from_table: {escape(self.from_table)}\nsource_parts: {quoted_list(self.source_parts)}\n"
                f"new_parts: {quoted_list(self.new_parts)}\npart_checksums: {quoted_list(self.part_checksums)}\n"
                f"columns_version: {self.columns_version}")


@dataclass(frozen=True)
class LogEntry:
    type: str
    new_part_name: str = ""             # the part it makes; the range for DROP_RANGE / CLEAR_*
    source_parts: tuple[str, ...] = ()  # MERGE_PARTS' inputs; MUTATE_PART's one input
    source_replica: str = ""            # "" for entries a CLONE (or cloneReplica) queues itself
    block_id: str = ""                  # the INSERT's dedup id (GET_PART), else ""
    create_time: int = 0                # unix seconds
    deduplicate: bool = False           # OPTIMIZE ... DEDUPLICATE
    detach: bool = False                # DETACH PARTITION: a DROP_RANGE that keeps the data aside
    column_name: str = ""               # CLEAR_COLUMN's column, CLEAR_INDEX's index
    part_checksum: str = ""             # ATTACH_PART
    replace: ReplaceRange | None = None
    source_shard: str = ""              # CLONE_PART_FROM_SHARD: the source table's Keeper path
    alter_version: int = 0              # ALTER_METADATA
    have_mutation: bool = False
    columns_str: str = ""
    metadata_str: str = ""
    quorum: int = 0
    format_version: int = field(default=FORMAT_VERSION, compare=False)

    # --- what the filter and the queue need --------------------------------------------------
    @property
    def range_name(self) -> str:
        """The part or range that says which partition the entry belongs to."""
        return self.replace.drop_range_name if self.type == REPLACE_RANGE else self.new_part_name

    @property
    def partition(self) -> str | None:
        """The partition, from the part name or range (None for a global entry)."""
        return None if self.type in GLOBAL else PartName.parse(self.range_name).partition

    @property
    def part(self) -> PartName:
        return PartName.parse(self.range_name)

    def made_parts(self) -> tuple[str, ...]:
        """The parts this entry brings into being (ClickHouse's getVirtualPartNames, minus ranges)."""
        if self.type in PART_PRODUCING:
            return (self.new_part_name,)
        if self.type == REPLACE_RANGE:
            return self.replace.new_parts
        return ()

    # --- text ---------------------------------------------------------------------------------
    def format(self) -> bytes:
        head = (f"format version: {self.format_version}\ncreate_time: {format_time(self.create_time)}\n"
                f"source replica: {self.source_replica}\nblock_id: {escape(self.block_id)}\n")
        t = self.type
        if t == GET_PART:
            body = f"get\n{self.new_part_name}"
        elif t == ATTACH_PART:
            body = f"attach\n{self.new_part_name}\npart_checksum: {self.part_checksum}"
        elif t == MERGE_PARTS:
            body = "merge\n" + "".join(s + "\n" for s in self.source_parts) + \
                   f"into\n{self.new_part_name}\ndeduplicate: {int(self.deduplicate)}"
        elif t == DROP_RANGE:
            body = f"{'detach' if self.detach else 'drop'}\n{self.new_part_name}"
        elif t in (CLEAR_COLUMN, CLEAR_INDEX):
            body = f"{t.lower()}\n{escape(self.column_name)}\nfrom\n{self.new_part_name}"
        elif t == REPLACE_RANGE:
            body = f"REPLACE_RANGE\n{self.replace.format()}"
        elif t == MUTATE_PART:
            body = f"mutate\n{self.source_parts[0]}\nto\n{self.new_part_name}"
        elif t == SYNC_PINNED_PART_UUIDS:
            body = "sync_pinned_part_uuids\n"   # ClickHouse writes the kind's newline, then the entry's
        elif t == CLONE_PART_FROM_SHARD:
            body = f"clone_part_from_shard\n{self.new_part_name}\nsource_shard: {self.source_shard}"
        elif t == ALTER_METADATA:
            body = (f"alter\nalter_version\n{self.alter_version}\nhave_mutation\n{int(self.have_mutation)}\n"
                    f"columns_str_size:\n{len(self.columns_str)}\n{self.columns_str}\n"
                    f"metadata_str_size:\n{len(self.metadata_str)}\n{self.metadata_str}")
        else:
            raise BadLogEntry(f"unknown log entry type {t!r}")
        tail = f"quorum: {self.quorum}\n" if self.quorum else ""
        return (head + body + "\n" + tail).encode()

    @classmethod
    def parse(cls, data: bytes | str, where: str = "log entry") -> "LogEntry":
        """Read an entry back; BadLogEntry names `where` and the line that does not fit."""
        text = data.decode() if isinstance(data, (bytes, bytearray)) else data
        try:
            return _Reader(text).entry()
        except (BadLogEntry, BadPart) as e:
            raise BadLogEntry(f"{where}: {e}") from None


class _Reader:
    """A line reader with ClickHouse's readText expectations ("in >> \"literal\"")."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def expect(self, literal: str) -> None:
        if not self.text.startswith(literal, self.pos):
            got = self.text[self.pos:self.pos + len(literal) + 10]
            raise BadLogEntry(f"expected {literal!r} at offset {self.pos}, found {got!r}")
        self.pos += len(literal)

    def accept(self, literal: str) -> bool:
        if self.text.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        return False

    def line(self) -> str:
        end = self.text.find("\n", self.pos)
        if end < 0:
            end = len(self.text)
        out, self.pos = self.text[self.pos:end], min(end + 1, len(self.text) + 1)
        return out

    def until_newline(self) -> str:
        """A value that ends at the next newline, which is left unread (`in >> value`)."""
        end = self.text.find("\n", self.pos)
        end = len(self.text) if end < 0 else end
        out, self.pos = self.text[self.pos:end], end
        return out

    def number(self, what: str) -> int:
        v = self.until_newline()
        if not re.fullmatch(r"-?\d+", v):
            raise BadLogEntry(f"{what} {v!r} is not a number")
        return int(v)

    def entry(self) -> LogEntry:
        self.expect("format version: ")
        version = self.number("format version")
        if not 1 <= version <= 6:
            raise BadLogEntry(f"unknown format version {version}")
        self.expect("\n")
        kw: dict = {"format_version": version}
        if version >= 2:
            self.expect("create_time: ")
            kw["create_time"] = parse_time(self.line())
        self.expect("source replica: ")
        kw["source_replica"] = self.line()
        if version >= 3:
            self.expect("block_id: ")
            kw["block_id"] = unescape(self.line())
        kind = self.line()
        trailing_newline_found = False
        if kind == "get":
            kw.update(type=GET_PART, new_part_name=self.until_newline())
        elif kind == "attach":
            kw.update(type=ATTACH_PART, new_part_name=self.line())
            self.expect("part_checksum: ")
            kw["part_checksum"] = self.until_newline()
        elif kind == "merge":
            sources = []
            while (s := self.line()) != "into":
                if self.pos > len(self.text):
                    raise BadLogEntry("merge entry without 'into'")
                sources.append(s)
            kw.update(type=MERGE_PARTS, source_parts=tuple(sources), new_part_name=self.until_newline())
            if version >= 4:
                self.expect("\ndeduplicate: ")
                kw["deduplicate"] = bool(self.number("deduplicate"))
                while not trailing_newline_found:   # optional lines of newer releases
                    self.expect("\n")
                    if self.accept("merge_type: ") or self.accept("into_uuid: ") \
                            or self.accept("deduplicate_by_columns: "):
                        self.until_newline()
                    else:
                        trailing_newline_found = True
        elif kind in ("drop", "detach"):
            kw.update(type=DROP_RANGE, detach=kind == "detach", new_part_name=self.until_newline())
        elif kind in ("clear_column", "clear_index"):
            kw.update(type=kind.upper(), column_name=unescape(self.line()))
            self.expect("from\n")
            kw["new_part_name"] = self.until_newline()
        elif kind == "REPLACE_RANGE":
            kw.update(type=REPLACE_RANGE, replace=self.replace_range())
        elif kind == "mutate":
            source = self.line()
            self.expect("to\n")
            kw.update(type=MUTATE_PART, source_parts=(source,), new_part_name=self.until_newline())
            while not trailing_newline_found:
                self.expect("\n")
                if self.accept("alter_version\n") or self.accept("to_uuid\n"):
                    self.until_newline()
                else:
                    trailing_newline_found = True
        elif kind == "alter":
            self.expect("alter_version\n")
            kw.update(type=ALTER_METADATA, alter_version=self.number("alter_version"))
            self.expect("\nhave_mutation\n")
            kw["have_mutation"] = bool(self.number("have_mutation"))
            self.expect("\ncolumns_str_size:\n")
            n = self.number("columns_str_size")
            self.expect("\n")
            kw["columns_str"], self.pos = self.text[self.pos:self.pos + n], self.pos + n
            self.expect("\nmetadata_str_size:\n")
            n = self.number("metadata_str_size")
            self.expect("\n")
            kw["metadata_str"], self.pos = self.text[self.pos:self.pos + n], self.pos + n
        elif kind == "sync_pinned_part_uuids":
            kw.update(type=SYNC_PINNED_PART_UUIDS)
        elif kind == "clone_part_from_shard":
            kw.update(type=CLONE_PART_FROM_SHARD, new_part_name=self.line())
            self.expect("source_shard: ")
            kw["source_shard"] = self.until_newline()
        else:
            raise BadLogEntry(f"unknown entry kind {kind!r}")
        if not trailing_newline_found:
            self.expect("\n")
        if self.accept("part_type: "):
            self.line()
        if self.pos < len(self.text):
            self.expect("quorum: ")
            kw["quorum"] = self.number("quorum")
            self.expect("\n")
        if self.pos < len(self.text):
            raise BadLogEntry(f"unexpected text after the entry: {self.text[self.pos:self.pos + 40]!r}")
        entry = LogEntry(**kw)
        if entry.type not in GLOBAL:
            entry.part  # a name that is not a part name is refused here, not when the filter reads it
        return entry

    def replace_range(self) -> ReplaceRange:
        self.expect("drop_range_name: ")
        kw = {"drop_range_name": self.line()}
        self.expect("from_database: ")
        kw["from_database"] = unescape(self.line())
        self.expect("from_table: ")
        kw["from_table"] = unescape(self.line())
        if self.accept("commands: "):
            self.line()
        for key in ("source_parts", "new_parts", "part_checksums"):
            self.expect(f"{key}: ")
            kw[key] = parse_quoted_list(self.line())
        self.expect("columns_version: ")
        kw["columns_version"] = self.number("columns_version")
        return ReplaceRange(**kw)


@lru_cache(maxsize=65536)
def parsed(data: bytes) -> LogEntry:
    """LogEntry.parse of a log or queue znode's bytes, once per text: an entry never changes, and
    the readers that scan a log at every step (history/lag.py, protocol/part_moves/) parse it
    again and again. The entry is frozen, so sharing it is safe."""
    return LogEntry.parse(data)


def drop_range_name(partition: str, max_block: int, mutation: int = 0) -> str:
    """The fake part covering every block of a partition up to max_block (DROP PARTITION)."""
    return str(PartName(partition, 0, max_block, MAX_LEVEL, mutation))


__all__ = ["LogEntry", "ReplaceRange", "BadLogEntry", "GET_PART", "ATTACH_PART", "MERGE_PARTS", "MUTATE_PART",
           "DROP_RANGE", "CLEAR_COLUMN", "CLEAR_INDEX", "REPLACE_RANGE", "ALTER_METADATA", "SYNC_PINNED_PART_UUIDS",
           "CLONE_PART_FROM_SHARD", "GLOBAL",
           "PART_PRODUCING", "MAX_LEVEL", "LEGACY_MAX_LEVEL", "drop_range_name", "parsed", "replace"]
