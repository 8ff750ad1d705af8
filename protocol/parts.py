"""Data parts on a replica's disk: immutable files of rows with a checksum.

A part is named as in MergeTree, `{partition}_{min_block}_{max_block}_{level}`, with
`_{mutation}` appended once a mutation rewrote it. A patch part (a lightweight UPDATE's, PR
#102244's PR-F8) is named in its own partition id, `patch-<hash>-{partition}` (ClickHouse's
PatchPartInfo.h); `partition` is always the original partition, which the store, the log filter
and the checkers go by, and `partition_id` the name's, which ClickHouse's partition-id filters
see. A merge writes a part covering its sources' block range at level max+1; a fetch copies a
part's file from another replica's folder and verifies its checksum before the part becomes
visible (written to a temporary name, then renamed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.table import check_partition_id

_NAME = re.compile(r"^(?:patch-(?P<patch>[0-9a-f]+)-)?(?P<p>all|-?\d+(?:--?\d+)*)"
                   r"_(?P<min>\d+)_(?P<max>\d+)_(?P<level>\d+)(?:_(?P<mut>\d+))?$")


class BadPart(ValueError):
    """A part name or file that is not a valid part (bad name, bad checksum, unreadable)."""


class PartGone(BadPart):
    """The part is not (or no longer) on this replica's disk: a fetch that listed it and then found
    it removed by a merge or a fetch that replaced it, as ClickHouse's interserver handler answers
    "No part ... in table", tries another holder or later."""


class CommitMayHaveApplied(Exception):
    """What a `commit` callable raises when its Keeper write went out and no answer came back: the
    part may be registered or not. The store keeps the new part and drops what it replaces, as
    ClickHouse's transaction commits locally before its part check decides, then raises the
    Keeper error again (the __cause__), so the caller sees what Keeper did."""


@dataclass(frozen=True, order=True)
class PartName:
    partition: str
    min_block: int
    max_block: int
    level: int
    mutation: int = 0
    patch: str = ""   # a patch part's hash (lightweight UPDATE); "" for a part of rows

    @property
    def partition_id(self) -> str:
        """The partition id in the part's name: a patch part's is patch-<hash>-<partition>."""
        return f"patch-{self.patch}-{self.partition}" if self.patch else self.partition

    def __str__(self) -> str:
        base = f"{self.partition_id}_{self.min_block}_{self.max_block}_{self.level}"
        return f"{base}_{self.mutation}" if self.mutation else base

    @classmethod
    def parse(cls, name: str) -> "PartName":
        m = _NAME.match(name)
        if not m:
            raise BadPart(f"malformed part name {name!r}: expected partition_minblock_maxblock_level[_mutation]")
        pn = cls(m["p"], int(m["min"]), int(m["max"]), int(m["level"]), int(m["mut"] or 0), m["patch"] or "")
        if pn.min_block > pn.max_block:
            raise BadPart(f"part name {name!r}: min_block {pn.min_block} > max_block {pn.max_block}")
        return pn

    def covers(self, other: "PartName") -> bool:
        """Same partition id and a block range containing the other's (MergeTree's covering rule:
        patch parts and parts of rows never cover each other)."""
        return (self.partition_id == other.partition_id and self.min_block <= other.min_block
                and other.max_block <= self.max_block)


def covers_as_new(have: PartName, want: PartName) -> bool:
    """ClickHouse's MergeTreePartInfo::contains as the queue uses it: `have` covers `want`'s block
    range with a mutation at least as new, so `want` need not be fetched (spec CoversAsNew)."""
    return have.covers(want) and have.mutation >= want.mutation


def active_set(names) -> list[PartName]:
    """ClickHouse's ActiveDataPartSet: the parts no other covers with at least its mutation (an
    outdated part is covered by what replaced it)."""
    names = sorted(set(names))
    return [n for n in names if not any(m != n and m.covers(n) and m.mutation >= n.mutation for m in names)]


def _checksum(rows: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


def rows_checksum(rows: list[dict[str, Any]]) -> str:
    """A part's checksum as entries carry it (ATTACH_PART's part_checksum; hex, upper case)."""
    return _checksum(rows)[:32].upper()


SERVER_UUID = "uuid"   # in a replica's folder: PartStore.server_uuid


def read_server_uuid(folder: str | os.PathLike) -> bytes | None:
    """The identifier a replica's folder keeps (PartStore.server_uuid), None if it has none yet;
    read without opening the folder as a part store (which indexes and tidies it)."""
    try:
        return (Path(folder) / SERVER_UUID).read_bytes().strip()
    except FileNotFoundError:
        return None


class PartStore:
    """The parts of one replica: a folder of `<part name>.part` files."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        # The folder is read once; afterwards only this object writes it, so an index of the
        # names it holds stays exact and saves a directory listing per lookup.
        self._index: dict[str, set[PartName]] = {}
        # The index is read by the replicas that fetch from this one while this one's own thread
        # writes it (the live runtime, reference/runtime.py): a leaf lock, held for no I/O.
        self._index_lock = threading.Lock()
        for p in self.folder.glob("*.part"):
            n = PartName.parse(p.name[:-5])
            self._index.setdefault(n.partition, set()).add(n)
        # A write the process did not finish (killed, or the disk failed and the file could not be
        # removed then) left its temporary file: removed at start, as ClickHouse's
        # clearOldTemporaryDirectories removes tmp_ parts. Never visible as a part: see write.
        for tmp in self.folder.glob(".tmp_*"):
            with contextlib.suppress(OSError):   # a read-only disk: left for the next start
                tmp.unlink()

    def _path(self, name: PartName) -> Path:
        return self.folder / f"{name}.part"

    def server_uuid(self) -> bytes:
        """The identifier this replica's process writes into its is_active, kept on its disk as
        ClickHouse keeps the server's UUID (the `uuid` file of its data path): a restart finds
        its own is_active, left by the session of the process that was killed, by this value
        and takes it over (registration.register_replica) instead of waiting for it to expire."""
        known = read_server_uuid(self.folder)
        if known is not None:
            return known
        value = uuid.uuid4().hex
        self._write_whole(self.folder / SERVER_UUID, value)
        return value.encode()

    def load_state(self) -> dict:
        """What the replica applied that must survive a restart (metadata version, drop points)."""
        path = self.folder / "replica_state.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def save_state(self, state: dict) -> None:
        self._write_whole(self.folder / "replica_state.json", json.dumps(state, sort_keys=True))

    def _write_whole(self, path: Path, body: str) -> None:
        """Write path whole or not at all: a temporary file renamed over it. A write the disk
        fails (full, read-only) removes its temporary file and raises."""
        tmp = self.folder / f".tmp_{path.stem}"   # not *.part: the index globs those
        try:
            tmp.write_text(body)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise

    def names(self, partition: str | None = None) -> list[PartName]:
        with self._index_lock:
            if partition is not None:
                names = list(self._index.get(partition, ()))
            else:
                names = [n for names in self._index.values() for n in names]
        return sorted(names)

    def write(self, name: PartName, rows: list[dict[str, Any]]) -> PartName:
        check_partition_id(name.partition)
        if self._path(name).exists():
            raise BadPart(f"part {name} already exists on {self.folder}: parts are immutable")
        body = json.dumps({"name": str(name), "checksum": _checksum(rows), "rows": rows}, default=str)
        self._write_whole(self._path(name), body)  # visible only once complete
        with self._index_lock:
            self._index.setdefault(name.partition, set()).add(name)
        return name

    def read(self, name: PartName) -> list[dict[str, Any]]:
        path = self._path(name)
        try:
            obj = json.loads(path.read_text())
        except FileNotFoundError:
            raise PartGone(f"part {name} not found on {self.folder}") from None
        except ValueError:
            raise BadPart(f"part {name} on {self.folder} is not readable (truncated or corrupted)") from None
        if obj.get("checksum") != _checksum(obj.get("rows", [])) or obj.get("name") != str(name):
            raise BadPart(f"part {name} on {self.folder} fails its checksum")
        return obj["rows"]

    def detach(self, name: PartName, prefix: str = "") -> None:
        """DETACH PARTITION: the part leaves the table into detached/, where ATTACH finds it. With
        a `prefix` (ClickHouse's "ignored_", "broken_") ATTACH PARTITION does not find it: a part
        kept for a person to look at, not data of the table."""
        detached = self.folder / "detached"
        detached.mkdir(exist_ok=True)
        os.replace(self._path(name), detached / f"{prefix}{name}.part")
        with self._index_lock:
            self._index.get(name.partition, set()).discard(name)

    def detached(self, partition: str) -> list[tuple[PartName, list[dict[str, Any]]]]:
        """The detached parts of a partition with their rows (checksums verified)."""
        out = []
        for f in sorted((self.folder / "detached").glob(f"{partition}_*.part")):
            n = PartName.parse(f.name[:-5])
            obj = json.loads(f.read_text())
            if obj.get("checksum") != _checksum(obj.get("rows", [])):
                raise BadPart(f"detached part {n} on {self.folder} fails its checksum")
            out.append((n, obj["rows"]))
        return out

    def drop_detached(self, name: PartName) -> None:
        (self.folder / "detached" / f"{name}.part").unlink(missing_ok=True)

    def rewrite(self, name: PartName, rows: list[dict[str, Any]]) -> None:
        """Replace a part's rows under the same name (CLEAR COLUMN of 18.16 did; nothing else may)."""
        self.remove(name)
        self.write(name, rows)

    def checksum(self, name: PartName) -> str:
        """The part's checksum, as REPLACE_RANGE's part_checksums carry it (hex, upper case)."""
        return json.loads(self._path(name).read_text())["checksum"][:32].upper()   # rows_checksum of its rows

    def remove(self, name: PartName) -> None:
        self._path(name).unlink(missing_ok=True)
        with self._index_lock:
            self._index.get(name.partition, set()).discard(name)

    def commit_replacing(self, new: PartName, old: list[PartName], commit: Callable[[PartName], None] | None) -> None:
        """`new` is on disk: `commit` it (the Keeper multi that registers it), then remove `old`, as
        ClickHouse's transaction keeps the parts a new one replaces until it is committed. A kill
        before the commit leaves `new` unregistered and `old` whole (restart.replica_check_parts
        detaches the one and keeps the other); a commit that raises takes `new` off again, unless
        it may have gone through (CommitMayHaveApplied): then `new` stays and `old` goes, and the
        committer decides it once Keeper answers. Taking it off then would leave Keeper listing a
        part the disk lacks, whose queue entry is gone if the commit applied."""
        if commit is not None:
            try:
                commit(new)
            except CommitMayHaveApplied as e:
                for o in old:
                    self.remove(o)
                raise (e.__cause__ or e) from None
            except BaseException:
                self.remove(new)
                raise
        for o in old:
            self.remove(o)

    def fetch_from(self, source: "PartStore", name: PartName,
                   commit: Callable[[PartName], None] | None = None) -> PartName:
        """Copy a part from another replica, verifying its checksum first; drop what it covers
        once `commit` (if any) has registered it (commit_replacing)."""
        rows = source.read(name)  # raises BadPart on a bad checksum: nothing is written here
        self.write(name, rows)
        self.commit_replacing(name, [old for old in self.names(name.partition) if old != name and name.covers(old)], commit)
        return name

    def merge(self, sources: list[PartName], commit: Callable[[PartName], None] | None = None) -> PartName:
        """Merge parts of one partition into the part covering them (sources removed once
        `commit`, if any, has registered it: commit_replacing)."""
        if len(sources) < 2 or len({s.partition_id for s in sources}) != 1:
            raise BadPart(f"a merge needs two or more parts of one partition, not {[str(s) for s in sources]}")
        if len({s.mutation for s in sources}) != 1:
            raise BadPart(f"parts at different mutation versions cannot merge: {[str(s) for s in sources]}")
        rows = [r for s in sorted(sources) for r in self.read(s)]
        merged = PartName(sources[0].partition, min(s.min_block for s in sources), max(s.max_block for s in sources),
                          max(s.level for s in sources) + 1, sources[0].mutation, sources[0].patch)
        self.write(merged, rows)
        self.commit_replacing(merged, list(sources), commit)
        return merged

    def mutate(self, name: PartName, mutation: int, fn, commit: Callable[[PartName], None] | None = None) -> PartName:
        """Rewrite a part with fn(row) -> row | None (None deletes the row), as mutation `mutation`
        (the old part removed once `commit`, if any, has registered the new: commit_replacing)."""
        if mutation <= name.mutation:
            raise BadPart(f"part {name} already has mutation {name.mutation} >= {mutation}")
        rows = [out for r in self.read(name) if (out := fn(r)) is not None]
        new = PartName(name.partition, name.min_block, name.max_block, name.level, mutation, name.patch)
        self.write(new, rows)
        self.commit_replacing(new, [name], commit)
        return new
