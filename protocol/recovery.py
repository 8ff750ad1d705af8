"""A lost replica comes back (cloneReplicaIfNeeded), as spec/rfc/SelectiveReplication.tla's
CloneLostReplica, part of ReplicaRestart.

ClickHouse's cloneReplica mimics one source that is not lost: its log_pointer, its queue, a
GET_PART of every active part it has; a local part the source neither has nor has a GET_PART
queued for leaves the table (into detached/). Under selective replication that fails twice
(spec/FINDINGS.md F14, F15), so the fixed clone takes one source per partition the replica keeps,
and keeps a local part that the source's queue or the log beyond the source's log_pointer will
still make. Switches: `clone_lost_replica_from_one_peer` (F14, cloneReplica as is) and
`clone_keeps_only_what_the_source_has` (F15, a source per partition, ClickHouse's keep rule).
"""

from __future__ import annotations

from protocol.assignment import GuardFailed, read_assignment
from protocol.keeper import NoNodeError, SetData
from protocol.log_entry import ALTER_METADATA, GET_PART, LogEntry
from protocol.parts import PartName, active_set
from protocol.replica import Replica, _children, log_number as entry_number


def is_lost(rep: Replica) -> bool:
    try:
        return rep.keeper.get(rep.layout.is_lost(rep.name))[0] == b"1"
    except NoNodeError:
        return False


def _registered(rep: Replica, s: str, partition: str | None = None) -> list[PartName]:
    names = [PartName.parse(n) for n in _children(rep.keeper, rep.layout.parts(s))]
    return active_set(n for n in names if partition is None or n.partition == partition)


def _queue(rep: Replica, s: str) -> list[tuple[bytes, LogEntry]]:
    q = rep.layout.queue(s)
    out = []
    for n in _children(rep.keeper, q):
        try:
            data = rep.keeper.get(f"{q}/{n}")[0]
        except NoNodeError:
            continue   # executed meanwhile: its part is among the source's parts now
        out.append((data, LogEntry.parse(data, f"{q}/{n}")))
    return out


def _ptr(rep: Replica, s: str) -> int:
    return int(rep.keeper.get(rep.layout.log_pointer(s))[0])


def source_parts(rep: Replica, s: str, partition: str, with_log: bool) -> list[PartName]:
    """What the source has or will have of a partition: its active parts and the parts its queued
    GET_PARTs bring (ClickHouse's rule); with_log, also what every part-making entry of its queue
    and of the log beyond its log_pointer will make (the fix, as PR #58132's clonePartition reads them)."""
    made = [PartName.parse(n) for _, e in _queue(rep, s) if e.partition == partition
            and (e.type == GET_PART or with_log) for n in e.made_parts()]
    if with_log:
        start = _ptr(rep, s)
        for name in rep.keeper.get_children(rep.layout.log):
            if entry_number(name) >= start:
                e = LogEntry.parse(rep.keeper.get(f"{rep.layout.log}/{name}")[0])
                if e.partition == partition:
                    made += [PartName.parse(n) for n in e.made_parts()]
    return _registered(rep, s, partition) + made


def choose_sources(rep: Replica, kept: list[str]) -> tuple[dict[str, str], str]:
    """Per kept partition, the owner that is not lost with the least replication lag (log entries
    not pulled plus queue size, as cloneReplicaIfNeeded picks); and the log_pointer source, the one
    of them furthest behind. Refused while a partition has no such owner ("All replicas are lost").
    An owner, not any keeper (F33): a CLONE target that has not fetched yet keeps the partition and
    holds nothing of it, queued or on disk, and is often the least lagging (it pulled the log just
    now); cloned from, it would leave the lost owner with nothing. clone_lost_replica_from_any_keeper
    takes any keeper, as this function first did."""
    k, lay = rep.keeper, rep.layout
    head = max((entry_number(n) + 1 for n in k.get_children(lay.log)), default=0)
    candidates = [r for r in k.get_children(lay.replicas) if r != rep.name and k.get(lay.is_lost(r))[0] != b"1"]
    if not candidates:
        raise GuardFailed("ReplicaRestart", f"{rep.name} is lost and so is every other replica")
    lag = {r: head - _ptr(rep, r) + len(_children(k, lay.queue(r))) for r in candidates}
    src = {}
    for p in kept:
        a = read_assignment(k, lay, p)
        may = a.keepers() if "clone_lost_replica_from_any_keeper" in rep.bugs else a.owners
        ok = sorted((r for r in candidates if r in may), key=lambda r: (lag[r], r))
        if not ok:
            raise GuardFailed("ReplicaRestart", f"{rep.name} is lost and no owner of {p} that is not lost is left")
        src[p] = ok[0]
    pool = sorted(set(src.values())) or sorted(candidates, key=lambda r: (lag[r], r))[:1]
    g = min(pool, key=lambda r: (_ptr(rep, r), r))
    return src, g


def replica_clone_if_lost(rep: Replica, sources: tuple[dict[str, str], str] | None = None) -> str:
    """Clone if is_lost is "1"; returns what was done. `sources` forces one of the choices the
    spec allows (per partition source, log_pointer source), as the replay asks."""
    if not is_lost(rep):
        return "not lost"
    k, lay = rep.keeper, rep.layout
    kept = [p for p in k.get_children(lay.assignments)
            if (a := read_assignment(k, lay, p)) is not None and rep.name in a.keepers()]
    if "clone_lost_replica_from_one_peer" in rep.bugs:
        _, g = sources or choose_sources(rep, [])
        src = {p: g for p in {n.partition for n in rep.store.names()} | set(kept)}
        with_log, whole_queue = False, True
    else:
        src, g = sources or choose_sources(rep, kept)
        with_log, whole_queue = "clone_keeps_only_what_the_source_has" not in rep.bugs, False
    # The new queue: the log_pointer source's global entries, each partition's entries and parts
    # from its source (every entry and every part of the one source, as cloneReplica as is).
    texts: list[bytes] = []
    for data, e in _queue(rep, g):
        if e.type == ALTER_METADATA or whole_queue:
            texts.append(data)
    for p, s in sorted(src.items()):
        if not whole_queue:
            texts += [data for data, e in _queue(rep, s) if e.partition == p]
    fetch = _registered(rep, g) if whole_queue else [n for p, s in sorted(src.items()) for n in _registered(rep, s, p)]
    texts += [LogEntry(GET_PART, new_part_name=str(n), create_time=int(rep.clock())).format() for n in fetch]
    # Local parts: kept where the source has, or will make, a part covering them.
    keep = {p: source_parts(rep, s, p, with_log) for p, s in src.items()}
    for n in rep.store.names():
        if not any(y.covers(n) for y in keep.get(n.partition, ())):
            rep.store.remove(n)
    rep._unregister_all(lambda n: not any(y.covers(n) for y in keep.get(n.partition, ())))
    q = lay.queue(rep.name)
    for n in _children(k, q):
        k.delete(f"{q}/{n}")
    seen = set()
    for data in texts:
        if data not in seen:
            seen.add(data)
            k.create(f"{q}/queue-", data, sequential=True)
    # Metadata and drop points, from the sources' state (read over the interserver port).
    g_state = rep.peers[g].load_state() if g in rep.peers else {}
    # A source that never saved its state applied no ALTER: version 0, not the lost replica's own
    # (kept with the source's log_pointer, before an ALTER it had applied, the re-pulled ALTER
    # would count twice: GlobalEntriesAppliedInv, found by the conformance walks).
    rep.metadata_version = g_state.get("metadata_version", 0)
    for p, s in src.items():
        state = g_state if whole_queue else (rep.peers[s].load_state() if s in rep.peers else {})
        if p in state.get("dropped", {}):
            rep.dropped[p] = state["dropped"][p]
    rep._save_state()
    k.multi([SetData(lay.log_pointer(rep.name), str(_ptr(rep, g)).encode()), SetData(lay.is_lost(rep.name), b"0")])
    rep.read_pointer_again(lost=False)
    return f"cloned from {g}" + "".join(f", {p} from {s}" for p, s in sorted(src.items()))
