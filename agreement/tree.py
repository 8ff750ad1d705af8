"""A ReplicatedMergeTree table's ZooKeeper tree, read into the one normalised form in which a real
ClickHouse and the reference are compared. Both trees are read by the same code, and every log
and queue entry of both is parsed by the reference's codec (protocol/log_entry.py), so a real
entry that the codec cannot read fails the comparison.

Normalised away, because no finding depends on them: entry creation times, the hash part of a
block id (ClickHouse hashes the block's data with SipHash, the reference with SHA-256: the id
keeps its partition prefix), the content of part znodes (ClickHouse keeps checksums and columns
there), and the order of sequential node numbers of queues.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.keeper import Keeper, NoNodeError
from protocol.log_entry import LogEntry
from protocol.mutations import MutationEntry


def describe(e: LogEntry) -> str:
    """One line per entry, with what the filter and the queue depend on."""
    src = f" by {e.source_replica}" if e.source_replica else ""
    block = f" [block {e.block_id.split('_', 1)[0]}]" if e.block_id else ""
    t = e.type
    if t in ("GET_PART", "ATTACH_PART"):
        return f"{t} {e.new_part_name}{block}{src}"
    if t == "MERGE_PARTS":
        return f"{t} {' + '.join(e.source_parts)} -> {e.new_part_name}{src}"
    if t == "MUTATE_PART":
        return f"{t} {e.source_parts[0]} -> {e.new_part_name}{src}"
    if t == "DROP_RANGE":
        return f"{'DETACH' if e.detach else 'DROP'}_RANGE {e.new_part_name}{src}"
    if t in ("CLEAR_COLUMN", "CLEAR_INDEX"):
        return f"{t} {e.column_name} in {e.new_part_name}{src}"
    if t == "REPLACE_RANGE":
        return f"{t} {e.replace.drop_range_name} with {', '.join(e.replace.new_parts)}{src}"
    return f"{t} version {e.alter_version}{src}"


@dataclass
class Replica:
    log_pointer: int
    is_lost: str
    queue: list[str]
    parts: list[str]


@dataclass
class Tree:
    log: list[str]                     # the entries still in log/, described
    log_numbers: list[int]             # their sequence numbers (trimming removes a prefix)
    blocks: list[str]                  # "<partition prefix of the id> -> <part it names>", sorted
    block_numbers: dict[str, list[str]]  # partition -> lock nodes held now
    mutations: list[str]               # "<commands> @ partition=number,...", in creation order
    replicas: dict[str, Replica] = field(default_factory=dict)
    raw_log: list[str] = field(default_factory=list)   # verbatim text, for the table's examples


def _children(k: Keeper, path: str) -> list[str]:
    try:
        return sorted(k.get_children(path))
    except NoNodeError:
        return []


def _read_children(k: Keeper, path: str) -> list[tuple[str, bytes]]:
    """(name, value) of each child still there when it is read: a live server's cleanup thread
    trims the log, the blocks and the queues between the listing and the read."""
    out = []
    for n in _children(k, path):
        try:
            out.append((n, k.get(f"{path}/{n}")[0]))
        except NoNodeError:
            pass
    return out


def read_tree(k: Keeper, root: str) -> Tree:
    log = _read_children(k, f"{root}/log")
    log_names, raw = [n for n, _ in log], [t for _, t in log]
    entries = [LogEntry.parse(t, f"{root}/log/{n}") for n, t in log]
    blocks = [f"{n.split('_', 1)[0]} -> {v.decode()}" for n, v in _read_children(k, f"{root}/blocks")]
    mutations = []
    for n, v in _read_children(k, f"{root}/mutations"):
        m = MutationEntry.parse(v, f"{root}/mutations/{n}")
        mutations.append(f"{normalise_sql(m.commands)} @ {','.join(f'{p}={b}' for p, b in m.block_numbers)}")
    replicas = {}
    for r in _children(k, f"{root}/replicas"):
        base = f"{root}/replicas/{r}"
        queue = sorted(describe(LogEntry.parse(v)) for _, v in _read_children(k, f"{base}/queue"))
        try:
            lost = k.get(f"{base}/is_lost")[0].decode()
        except NoNodeError:
            lost = ""
        replicas[r] = Replica(int(k.get(f"{base}/log_pointer")[0] or 0), lost, queue, _children(k, f"{base}/parts"))
    return Tree([describe(e) for e in entries], [int(n.rsplit("-", 1)[1]) for n in log_names], sorted(blocks),
                {p: _children(k, f"{root}/block_numbers/{p}") for p in _children(k, f"{root}/block_numbers")},
                mutations, replicas, [t.decode() for t in raw])


def normalise_sql(commands: str) -> str:
    """ClickHouse prints the commands back from its AST (quoting, spacing); compare their words."""
    return " ".join(commands.replace("\\'", "'").replace("`", "").split())
