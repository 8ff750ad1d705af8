"""ReplicatedMergeTree's replication log and queue entries, in the text format ClickHouse itself
writes to `log/log-N` and `replicas/{r}/queue/queue-N` (ReplicatedMergeTreeLogEntryData::writeText
and readText), so that a tree the reference writes reads like a real server's and the filter has
to do what the C++ filter must: take the partition from a part name or a part range, since the
entries carry no partition field (the RFC's "no new log entry types").

Written as format version 4, what both 18.16 and today's release write for these entries, unless
the entry's fields need more, as ClickHouse chooses (writeText, S3 @2203-2803): 5 with a part UUID,
6 with DEDUPLICATE BY columns, 7 with a log_entry_id (a fifth header line). Read back: versions 1-7.
"S3 @n" is an offset in src/Storages/MergeTree/ReplicatedMergeTreeLogEntry.cpp of a copy in master's
format 7 (tuanpach/ClickHouse @ 0d8e9345; the research note of issue 36). Entry types and their text,
after the header lines:

    get\\n<part>                        GET_PART        an INSERT's part (ATTACH in 18.16 too)
    attach\\n<part>\\npart_checksum: <h> ATTACH_PART     today's ATTACH PARTITION
    merge\\n<part>...\\ninto\\n<part>\\ndeduplicate: 0   MERGE_PARTS
    mutate\\n<part>\\nto\\n<part>         MUTATE_PART     one part, to the mutation's block number
    drop\\n<range> (detach\\n<range>)    DROP_RANGE      range level 999999999 (or 4294967295)
    drop\\n<part> (detach\\n<part>)      DROP_PART       any other level: one part (part moves' SOURCE_DROP)
    clear_column\\n<col>\\nfrom\\n<range> CLEAR_COLUMN    (deprecated since 20.3: a mutation today)
    clear_index\\n<idx>\\nfrom\\n<range>  CLEAR_INDEX     (likewise)
    REPLACE_RANGE\\n<replace entry>     REPLACE_RANGE   REPLACE/ATTACH PARTITION FROM
    alter\\nalter_version\\n<n>...       ALTER_METADATA  today's ALTER of columns or settings
    sync_pinned_part_uuids            SYNC_PINNED_PART_UUIDS  part moves between shards: reload the pins
    clone_part_from_shard\\n<part>\\nsource_shard: <path>   CLONE_PART_FROM_SHARD  part moves: fetch into detached/

After the body, optional lines: part_type: (Compact, for a small INSERT's part), storage_type:,
quorum:. MERGE_PARTS and MUTATE_PART carry optional lines of their own (into_uuid, to_uuid, ...).

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
FORMAT_VERSION = 4                # FORMAT_WITH_DEDUPLICATE: what an entry with none of the newer fields is
FORMAT_WITH_UUID, FORMAT_WITH_DEDUPLICATE_BY_COLUMNS, FORMAT_WITH_LOG_ENTRY_ID, FORMAT_LAST = 5, 6, 7, 8
MERGE_TYPE_REGULAR = 1            # MergeType::Regular; 2 TTLDelete, 3 TTLRecompress are written
NIL_UUID = "00000000-0000-0000-0000-000000000000"

GET_PART, ATTACH_PART, MERGE_PARTS, MUTATE_PART = "GET_PART", "ATTACH_PART", "MERGE_PARTS", "MUTATE_PART"
DROP_RANGE, CLEAR_COLUMN, CLEAR_INDEX = "DROP_RANGE", "CLEAR_COLUMN", "CLEAR_INDEX"
# A drop of one real part (ALTER TABLE DROP PART, part moves' SOURCE_DROP): ClickHouse's "virtual"
# type, written as DROP_RANGE is and told apart on read by the part's level (S3 @11692-12043).
DROP_PART = "DROP_PART"
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
    """create_time in UTC. ClickHouse writes the server's time zone (S3 @2959): the same text on a
    server running in UTC only."""
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
    alter_version: int = 0              # ALTER_METADATA; an ALTER's MUTATE_PART (0: none)
    have_mutation: bool = False
    columns_str: str = ""
    metadata_str: str = ""
    quorum: int = 0
    # Master's lines; each default is what ClickHouse writes nothing for.
    new_part_uuid: str = ""             # MERGE_PARTS' into_uuid, MUTATE_PART's to_uuid (format 5)
    merge_type: int = MERGE_TYPE_REGULAR  # MERGE_PARTS of a TTL: 2 TTLDelete, 3 TTLRecompress
    deduplicate_by_columns: tuple[str, ...] = ()  # OPTIMIZE ... DEDUPLICATE BY a, b (format 6)
    cleanup: bool = False               # MERGE_PARTS of OPTIMIZE ... FINAL CLEANUP
    patch_parts: tuple[str, ...] = ()   # MERGE_PARTS applying lightweight UPDATE patch parts
    part_type: str = ""                 # "Compact" (a small INSERT's part); "" for Wide
    storage_type: str = ""              # "" for Full
    # Format 7: the path of the barrier znode part moves create with the entry (the one writer
    # found); where the entry was recorded, not what it asks, so left out of ==, as the version.
    log_entry_id: str = field(default="", compare=False)
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
    @property
    def written_version(self) -> int:
        """The version writeText stamps (S3 @2203-2803): the least the fields need, never the
        version the entry was read at (a v1-3 text comes back as 4, with all four header lines)."""
        v = FORMAT_VERSION
        if self.deduplicate_by_columns:
            v = max(v, FORMAT_WITH_DEDUPLICATE_BY_COLUMNS)
        if self.new_part_uuid:
            v = max(v, FORMAT_WITH_UUID)
        if self.log_entry_id:
            v = max(v, FORMAT_WITH_LOG_ENTRY_ID)
        return v

    def format(self) -> bytes:
        v = self.written_version
        # block_id: one string here, ClickHouse's deduplication_block_ids joined with "," (S3 @2804);
        # the same text, since an id has no comma.
        head = (f"format version: {v}\ncreate_time: {format_time(self.create_time)}\n"
                f"source replica: {self.source_replica}\nblock_id: {escape(self.block_id)}\n")
        if v >= FORMAT_WITH_LOG_ENTRY_ID:
            head += f"log_entry_id: {escape(self.log_entry_id)}\n"   # S3 @3261
        t = self.type
        if t == GET_PART:
            body = f"get\n{self.new_part_name}"
        elif t == ATTACH_PART:
            body = f"attach\n{self.new_part_name}\npart_checksum: {self.part_checksum}"
        elif t == MERGE_PARTS:
            body = "merge\n" + "".join(s + "\n" for s in self.source_parts) + \
                   f"into\n{self.new_part_name}\ndeduplicate: {int(self.deduplicate)}"
            # The optional lines, in the writer's order (S3 @4090-4988); the reader takes any order.
            if self.merge_type != MERGE_TYPE_REGULAR:
                body += f"\nmerge_type: {self.merge_type}"
            if self.new_part_uuid:
                body += f"\ninto_uuid: {self.new_part_uuid}"
            if self.deduplicate_by_columns:
                body += "\ndeduplicate_by_columns: " + ",".join(f"'{escape(c)}'" for c in self.deduplicate_by_columns)
            if self.cleanup:
                body += "\ncleanup: 1"
            if self.patch_parts:
                body += f"\napply_patches: {len(self.patch_parts)}" + "".join(f"\n{p}" for p in self.patch_parts)
        elif t in (DROP_RANGE, DROP_PART):   # the same text: the reader tells them apart by the level
            body = f"{'detach' if self.detach else 'drop'}\n{self.new_part_name}"
        elif t in (CLEAR_COLUMN, CLEAR_INDEX):
            body = f"{t.lower()}\n{escape(self.column_name)}\nfrom\n{self.new_part_name}"
        elif t == REPLACE_RANGE:
            body = f"REPLACE_RANGE\n{self.replace.format()}"
        elif t == MUTATE_PART:
            body = f"mutate\n{self.source_parts[0]}\nto\n{self.new_part_name}"
            if self.new_part_uuid:
                body += f"\nto_uuid\n{self.new_part_uuid}"   # S3 @6008: a newline, not ": "
            # An ALTER's mutation (S3 @6119). ClickHouse's "none" is -1; here also 0, the field's
            # default for every other type (an ALTER's version is at least 1).
            if self.alter_version not in (0, -1):
                body += f"\nalter_version\n{self.alter_version}"
        elif t == SYNC_PINNED_PART_UUIDS:
            body = "sync_pinned_part_uuids\n"   # ClickHouse writes the kind's newline, then the entry's
        elif t == CLONE_PART_FROM_SHARD:
            body = f"clone_part_from_shard\n{self.new_part_name}\nsource_shard: {self.source_shard}"
        elif t == ALTER_METADATA:
            # The sizes are String::size, UTF-8 bytes (S3 @6192): an "é" in a comment counts 2.
            body = (f"alter\nalter_version\n{self.alter_version}\nhave_mutation\n{int(self.have_mutation)}\n"
                    f"columns_str_size:\n{len(self.columns_str.encode())}\n{self.columns_str}\n"
                    f"metadata_str_size:\n{len(self.metadata_str.encode())}\n{self.metadata_str}")
        else:
            raise BadLogEntry(f"unknown log entry type {t!r}")
        # The entry's newline, then part_type, storage_type, quorum, each only if set (S3 @6983-7548).
        tail = (f"part_type: {self.part_type}\n" if self.part_type else "") + \
               (f"storage_type: {self.storage_type}\n" if self.storage_type else "") + \
               (f"quorum: {self.quorum}\n" if self.quorum else "")
        return (head + body + "\n" + tail).encode()

    @classmethod
    def parse(cls, data: bytes | str, where: str = "log entry") -> "LogEntry":
        """Read an entry back; BadLogEntry names `where` and the line that does not fit. A drop
        of a part whose level is not a range's is DROP_PART, as readText makes it (S3 @11980)."""
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

    def sized(self, n: int, what: str) -> str:
        """The next n bytes of the UTF-8 text (ALTER_METADATA's strings, sized in bytes)."""
        if n < 0:
            raise BadLogEntry(f"{what} {n} is negative")
        raw = self.text[self.pos:self.pos + n].encode()   # n characters are at least n bytes
        if len(raw) < n:
            raise BadLogEntry(f"{what} {n} runs past the end of the entry")
        try:
            out = raw[:n].decode()
        except UnicodeDecodeError:
            raise BadLogEntry(f"{what} {n} ends inside a character") from None
        self.pos += len(out)
        return out

    def uuid(self, what: str) -> str:
        """A UUID as ClickHouse writes it (lower case); the Nil UUID is no UUID."""
        v = self.until_newline()
        if not re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", v):
            raise BadLogEntry(f"{what} {v!r} is not a UUID")
        return "" if v == NIL_UUID else v.lower()

    def quoted_names(self) -> tuple[str, ...]:
        """'a','b' (readQuotedString, then a comma or the end)."""
        v = self.until_newline()
        names = re.findall(r"'((?:[^'\\]|\\.)*)'", v)
        if not names or ",".join(f"'{n}'" for n in names) != v:
            raise BadLogEntry(f"expected quoted names like 'a','b', not {v!r}")
        return tuple(unescape(n) for n in names)

    def type_name(self, default: str) -> str:
        """A part or storage type and its newline; "" for the default (and Unknown), which
        ClickHouse does not write back."""
        v = self.until_newline()
        self.expect("\n")
        return "" if v in (default, "Unknown") else v

    def entry(self) -> LogEntry:
        self.expect("format version: ")
        version = self.number("format version")
        if not 1 <= version < FORMAT_LAST:   # S3 @7723-7806
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
        # Required from 7 on and refused before (S3 @8971): "log_entry_id: " would read as a kind.
        if version >= FORMAT_WITH_LOG_ENTRY_ID:
            self.expect("log_entry_id: ")
            kw["log_entry_id"] = unescape(self.line())
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
                # Optional lines of newer releases, any order and any number of times (S3 @9696-11692):
                # the first line none of them starts ends the loop, its newline the entry's.
                while not trailing_newline_found:
                    self.expect("\n")
                    if self.accept("merge_type: "):
                        kw["merge_type"] = self.number("merge_type")
                    elif self.accept("into_uuid: "):
                        kw["new_part_uuid"] = self.uuid("into_uuid")
                    elif self.accept("deduplicate_by_columns: "):
                        kw["deduplicate_by_columns"] = self.quoted_names()
                    elif self.accept("cleanup: "):
                        kw["cleanup"] = bool(self.number("cleanup"))
                    elif self.accept("apply_patches:"):
                        self.expect(" ")
                        patches = []
                        for _ in range(self.number("apply_patches")):
                            self.expect("\n")   # no newline after the last: the loop reads it
                            patches.append(self.until_newline())
                        kw["patch_parts"] = tuple(patches)
                    else:
                        trailing_newline_found = True
        elif kind in ("drop", "detach"):
            name = self.until_newline()
            drop_type = DROP_RANGE
            if PartName.parse(name).level not in (MAX_LEVEL, LEGACY_MAX_LEVEL):
                drop_type = DROP_PART   # !isFakeDropRangePart(): the level alone decides
            kw.update(type=drop_type, detach=kind == "detach", new_part_name=name)
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
            while not trailing_newline_found:   # likewise, either order (S3 @12906-13151)
                self.expect("\n")
                if self.accept("alter_version\n"):
                    kw["alter_version"] = self.number("alter_version")
                elif self.accept("to_uuid\n"):
                    kw["new_part_uuid"] = self.uuid("to_uuid")
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
            kw["columns_str"] = self.sized(n, "columns_str_size")
            self.expect("\nmetadata_str_size:\n")
            n = self.number("metadata_str_size")
            self.expect("\n")
            kw["metadata_str"] = self.sized(n, "metadata_str_size")
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
        # Then part_type, storage_type, quorum, in that order, each optional (S3 @14049-14659);
        # Wide and Full are the defaults, which the writer leaves out.
        if self.accept("part_type: "):
            kw["part_type"] = self.type_name("Wide")
        if self.accept("storage_type: "):
            kw["storage_type"] = self.type_name("Full")
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
           "DROP_RANGE", "DROP_PART", "CLEAR_COLUMN", "CLEAR_INDEX", "REPLACE_RANGE", "ALTER_METADATA",
           "SYNC_PINNED_PART_UUIDS", "CLONE_PART_FROM_SHARD", "GLOBAL",
           "PART_PRODUCING", "MAX_LEVEL", "LEGACY_MAX_LEVEL", "drop_range_name", "parsed", "replace"]
