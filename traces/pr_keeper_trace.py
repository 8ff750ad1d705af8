"""What a run of PR #102244's design wrote into Keeper, as the events of
spec/pr102244/TracePR102244.tla (issue 36: a reference trace of each design).

The RFC design's abstraction is traces/keeper_trace.py; this is the PR's, over the znodes the PR
adds (its layout: protocol/pr102244/layout.py) and the base protocol's it uses. A run of this
design (`python -m reference run --design pr102244`) inserts, pulls, fetches, migrates and drops
what is not assigned; it does not merge, mutate, trim or clone lost replicas, so a write of those
kinds is an ``unmapped`` event here, which no action explains.

Identities the spec (spec/pr102244/PR102244Whole.tla) needs and Keeper gives:
- a block is its dedup id (the GET_PART's ``block_id``), numbered in the order of first commit;
  a part of this design is one block (nothing merges), so a part name maps to the block whose
  GET_PART committed it;
- a log entry is its index in creation order (1, 2, ...): ``log_pointer`` counts entries, so a
  pointer at N has pulled the entries with suffixes below N;
- a migration is its ``/migrations/<uuid>`` node, numbered in creation order (the spec's MigIds
  are numbers taken in order);
- an assignment's version is the znode's version plus one: the spec counts the creation as a
  change (EnsurePartitionAssignment: aver 0 -> 1) where ZooKeeper starts a node at version 0.
A replica is named by the path it writes under and, for what its session's end does, by the
session that created its ``is_active``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Iterable

from harness.zk_txnlog import Txn
from protocol.log_entry import GET_PART, BadLogEntry, LogEntry
from protocol.parts import BadPart, PartName
from protocol.pr102244.assignment import CLONING
from traces.keeper_trace import TraceError, net_ops, relative_path, tla_string

# Which write is which spec step: the trace spec's event, the core action that takes it, and the
# record(s) that show it.
ABSTRACTION = {
    "insert": "WriteInsert: the multi that creates log/log-N (a GET_PART with a block_id), blocks/<id> and "
              "replicas/<r>/parts/<part>; a forwarded block is committed the same way by the owner it reached",
    "allocate": "EnsurePartitionAssignment: selective/assignments/<p> created with its owners and the counts "
                "of those owners raised in the same multi, by the session of the replica the INSERT reached; the "
                "candidates are the replicas with an is_active node then",
    "map": "the cache of r took Keeper's assignment of p: replicas/<r>/maps/<p> written (the PR design's "
           "published cache; a write of the version it held is no change)",
    "pull": "Pull, once per entry: replicas/<r>/log_pointer moved past it; take when the same multi created a "
            "queue entry for it (the filter kept it)",
    "execute": "Fetch: replicas/<r>/parts/<part> created outside an INSERT, its queue entry removed",
    "execute_done": "a queue entry removed with no part made: the entry of a part r holds already (its own "
                    "INSERT's), which the spec never queued",
    "clone": "StartClone (SYSTEM MIGRATE PARTITION or a rebalancer's move): migrations/<uuid> created in state "
             "clone with its snapshot, the target appended :cloning to the assignment",
    "write_entries": "WriteCloneEntries: log/log-N GET_PARTs without a block_id, one per snapshot part, in "
                     "one multi with the migration marked written",
    "rescan": "Rescan: the target's queue entries of the partition's registered parts it lacks, in one multi "
              "with the migration marked rescanned",
    "complete": "SignalComplete: migrations/<uuid>/clone_complete created",
    "switch": "Switch: the migration set to switch with the assignment and the counts",
    "done": "Done: migrations/<uuid> (and clone_complete) removed after its switch",
    "fail": "Fail: migrations/<uuid> removed in clone, the :cloning entry out of the assignment in the same multi",
    "take_over": "TakeOver: migrations/<uuid>'s coordinator changed, by the replica taking over",
    "drop": "DropUnassigned: replicas/<r>/parts/<part> of p removed one by one, then r's queue entries of p, "
            "by r's session with nothing of r's in between",
    "crash": "the session that created replicas/<r>/is_active closed: CoordinatorCrash when it coordinated, "
             "else no step (the core takes no replica down; a replica that is down takes no steps)",
}

# The events of a migration's steps.
MIGRATION_STEPS = frozenset({"clone", "write_entries", "rescan", "complete", "switch", "done", "fail", "take_over"})

# Nodes whose writes are no step, and why.
IGNORED = {
    "block_numbers": "a block number taken: the spec numbers an entry by its index in the log",
    "blocks": "the dedup node, written in the INSERT's multi (a refused retry writes nothing)",
    "temp": "abandonable locks",
    "columns": "table structure", "metadata": "table structure",
    "selective/config": "the replication factor, read once",
    "selective/counts": "written with an assignment (allocate, switch), or a replica's 0 when it registers",
}


@dataclass(frozen=True)
class PREvent:
    """One spec step. ``bs`` is a sequence of blocks: a snapshot, the entries written, the queue
    entries a rescan made, the parts a drop removed."""
    a: str
    r: str = "none"
    b: int = 0
    k: int = 0
    p: str = "none"
    m: int = 0
    take: bool = False
    owners: frozenset = frozenset()
    cloning: frozenset = frozenset()
    ver: int = 0
    bs: tuple = ()
    s: str = "none"
    t: str = "none"
    act: frozenset = frozenset()
    zxid: int = 0
    session: int = 0
    why: str = ""


@dataclass
class PRTrace:
    events: list[PREvent]
    replicas: list[str]
    partitions: list[str]
    block_partition: dict[int, str]   # block -> its partition
    block_ids: dict[int, str]         # block -> its dedup id
    migrations: dict[int, str]        # migration number -> its uuid
    replication_factor: int


@dataclass
class _State:
    root: str
    log_index: dict[int, int] = field(default_factory=dict)     # log-N suffix -> spec index
    log_block: dict[int, int] = field(default_factory=dict)     # spec index -> block
    entry_part: dict[int, str] = field(default_factory=dict)    # spec index -> the part its GET_PART names
    block_of_id: dict[str, int] = field(default_factory=dict)   # block_id -> block
    block_of_part: dict[str, int] = field(default_factory=dict)  # part name -> block
    partition_of: dict[int, str] = field(default_factory=dict)  # block -> partition
    pointer: dict[str, int] = field(default_factory=dict)       # replica -> log_pointer (entries pulled)
    queue: dict[str, dict[str, int]] = field(default_factory=dict)  # replica -> queue node -> block
    session_of: dict[int, str] = field(default_factory=dict)    # session -> replica
    active: set[str] = field(default_factory=set)
    mig_number: dict[str, int] = field(default_factory=dict)    # uuid -> number
    mig: dict[str, dict] = field(default_factory=dict)          # uuid -> its node's JSON
    rf: int | None = None
    events: list[PREvent] = field(default_factory=list)


def _block(st: _State, part: str) -> int | None:
    return st.block_of_part.get(part)


def _assignment(data: bytes) -> tuple[frozenset, frozenset]:
    items = [i for i in data.decode().split(",") if i]
    return (frozenset(i for i in items if not i.endswith(CLONING)),
            frozenset(i.removesuffix(CLONING) for i in items if i.endswith(CLONING)))


def read_pr_trace(txns: Iterable[Txn], root: str, replicas: Iterable[str]) -> PRTrace:
    """The events of the PR design's table at ``root`` written by its ``replicas``, from a
    transaction log that starts before the table's first INSERT."""
    st = _State(root=root.rstrip("/"))
    names = sorted(replicas)
    st.queue = {r: {} for r in names}
    st.pointer = {r: 0 for r in names}
    events = st.events
    seen = False

    def emit(t: Txn, e: PREvent) -> None:
        events.append(replace(e, zxid=t.zxid, session=t.session))

    def unmapped(t: Txn, what: str) -> None:
        emit(t, PREvent("unmapped", why=f"zxid {t.zxid:#x}: {what}"))

    for t in txns:
        if t.type == "closeSession" and t.session in st.session_of:
            r = st.session_of.pop(t.session)
            if r in st.active:
                st.active.discard(r)
                emit(t, PREvent("crash", r=r, why=f"{r}'s session closed"))
            continue
        if not t.is_write or t.failed:
            continue   # a refused write changed nothing (a version check that failed among them)
        ops = [(op, rel) for op in net_ops(t.ops) if (rel := relative_path(st.root, op.path)) is not None]
        if not ops:
            continue
        seen = True
        _record(st, t, ops, emit, unmapped)
    if not seen:
        raise TraceError(f"the transaction log holds no write under {root}")
    numbers = {n: u for u, n in st.mig_number.items()}
    return PRTrace(events=events, replicas=names, partitions=sorted(set(st.partition_of.values())),
                   block_partition=dict(st.partition_of), block_ids={b: i for i, b in st.block_of_id.items()},
                   migrations=numbers, replication_factor=st.rf or len(names))


def _writer(st: _State, t: Txn, ops) -> str:
    for _op, rel in ops:
        if rel[:1] == ["replicas"] and len(rel) >= 2:
            return rel[1]
    return st.session_of.get(t.session, "none")


def _creates(ops, *prefix: str) -> list:
    return [(op, rel) for op, rel in ops if op.type in ("create", "create2") and rel[:len(prefix)] == list(prefix)]


def _record(st: _State, t: Txn, ops, emit, unmapped) -> None:
    """One write record: the event(s) it is, in the order ABSTRACTION lists the shapes."""
    logs = [(op, rel) for op, rel in _creates(ops, "log") if len(rel) == 2]
    migs = [(op, rel) for op, rel in ops if rel[:2] == ["selective", "migrations"] and len(rel) >= 3]
    if logs:
        _log_entries(st, t, ops, logs, migs, emit, unmapped)
        return
    if migs:
        _migration(st, t, ops, migs, emit, unmapped)
        return
    created = [rel for op, rel in _creates(ops, "selective", "assignments") if len(rel) == 3]
    if created:
        op = next(op for op, rel in ops if rel == created[0])
        owners, cloning = _assignment(op.data or b"")
        emit(t, PREvent("allocate", r=st.session_of.get(t.session, "none"), p=created[0][2], owners=owners,
                        act=frozenset(st.active), why=f"assignment of {created[0][2]} created: {sorted(owners)}"))
        return
    for op, rel in ops:
        _replica_write(st, t, op, rel, ops, emit, unmapped)


def _log_entries(st: _State, t: Txn, ops, logs, migs, emit, unmapped) -> None:
    entries = []
    for op, rel in logs:
        try:
            e = LogEntry.parse(op.data or b"", op.path)
        except (BadLogEntry, BadPart) as err:
            unmapped(t, f"a log entry that does not parse ({err})")
            return
        if e.type != GET_PART:
            unmapped(t, f"log entry {e.type}: this design's runs write GET_PARTs only")
            return
        k = len(st.log_index) + 1
        st.log_index[int(rel[1].removeprefix("log-"))] = k
        st.entry_part[k] = e.new_part_name
        entries.append((k, e))
    if migs:   # WriteCloneEntries: GET_PARTs of snapshot parts, the migration marked written
        uid = migs[0][1][2]
        blocks = []
        for k, e in entries:
            b = _block(st, e.new_part_name)
            if b is None:
                unmapped(t, f"a clone GET_PART of {e.new_part_name}, a part no INSERT committed")
                return
            st.log_block[k] = b
            blocks.append(b)
        for op, rel in migs:
            if op.type == "setData" and len(rel) == 3:
                st.mig[uid] = json.loads(op.data)
        emit(t, PREvent("write_entries", r=st.session_of.get(t.session, "none"), m=st.mig_number.get(uid, 0),
                        bs=tuple(blocks), k=entries[0][0],
                        why=f"{len(blocks)} GET_PARTs of migration {uid[:8]}'s snapshot"))
        return
    if len(entries) != 1 or not entries[0][1].block_id:
        unmapped(t, f"{len(entries)} log entries in one multi with no migration: not an INSERT's commit")
        return
    k, e = entries[0]
    r = _writer(st, t, ops)
    own = [rel for _op, rel in _creates(ops, "replicas", r, "parts") if len(rel) == 4 and rel[3] == e.new_part_name]
    if not own:
        unmapped(t, f"GET_PART {e.new_part_name} without its writer's part node")
        return
    # the same block id committed again is the same block: WriteInsert refuses it (the dedup failed)
    b = st.block_of_id.setdefault(e.block_id, len(st.block_of_id) + 1)
    pn = PartName.parse(e.new_part_name)
    st.block_of_part[e.new_part_name] = b
    st.partition_of[b] = pn.partition
    st.log_block[k] = b
    emit(t, PREvent("insert", r=r, b=b, k=k, p=pn.partition, why=f"INSERT {e.block_id} -> {e.new_part_name}"))


def _migration(st: _State, t: Txn, ops, migs, emit, unmapped) -> None:
    uid = migs[0][1][2]
    node = [(op, rel) for op, rel in migs if len(rel) == 3]
    who = st.session_of.get(t.session, "none")
    if any(len(rel) == 4 and rel[3] == "clone_complete" and op.type in ("create", "create2") for op, rel in migs):
        emit(t, PREvent("complete", r=who, m=st.mig_number.get(uid, 0), why=f"migration {uid[:8]}: clone_complete"))
        return
    if node and node[0][0].type in ("create", "create2"):
        mig = json.loads(node[0][0].data)
        if mig.get("add"):
            unmapped(t, f"migration {uid[:8]} adds a replica (the rebalancer's repair): PR102244Whole has none")
            return
        st.mig_number[uid] = len(st.mig_number) + 1
        st.mig[uid] = mig
        snap = []
        for part in mig["source_parts_snapshot"]:
            if _block(st, part) is None:
                unmapped(t, f"migration {uid[:8]}'s snapshot lists {part}, a part no INSERT committed")
                return
            snap.append(_block(st, part))
        emit(t, PREvent("clone", r=who, m=st.mig_number[uid], p=mig["partition"], s=mig["source"],
                        t=mig["target"], bs=tuple(snap),
                        why=f"CLONE {mig['partition']}: {mig['source']} -> {mig['target']} (migration {uid[:8]})"))
        return
    if node and node[0][0].type == "delete":
        before = st.mig.pop(uid, {})
        what = "done" if before.get("state") == "switch" else "fail"
        emit(t, PREvent(what, r=who, m=st.mig_number.get(uid, 0),
                        why=f"migration {uid[:8]} of {before.get('partition')} removed in {before.get('state')}"))
        return
    if not node or node[0][0].type != "setData":
        unmapped(t, f"a write under migrations/{uid} of no step")
        return
    before, after = st.mig.get(uid, {}), json.loads(node[0][0].data)
    st.mig[uid] = after
    m = st.mig_number.get(uid, 0)
    queued = _creates(ops, "replicas")
    if after["state"] == "switch" and before.get("state") == "clone":
        emit(t, PREvent("switch", r=who, m=m,
                        why=f"SWITCH {after['partition']}: {after['source']} -> {after['target']}"))
    elif after["coordinator"] != before.get("coordinator"):
        emit(t, PREvent("take_over", r=who, m=m, why=f"{who} takes over migration {uid[:8]}"))
    elif after["rescanned"] and not before.get("rescanned"):
        r = after["target"]
        blocks = []
        for op, rel in queued:
            e = LogEntry.parse(op.data or b"", op.path)
            b = _block(st, e.new_part_name)
            if b is None:
                unmapped(t, f"a rescan queued {e.new_part_name}, a part no INSERT committed")
                return
            st.queue.setdefault(r, {})[rel[3]] = b
            blocks.append(b)
        emit(t, PREvent("rescan", r=who, m=m, bs=tuple(blocks), why=f"{r} rescans {after['partition']}: "
                                                                      f"{len(blocks)} parts queued"))
    else:
        unmapped(t, f"migration {uid[:8]} written from {before.get('state')} to {after['state']} with no step")


def _replica_write(st: _State, t: Txn, op, rel, ops, emit, unmapped) -> None:
    head = "/".join(rel[:2])
    if head == "selective/config" and op.data:
        st.rf = json.loads(op.data).get("replication_factor")
    if op.type == "check" or not rel or rel[0] in IGNORED or head in IGNORED or len(rel) <= 2 and rel[0] != "replicas":
        return   # a version check (an INSERT's CAS), the table's folders, or a node IGNORED says is no step
    if rel[0] != "replicas" or len(rel) < 3:
        if rel[:2] == ["selective", "assignments"]:
            unmapped(t, f"the assignment of {rel[2]} written outside a migration step")
        elif rel[0] != "replicas":
            unmapped(t, f"{op.type} {'/'.join(rel)}")
        return
    r, what = rel[1], rel[2]
    if what == "is_active" and op.type in ("create", "create2"):
        st.session_of[t.session] = r
        st.active.add(r)
        return
    if what == "maps" and len(rel) == 4 and op.type in ("create", "create2", "setData"):
        version, _, text = (op.data or b"").partition(b" ")
        owners, cloning = _assignment(text)
        emit(t, PREvent("map", r=r, p=rel[3], owners=owners, cloning=cloning, ver=int(version) + 1,
                        why=f"{r} caches {rel[3]} at version {int(version)}: {text.decode()}"))
        return
    if what == "log_pointer" and op.type == "setData":
        _pulled(st, t, r, int(op.data), ops, emit, unmapped)
        return
    if what == "parts" and len(rel) == 4:
        b = _block(st, rel[3])
        if op.type in ("create", "create2"):
            gone = [(o, x) for o, x in ops if o.type == "delete" and x[:3] == ["replicas", r, "queue"]]
            if b is None or len(gone) != 1 or st.queue.get(r, {}).pop(gone[0][1][3], None) != b:
                unmapped(t, f"{r} registered {rel[3]} with no queue entry of it executed")
                return
            emit(t, PREvent("execute", r=r, b=b, p=st.partition_of[b], why=f"{r} fetched {rel[3]}"))
        elif op.type == "delete":
            _dropped(st, t, r, b, rel[3], emit, unmapped)
        return
    if what == "queue" and len(rel) == 4:
        if op.type == "delete" and any(x[:3] == ["replicas", r, "parts"] for _o, x in ops):
            return   # taken with the fetch that registered its part
        if op.type == "delete":
            b = st.queue.get(r, {}).pop(rel[3], None)
            last = st.events[-1] if st.events else None
            if b is not None and last is not None and last.a == "drop" and last.r == r \
                    and last.p == st.partition_of[b] and last.session == t.session:
                return   # DropUnassigned's queue entries, after its parts
            emit(t, PREvent("execute_done", r=r, b=b or 0, p=st.partition_of.get(b, "none"),
                            why=f"{r} removed queue entry {rel[3]} with no part"))
        elif op.type in ("create", "create2") and not any(x == ["replicas", r, "log_pointer"] for _o, x in ops):
            unmapped(t, f"{r} queued {rel[3]} outside a pull or a rescan")
        return
    # the rest of replicas/<r>/: its subtree's creation, host, flags, is_lost, the maps folder


def _pulled(st: _State, t: Txn, r: str, pointer: int, ops, emit, unmapped) -> None:
    """log_pointer moved to ``pointer`` (entries pulled): one pull per entry passed, each taken
    when this multi created a queue entry for it (matched in log order by the part it names)."""
    created = []
    for op, rel in _creates(ops, "replicas", r, "queue"):
        created.append((rel[3], LogEntry.parse(op.data or b"", op.path).new_part_name))
    suffixes = {k: s for s, k in st.log_index.items()}
    for k in range(st.pointer.get(r, 0) + 1, pointer + 1):
        if k not in st.log_block:
            unmapped(t, f"{r}'s log_pointer passed entry {k}, which is not in the log")
            return
        b = st.log_block[k]
        take = bool(created) and created[0][1] == st.entry_part[k]
        if take:
            st.queue.setdefault(r, {})[created.pop(0)[0]] = b
        emit(t, PREvent("pull", r=r, k=k, b=b, p=st.partition_of[b], take=take,
                        why=f"{r} pulled log-{suffixes[k]:010d}" + (" into its queue" if take else ", skipped")))
    if created:
        unmapped(t, f"{r} queued {', '.join(n for n, _ in created)} for no entry its pointer passed")
    st.pointer[r] = pointer


def _dropped(st: _State, t: Txn, r: str, b: int | None, name: str, emit, unmapped) -> None:
    """A part node of r removed: one more part of the DropUnassigned this session is running on
    the partition, or its first."""
    if b is None:
        unmapped(t, f"{r} removed {name}, a part no INSERT committed")
        return
    p = st.partition_of[b]
    last = st.events[-1] if st.events else None
    if last is not None and last.a == "drop" and last.r == r and last.p == p and last.session == t.session:
        st.events[-1] = replace(last, bs=last.bs + (b,), why=f"{r} dropped {len(last.bs) + 1} parts of {p}")
        return
    emit(t, PREvent("drop", r=r, p=p, bs=(b,), why=f"{r} dropped 1 part of {p}"))


# --- the trace as a TLA+ module --------------------------------------------------------------

def _set(xs) -> str:
    return "{" + ", ".join(tla_string(x) if isinstance(x, str) else str(x) for x in sorted(xs)) + "}"


def tla_module(trace: PRTrace, name: str) -> str:
    """The trace as a module of definitions the trace cfg substitutes for the spec's constants."""
    bp = " @@ ".join(f"{b} :> {tla_string(p)}" for b, p in sorted(trace.block_partition.items())) or "<<>>"
    lines = [f"---- MODULE {name} ----", "EXTENDS TracePR102244",
             f"TrReplicas == {_set(trace.replicas)}", f"TrPartitions == {_set(trace.partitions)}",
             f"TrBlocks == 1..{len(trace.block_partition)}", f"TrMigIds == 1..{len(trace.migrations)}",
             f"TrPartitionOf(b) == ({bp})[b]",
             "TrInitOwners == [p \\in TrPartitions |-> {}]",
             "TrTrace == <<"]
    for n, e in enumerate(trace.events):
        sep = "," if n + 1 < len(trace.events) else ""
        lines.append(f"  [a |-> {tla_string(e.a)}, r |-> {tla_string(e.r)}, b |-> {e.b}, k |-> {e.k}, "
                     f"p |-> {tla_string(e.p)}, m |-> {e.m}, take |-> {'TRUE' if e.take else 'FALSE'}, "
                     f"owners |-> {_set(e.owners)}, cloning |-> {_set(e.cloning)}, ver |-> {e.ver}, "
                     f"bs |-> <<{', '.join(str(b) for b in e.bs)}>>, s |-> {tla_string(e.s)}, t |-> {tla_string(e.t)}, "
                     f"act |-> {_set(e.act)}]{sep}  \\* {n + 1}: {e.why}")
    lines += ["  >>", "===="]
    return "\n".join(lines) + "\n"
