"""What a run wrote into Keeper, as the events of spec/rfc/TraceSelectiveReplication.tla (issue 36).

The trace comes from ZooKeeper's transaction log (harness/zk_txnlog.py), not from the system's own
reports, so the same reading serves a real ClickHouse server and the reference: both write a
table's znodes in ClickHouse's layout and its log entries in ClickHouse's text. This module is
the one place that says which write is which spec step (``ABSTRACTION`` lists it), and every
write under the table that it neither maps nor ignores for a stated reason becomes an
``unmapped`` event, which no action explains: the trace is then rejected there, by name.

Identities the spec needs and Keeper gives:
- an INSERT is its dedup id (the GET_PART entry's ``block_id``, the ``blocks/`` node): the same id
  committed again is the same INSERT retried (the spec's insert ids are these, numbered in order
  of first commit);
- a log entry is its index in the order the ``log/log-N`` nodes were created (1, 2, ...), the
  spec's log index; the sequential suffix N is ClickHouse's and only maps to it;
- a part is the set of INSERTs whose blocks its range covers, each with its entry's log index,
  and its mutation version (the spec's [p, b, mv]); a block number is known from the GET_PART
  that committed it.
A replica is named by the path it writes under (``replicas/<r>/``) and, for what a session's end
does (its ephemeral ``is_active`` goes with it), by the session that created its ``is_active``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Iterable

from harness.zk_txnlog import Txn
from protocol.log_entry import ALTER_METADATA, DROP_RANGE, GET_PART, MERGE_PARTS, MUTATE_PART, BadLogEntry, LogEntry
from protocol.mutations import BadMutation, MutationEntry
from protocol.parts import BadPart, PartName

NO_PART = None   # rendered as the spec's NoPart

# Which write is which spec step: the trace spec's action, and the record(s) that show it.
ABSTRACTION = {
    "insert": "ReplicaWriteInsert: the multi that creates log/log-N (GET_PART) and replicas/<r>/parts/<part>",
    "pull": "ReplicaPullLog, once per entry: replicas/<r>/log_pointer set past it; take when the same "
            "multi creates a queue entry with its text",
    "execute": "ReplicaExecuteEntry: replicas/<r>/parts/<part> created outside an INSERT (the queue entry "
               "whose part it is, or covers; a part r holds inside a bigger one already: no part made; "
               "an entry a DROP_RANGE took out while its fetch ran: that removal), or a queue entry "
               "removed that made no part; FetchOutdatedEvent when the part is one its source replaced",
    "merge": "ReplicaSelectMerge: log/log-N created with MERGE_PARTS",
    "drop": "ClientDropPartition: log/log-N created with DROP_RANGE, with the partition's blocks/ hashes "
            "the dropping session removed since the partition's last commit",
    "mutation": "ClientMutate: mutations/N created (ALTER UPDATE/DELETE)",
    "alter": "ClientAlterMetadata: log/log-N created with ALTER_METADATA (a global entry every replica applies; "
             "its columns/ version bump is no step)",
    "mutate": "ReplicaSelectMutation: log/log-N created with MUTATE_PART",
    "trim": "CleanupClearOldLogs: log/log-N removed by one multi (up to the last), with the replicas "
            "replicas/<r>/is_lost was set to 1 for just before",
    "forget": "CleanupClearOldBlocks: blocks/<hash> removed",
    "clone": "a lost replica's restart and cloneReplica (the trace spec's CloneEvent: 18.16's clone, or the "
             "core's CloneLostReplica, the reference's): from its is_active's creation to is_lost set to 0, its "
             "log_pointer, the queue entries it copied (log indexes) or made up (GET_PARTs), those of its own it "
             "removed, and the parts it still has registered then; its map writes meanwhile are that step",
    "allocate": "ReplicaAllocate: selective/assignments/<p> created (its owners), by the replica whose session it is",
    "map": "ReplicaRefreshCache: replicas/<r>/maps/<p> written with the version r's map now holds (a write "
           "of the version it held already is no step)",
    # A migration's steps: each writes selective/migrations/<p> (its state as JSON) with the
    # assignment in one multi; the step is told by the state it moves from and to.
    "reassign": "AdminReassign (or AdminRebalance, whose moves are the same writes): migrations/<p> in state "
                "clone with a source, the assignment's target set",
    "repair": "RepairStart: migrations/<p> in state clone with no source, the target set (its coordinator, an owner)",
    "fetch": "ReplicaCloneFetch: migrations/<p> marked fetched with its catch-up position, by the target, with "
             "the queue entries it created just before outside a pull (GET_PARTs it made up; MUTATE_PART and "
             "DROP_RANGE entries of the log it re-queued)",
    "take_over": "ReplicaTakeOverMigration: migrations/<p>'s coordinator changed, by the replica taking over",
    "switch": "CoordinatorSwitch: migrations/<p> from clone to switched (a repair: done), the target now an owner",
    "cancel": "CoordinatorCancel: migrations/<p> from clone to cancelling, the target leaving",
    "cleanup": "ReplicaCleanup: migrations/<p> from switched to done (cancelling to cancelled) by the leaver's "
               "session, leaving cleared; the leaver's removal of its queue entries of <p> after it is that step",
    "cleanup_down": "ReplicaCleanupForDownLeaver: the same write by another replica's session while the leaver is down",
    "drop_replica": "DropReplica: a replica that is down taken out of every assignment (and migration) by a "
                    "session of no replica (SYSTEM DROP REPLICA), then replicas/<r> removed: the first such "
                    "write is the step, the rest of it no step",
    "crash": "ReplicaCrash: the session that created replicas/<r>/is_active closed or expired",
    "restart": "ReplicaRestart: replicas/<r>/is_active created again by a new session",
}

# The events of a migration's steps (and of SYSTEM DROP REPLICA, which ends or turns migrations)
MIGRATION_STEPS = frozenset({"reassign", "repair", "fetch", "take_over", "switch", "cancel", "cleanup",
                             "cleanup_down", "drop_replica"})

# Nodes of the table whose writes are no spec step, and why (read by _other: a write under one of
# these is skipped). Under replicas/<r>/, what is not a pointer, a queue entry, a part node, a map
# version, is_active or is_lost is skipped too: the replica's host, flags, placement, the
# insert-time and mutation pointers it keeps for system tables, and its subtree's creation.
IGNORED = {
    "temp": "abandonable locks: the numbering's temporary nodes",
    "leader_election": "who selects merges is not a spec variable",
    "columns": "table structure (an INSERT's commit checks its version; an ALTER_METADATA bumps it with its entry)",
    "metadata": "table structure",
    "quorum": "no INSERT here asks for a quorum",
    "nonincrement_block_numbers": "block numbers of tables without partitions",
}

@dataclass(frozen=True)
class Event:
    """One spec step of the trace. ``part`` is (partition, frozenset of (insert, log index), mv)."""
    a: str
    r: str = "none"
    i: int = 0
    k: int = 0
    p: str = "none"
    part: tuple | None = NO_PART
    take: bool = False
    q: tuple | None = NO_PART        # a queue entry a clone made up (index 0) is picked by its part
    rs: frozenset = frozenset()      # trim: the replicas it marked lost
    ks: frozenset = frozenset()      # clone: the log indexes of the entries it copied into the queue
    gets: frozenset = frozenset()    # clone: the parts of the GET_PARTs it made up
    kept: frozenset = frozenset()    # clone: the parts the replica still has registered when it ends
    d: str = "none"                  # a migration's target (reassign, repair)
    out: frozenset = frozenset()     # clone: its own queue entries it removed, (log index, part for index 0)
    zxid: int = 0
    session: int = 0     # the ZooKeeper session that wrote it
    why: str = ""        # for the reader: the record it came from


@dataclass
class Trace:
    events: list[Event]
    replicas: list[str]
    partitions: list[str]
    insert_partition: dict[int, str]
    block_ids: dict[int, str]      # insert id -> its dedup id
    selective: bool = False        # the RFC's table: partitions allocated on first INSERT (selective/)
    replication_factor: int | None = None   # selective/config's; None: every replica owns every partition


class TraceError(ValueError):
    """The transaction log holds no table at the path given, or it does not start with the table."""


@dataclass
class _State:
    root: str
    log_index: dict[int, int] = field(default_factory=dict)          # log-N suffix -> spec index
    entries: dict[int, LogEntry] = field(default_factory=dict)       # spec index -> entry
    insert_of: dict[str, int] = field(default_factory=dict)          # block_id -> insert id
    block: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # (partition, number) -> (i, k)
    mutation: dict[tuple[str, int], int] = field(default_factory=dict)  # (partition, number) -> the spec's muts value
    pointer: dict[str, int] = field(default_factory=dict)            # replica -> log_pointer (real numbering)
    queue: dict[str, dict[str, tuple[int, str]]] = field(default_factory=dict)  # replica -> node -> (index, part)
    executed: dict[str, set[str]] = field(default_factory=dict)      # replica -> queue nodes taken with a part
    lost: set[str] = field(default_factory=set)                      # is_lost 1
    marked: set[str] = field(default_factory=set)                    # marked lost since the last trim
    cloning: dict[str, dict] = field(default_factory=dict)           # replica -> its clone's writes so far
    removed: dict[str, dict[str, Event]] = field(default_factory=dict)  # replica -> part -> its entry's removal
    znodes: dict[str, set[str]] = field(default_factory=dict)        # replica -> its replicas/<r>/parts children
    allocated: dict[str, int] = field(default_factory=dict)          # partition -> highest block number taken
    selective: bool = False
    replication_factor: int | None = None
    hashed: set[int] = field(default_factory=set)                    # inserts whose hash the spec's dedup holds
    partition_of: dict[int, str] = field(default_factory=dict)       # insert id -> its partition
    session_of: dict[int, str] = field(default_factory=dict)         # session -> replica (its is_active)
    active: set[str] = field(default_factory=set)
    started: bool = False
    assignment: dict[str, dict] = field(default_factory=dict)        # partition -> selective/assignments/<p>
    assignment_before: dict[str, dict] = field(default_factory=dict)  # partition -> before this record's write
    migration: dict[str, dict] = field(default_factory=dict)         # partition -> selective/migrations/<p>
    fetching: dict[str, dict[str, bytes]] = field(default_factory=dict)  # replica -> queue entries of a CLONE's fetch
    absorbed: dict[str, set[str]] = field(default_factory=dict)      # replica -> queue nodes a step took out already
    gone: set[str] = field(default_factory=set)                      # dropped for good (SYSTEM DROP REPLICA)


def relative_path(root: str, path: str | None) -> list[str] | None:
    if path is None or not (path == root or path.startswith(root + "/")):
        return None
    return [s for s in path[len(root):].split("/") if s]


def abstract_part(st: _State, name: str) -> tuple:
    """A part by name as the spec's [p, b, mv]: the INSERTs whose committed blocks its range covers."""
    pn = PartName.parse(name)
    blocks = frozenset(v for (p, n), v in st.block.items() if p == pn.partition and pn.min_block <= n <= pn.max_block)
    # A part's mutation version is the block number its mutation took in the partition; the spec
    # numbers a mutation by the log index it was created at (ClientMutate's Len(log) + 1).
    return (pn.partition, blocks, st.mutation.get((pn.partition, pn.mutation), 0) if pn.mutation else 0)


def _entry(data: bytes | None, where: str) -> LogEntry:
    return LogEntry.parse(data or b"", where)


def read_trace(txns: Iterable[Txn], root: str, replicas: Iterable[str]) -> Trace:
    """The events of the table at ``root`` (the server's path, chroot included) written by its
    ``replicas``, from a transaction log that starts before the table's first INSERT."""
    st = _State(root=root.rstrip("/"))
    names = sorted(replicas)
    st.queue = {r: {} for r in names}
    st.executed = {r: set() for r in names}
    st.removed = {r: {} for r in names}
    events: list[Event] = []
    seen_table = False

    def unmapped(t: Txn, what: str) -> None:
        events.append(Event("unmapped", zxid=t.zxid, why=f"zxid {t.zxid:#x}: {what}"))

    for t in txns:
        if t.type == "closeSession" and t.session in st.session_of:
            r = st.session_of.pop(t.session)
            if r in st.active and st.started:
                st.active.discard(r)
                events.append(Event("crash", r=r, zxid=t.zxid, why="its session closed"))
            else:
                st.active.discard(r)
            continue
        if not t.is_write or t.failed:
            continue   # a refused write changed nothing (a deduplicated INSERT's multi among them)
        ops = [(op, relative_path(st.root, op.path)) for op in net_ops(t.ops)]
        ops = [(op, rel) for op, rel in ops if rel is not None]
        if not ops:
            continue
        seen_table = True
        for op, rel in ops:   # the part nodes each replica has registered, whatever step wrote them
            if rel[:1] == ["replicas"] and len(rel) == 4 and rel[2] == "parts":
                (st.znodes.setdefault(rel[1], set()).add if op.type in ("create", "create2")
                 else st.znodes.setdefault(rel[1], set()).discard)(rel[3])
        log_creates = [(op, rel) for op, rel in ops
                       if op.type in ("create", "create2") and rel[:1] == ["log"] and len(rel) == 2]
        if log_creates:
            for op, rel in log_creates:
                _log_entry(st, t, op, rel, ops, events, unmapped)
        else:
            for op, rel in ops:
                _other(st, t, op, rel, ops, events, unmapped, names)
        n = len(events)   # this record's events are the untagged ones at the end
        while n > 0 and events[n - 1].session == 0:
            n -= 1
        events[n:] = [replace(e, session=t.session) for e in events[n:]]
    if not seen_table:
        raise TraceError(f"the transaction log holds no write under {root}")
    for r, nodes in st.fetching.items():
        if nodes:
            events.append(Event("unmapped", r=r, why=f"queue entries {', '.join(sorted(nodes))} of {r} created "
                                                     f"outside a pull and no CLONE's fetch"))
    # An allocation is made for the INSERT that reached the allocating replica first: the next
    # INSERT of the partition the trace commits (the search then has one to send, not each).
    for n, e in enumerate(events):
        if e.a == "allocate":
            nxt = next((x.i for x in events[n + 1:] if x.a == "insert" and x.p == e.p), 0)
            events[n] = replace(e, i=nxt)
    parts = sorted({p for p, _ in st.block} | {e.partition for e in st.entries.values() if e.partition}
                   | {e.p for e in events if e.a in ("allocate", "map")})
    ipart = {i: p for (p, _n), (i, _k) in st.block.items()}
    return Trace(events=events, replicas=names, partitions=parts, insert_partition=ipart,
                 block_ids={i: b for b, i in st.insert_of.items()}, selective=st.selective,
                 replication_factor=st.replication_factor)


def net_ops(ops) -> list:
    """A multi's ops without the create-then-delete pairs of one path, which change nothing: 18.16's
    checkPartChecksumsAndAddCommitOps adds such a pair for each other replica's part node, so that
    the commit fails if that replica registers the same part meanwhile."""
    out = list(ops)
    for n, op in enumerate(ops):
        if op.type in ("create", "create2"):
            later = next((m for m in range(n + 1, len(ops))
                          if ops[m].type == "delete" and ops[m].path == op.path), None)
            if later is not None and out[n] is not None and out[later] is not None:
                out[n] = out[later] = None
    return [op for op in out if op is not None]


def _writer(st: _State, t: Txn, ops) -> str | None:
    """The replica whose subtree the record writes into, else the one whose session it is."""
    for _op, rel in ops:
        if rel[:1] == ["replicas"] and len(rel) >= 2:
            return rel[1]
    return st.session_of.get(t.session)


def _log_entry(st: _State, t: Txn, op, rel, ops, events, unmapped) -> None:
    suffix = int(rel[1].removeprefix("log-"))
    try:
        e = _entry(op.data, f"{op.path}")
    except (BadLogEntry, BadPart) as err:
        unmapped(t, f"a log entry that does not parse ({err})")
        return
    k = len(st.log_index) + 1
    st.log_index[suffix] = k
    st.entries[k] = e
    r = _writer(st, t, ops)
    if e.type == GET_PART:
        pn = PartName.parse(e.new_part_name)
        i = st.insert_of.setdefault(e.block_id or f"{t.zxid:#x}", len(st.insert_of) + 1)
        st.block[(pn.partition, pn.min_block)] = (i, k)
        own = [rel for o, rel in ops if o.type in ("create", "create2") and rel[:1] == ["replicas"]
               and len(rel) == 4 and rel[2] == "parts" and rel[3] == e.new_part_name]
        if r is None or not own:
            unmapped(t, f"GET_PART {e.new_part_name} without its writer's part node")
            return
        st.hashed.add(i)
        st.partition_of[i] = pn.partition
        events.append(Event("insert", r=r, i=i, k=k, p=pn.partition, part=abstract_part(st, e.new_part_name),
                            zxid=t.zxid, why=f"INSERT {e.block_id} -> {e.new_part_name}"))
    elif e.type == MERGE_PARTS:
        events.append(Event("merge", r=r or "none", k=k, p=e.partition, part=abstract_part(st, e.new_part_name),
                            zxid=t.zxid, why=f"MERGE_PARTS {', '.join(e.source_parts)} -> {e.new_part_name}"))
    elif e.type == MUTATE_PART:
        events.append(Event("mutate", r=r or "none", k=k, p=e.partition, part=abstract_part(st, e.new_part_name),
                            zxid=t.zxid, why=f"MUTATE_PART {e.source_parts[0]} -> {e.new_part_name}"))
    elif e.type == DROP_RANGE and not e.detach:
        # The spec's ClientDropPartition forgets the partition's hashes with the entry; 18.16's
        # dropping session removes them from blocks/ just before it creates the entry, while its
        # other threads go on: the removals of the partition's hashes by that session since the
        # partition's last INSERT are this step (taking one the cleanup thread did changes nothing
        # then: no commit of the partition comes between), and so are any of the partition's after it.
        st.hashed -= {i for i, p in st.partition_of.items() if p == e.partition}
        n = len(events)
        while n > 0 and not (events[n - 1].a == "insert" and events[n - 1].p == e.partition):
            n -= 1
            if events[n].a == "forget" and events[n].session == t.session and events[n].p == e.partition:
                del events[n]
        events.append(Event("drop", k=k, p=e.partition, zxid=t.zxid, why=f"DROP_RANGE {e.new_part_name}"))
    elif e.type == ALTER_METADATA:
        events.append(Event("alter", k=k, zxid=t.zxid, why=f"ALTER_METADATA, alter_version {e.alter_version}"))
    else:
        unmapped(t, f"log entry {e.type} is not in the trace spec yet")


def _other(st: _State, t: Txn, op, rel, ops, events, unmapped, names) -> None:
    head = rel[0] if rel else ""
    if head == "block_numbers":
        if len(rel) == 3 and op.type in ("create", "create2") and rel[2].startswith("block-"):
            st.allocated[rel[1]] = max(st.allocated.get(rel[1], -1), int(rel[2].removeprefix("block-")))
        return   # a block number taken: the spec numbers a block by the log index its entry gets
    if head in IGNORED:
        return
    if head == "selective":
        _selective(st, t, op, rel, ops, events, unmapped)
        return
    if not st.started and not (head == "replicas" and rel[2:3] == ["is_active"]):
        if head == "replicas" and rel[2:] == ["log_pointer"] and op.type != "delete":
            st.pointer[rel[1]] = int((op.data or b"0").decode() or 0)
        return   # the table and its replicas being created: the spec's Init is after
    if head == "blocks":
        if len(rel) == 2 and op.type == "delete":
            i = st.insert_of.get(rel[1])
            if i is None:
                unmapped(t, f"blocks/{rel[1]} removed, a hash no INSERT of the trace committed")
            elif i not in st.hashed:
                pass   # a DROP PARTITION's: the spec's ClientDropPartition forgot them with the entry
            else:
                st.hashed.discard(i)
                events.append(Event("forget", i=i, p=st.partition_of[i], zxid=t.zxid, session=t.session,
                                    why=f"blocks/{rel[1]} removed (clearOldBlocks)"))
        return   # a create is part of its INSERT's commit
    if head == "mutations":
        if len(rel) == 2 and op.type in ("create", "create2"):
            try:
                m = MutationEntry.parse(op.data or b"", op.path)
            except BadMutation as err:
                unmapped(t, f"a mutation that does not parse ({err})")
                return
            value = len(st.log_index) + 1
            for partition, number in m.block_numbers:
                st.mutation[(partition, number)] = value
            events.append(Event("mutation", k=value, zxid=t.zxid, why=f"mutation {rel[1]}: {m.commands}"))
        elif len(rel) == 2 and op.type == "delete":
            unmapped(t, f"mutation {rel[1]} removed: finished mutations' cleanup is not in the trace spec yet")
        return   # the mutations/ node's version bump, the CAS that orders mutations
    if head == "alter_partition_version":
        unmapped(t, f"{op.type} {'/'.join(rel)}: partition ALTERs are not in the trace spec yet")
        return
    if head == "log":
        if op.type == "delete" and len(rel) == 2:
            _trimmed(st, t, rel[1], events, unmapped)
        return   # the log/ node itself, created with the table
    if head != "replicas" or len(rel) < 2:
        return   # the table's own nodes, created with it
    r = rel[1]
    if r in st.gone:
        return   # SYSTEM DROP REPLICA removing the replica's subtree: part of its DropReplica step
    if r not in names:
        unmapped(t, f"{op.type} under replicas/{r}, a replica the trace was not told of")
        return
    leaf = rel[2] if len(rel) > 2 else ""
    if leaf == "is_active" and op.type in ("create", "create2"):
        st.session_of[t.session] = r
        if r in st.active:
            return
        st.active.add(r)
        if not st.started:
            st.started = len(st.active) == len(names)   # every replica is up: the spec's Init
        elif r in st.lost:
            st.cloning[r] = {"pointer": None, "queue": {}, "out": set()}   # the event is the clone's end (is_lost 0)
        else:
            events.append(Event("restart", r=r, zxid=t.zxid, why="is_active created by a new session"))
            # ReplicaRestart drops the partitions r no longer keeps, a CLEANUP done on its behalf
            # while it was down: their queue entries' removals that follow are that step.
            _absorb(st, r, {p for p, a in st.assignment.items() if r not in _keepers(a)})
        return
    if leaf == "maps" and len(rel) == 4 and op.type in ("create", "create2", "setData"):
        if st.started and r not in st.cloning:   # a lost replica's map loaded before its clone: the clone's step
            events.append(Event("map", r=r, p=rel[3], k=int((op.data or b"-1").decode()), zxid=t.zxid,
                                why=f"{r}'s map holds version {int((op.data or b'-1').decode())} of {rel[3]}"))
        return
    if leaf == "placement":
        return   # a replica's fault domain and capacity; every trace here has one domain a replica, equal disks
    if leaf == "is_lost" and op.type == "setData":
        _lost_flag(st, t, r, (op.data or b"").strip(), events, unmapped)
        return
    if leaf == "log_pointer":
        _pointer(st, t, r, op, ops, events, unmapped)
        return
    if leaf == "queue" and len(rel) == 4:
        node = rel[3]
        if op.type in ("create", "create2"):
            if r in st.cloning:
                st.cloning[r]["queue"][node] = op.data
            elif not any(q.type == "setData" and qrel == ["replicas", r, "log_pointer"] for q, qrel in ops):
                # A CLONE's fetch by its target, if the migration's fetched mark follows (_fetched)
                st.fetching.setdefault(r, {})[node] = op.data
            return
        if op.type == "delete":
            if node in st.absorbed.get(r, ()):
                st.absorbed[r].discard(node)   # a step that took the partition away took this entry
                return
            if r in st.cloning and node in st.queue[r]:
                # the fixed protocol's clone replaces the queue (18.16's keeps it): part of the clone
                k, name = st.queue[r].pop(node)
                st.executed[r].discard(node)
                st.cloning[r]["out"].add((k, _queued_part(st, k, name)))
                return
            entry = st.queue[r].pop(node, None)
            if entry is None:
                unmapped(t, f"queue entry {node} of {r} removed, which no pull created")
            elif node in st.executed[r]:
                st.executed[r].discard(node)   # its part's registration was the step
            else:
                k, name = entry
                events.append(Event("execute", r=r, k=k, q=_queued_part(st, k, name), zxid=t.zxid,
                                    why=f"queue entry {node} removed"))
                st.removed[r][name] = events[-1]
        return
    if leaf == "parts" and len(rel) == 4:
        if op.type in ("create", "create2"):
            _registered(st, t, r, rel[3], events, unmapped)
        return   # a removal: the part was replaced or dropped earlier (see IGNORED)
    return   # replica_setup, part_children, host, flags


def _selective(st: _State, t: Txn, op, rel, ops, events, unmapped) -> None:
    """The RFC's selective/ subtree: the table's config, a partition's assignment created by the
    allocating replica (its CAS-create on first INSERT), and the migrations' steps (_migration_step)."""
    st.selective = True
    if rel[1:] == ["config"] and op.type in ("create", "create2", "setData"):
        st.replication_factor = int(json.loads(op.data or b"{}").get("replication_factor", 0)) or None
        return
    if op.type == "check" or len(rel) != 3 or rel[1] not in ("assignments", "migrations"):
        return   # an INSERT's check of the assignment's version (the F4 check); the subtree's creation
    p, value = rel[2], json.loads(op.data or b"{}") if op.type != "delete" else None
    if rel[1] == "assignments":
        st.assignment_before[p] = st.assignment.get(p, {})
        st.assignment[p] = value or {}
        if not st.started:
            return
        if op.type in ("create", "create2"):
            owners = frozenset(value.get("owners", ()))
            events.append(Event("allocate", r=st.session_of.get(t.session, "none"), p=p, rs=owners, zxid=t.zxid,
                                why=f"{p} allocated to {', '.join(sorted(owners))}"))
        elif not any(o.type != "check" and orel == ["selective", "migrations", p] for o, orel in ops):
            _migration_step(st, t, p, st.migration.get(p), st.migration.get(p), events, unmapped)
        return
    before = st.migration.get(p)
    st.migration[p] = value
    if st.started:
        _migration_step(st, t, p, before, value, events, unmapped)


def _keepers(a: dict) -> set[str]:
    return set(a.get("owners", ())) | ({a.get("target"), a.get("leaving")} - {None})


def _absorb(st: _State, r: str, partitions: set[str]) -> None:
    """A step took r's queue entries of `partitions` away with it: their removals that follow are no step."""
    for node, (k, name) in list(st.queue.get(r, {}).items()):
        if (st.entries[k].partition if k else PartName.parse(name).partition) in partitions:
            del st.queue[r][node]
            st.executed[r].discard(node)
            st.absorbed.setdefault(r, set()).add(node)


def _migration_step(st: _State, t: Txn, p: str, o: dict | None, m: dict | None, events, unmapped) -> None:
    """Which migration step a write of partition p's assignment (and migration: o before, m after) is."""
    writer = st.session_of.get(t.session)
    a0, a1 = st.assignment_before.get(p, {}), st.assignment.get(p, {})
    removed = _keepers(a0) - _keepers(a1)
    ev = lambda a, **kw: events.append(Event(a, p=p, zxid=t.zxid, **kw))   # noqa: E731
    if removed and removed <= st.gone:
        return   # the rest of a DropReplica already taken
    down = sorted(x for x in removed if x not in st.active)
    if writer is None and down:
        # SYSTEM DROP REPLICA, by a session of no replica: the spec's DropReplica takes the replica
        # out of every assignment and migration at once, and its replicas/<r> with it.
        st.gone.add(down[0])
        ev("drop_replica", r=down[0], why=f"SYSTEM DROP REPLICA {down[0]}: out of {p}'s assignment first")
        return
    was, now = (o or {}).get("state"), (m or {}).get("state")
    if now == "clone" and was in (None, "done", "cancelled"):
        if m.get("src") is None:
            ev("repair", r=m["coord"], d=m["dst"],
               why=f"REPAIR {p}: CLONE into {m['dst']}, coordinated by {m['coord']}")
        else:
            ev("reassign", r=m["src"], d=m["dst"], why=f"REASSIGN {p}: CLONE {m['src']} -> {m['dst']}")
    elif was == "clone" and now == "clone" and m.get("fetched") and not o.get("fetched"):
        _fetched(st, t, p, m, events, unmapped)
    elif was == "clone" and now == "clone" and m.get("coord") != o.get("coord"):
        ev("take_over", r=m["coord"], why=f"{m['coord']} takes over {p}'s migration from {o.get('coord')}")
    elif was == "clone" and now in ("switched", "done"):
        owners = frozenset(a1.get("owners", ()))
        ev("switch", rs=owners, why=f"SWITCH {p}: owners {', '.join(sorted(owners))}")
    elif was == "clone" and now == "cancelling":
        ev("cancel", why=f"CANCEL {p}: {m['dst']} leaving")
    elif was in ("switched", "cancelling") and now in ("done", "cancelled"):
        leaver = o["src"] if was == "switched" else o["dst"]
        if writer == leaver:
            ev("cleanup", r=leaver, why=f"CLEANUP {p} on {leaver}")
            _absorb(st, leaver, {p})   # drop_partition_locally's queue removals that follow
        else:
            ev("cleanup_down", r=writer or "none", why=f"CLEANUP {p} for {leaver}, down, by {writer}")
    else:
        unmapped(t, f"{p}'s migration {was} -> {now} with assignment {a0} -> {a1}: no migration step")


def _fetched(st: _State, t: Txn, p: str, m: dict, events, unmapped) -> None:
    """A CLONE's fetch marked done: the target's queue entries created since outside a pull are its
    GET_PARTs (made up: log index 0) and the log's MUTATE_PART and DROP_RANGE entries it re-queued."""
    dst = m["dst"]
    copied = _copies(st, t, dst, st.fetching.pop(dst, {}), f"{dst}'s CLONE", unmapped)
    if copied is None:
        return
    ks, gets = copied
    pos = _pulled(st, int(m.get("catchup_to") or 0))
    events.append(Event("fetch", r=dst, p=p, k=pos, ks=ks, gets=gets, zxid=t.zxid,
                        why=f"CLONE {p} into {dst} fetched: {len(gets)} parts, {len(ks)} entries re-queued, "
                            f"catch-up to log entry {pos}"))


def _copies(st: _State, t: Txn, r: str, nodes: dict[str, bytes], who: str, unmapped) -> tuple | None:
    """Queue entries r created in one step (a clone of a lost replica, a CLONE's fetch): each is an
    entry of the log copied (its log index) or a GET_PART made up (index 0, by its part). Records
    them in r's queue; returns (log indexes, parts made up), or None after an unmapped event."""
    known = {st.entries[k].format(): k for k in st.entries}
    ks, gets = set(), set()
    for node, data in nodes.items():
        try:
            entry = _entry(data, node)
        except (BadLogEntry, BadPart) as err:
            unmapped(t, f"queue entry {node} does not parse ({err})")
            return None
        k = known.get(entry.format(), 0)
        if k == 0 and entry.type != GET_PART:
            unmapped(t, f"{who} queued {entry.type} {entry.new_part_name}, which is no entry of the log")
            return None
        st.queue[r][node] = (k, entry.new_part_name)
        (ks.add(k) if k else gets.add(abstract_part(st, entry.new_part_name)))
    return frozenset(ks), frozenset(gets)


def _queued_part(st: _State, k: int, name: str) -> tuple | None:
    """What picks a queue entry out in the spec: its log index, or, for an entry a clone made up
    (index 0), its part."""
    return abstract_part(st, name) if k == 0 else NO_PART


def _pointer(st: _State, t: Txn, r: str, op, ops, events, unmapped) -> None:
    """replicas/<r>/log_pointer written: a pull (one event per entry it moved past), or a clone's."""
    value = int((op.data or b"0").decode() or 0)
    old = st.pointer.get(r)
    st.pointer[r] = value
    if r in st.cloning:
        st.cloning[r]["pointer"] = value
        return
    if op.type in ("create", "create2") or old is None:
        if st.log_index:
            unmapped(t, f"replicas/{r}/log_pointer created at {value} after the log began: a joining replica")
        return
    if op.type != "setData":
        return
    if value < old:
        # No action moves a pointer back: the event says where it went, which no pull explains.
        events.append(Event("pull", r=r, k=_pulled(st, value), zxid=t.zxid,
                            why=f"log_pointer {old} -> {value}, backwards"))
        return
    queued = {q.path.rsplit("/", 1)[1]: q.data for q, qrel in ops if q.type in ("create", "create2")
              and qrel[:3] == ["replicas", r, "queue"] and len(qrel) == 4}
    texts = {}
    for node, data in queued.items():
        try:
            texts[_entry(data, node).format()] = node
        except (BadLogEntry, BadPart) as err:
            unmapped(t, f"queue entry {node} does not parse ({err})")
    for suffix in range(old, value):
        k = st.log_index.get(suffix)
        if k is None:
            unmapped(t, f"replicas/{r}/log_pointer moved past log-{suffix:010d}, which the trace never saw created")
            return
        node = texts.get(st.entries[k].format())
        if node is not None:
            st.queue[r][node] = (k, st.entries[k].new_part_name)
        events.append(Event("pull", r=r, k=k, take=node is not None, zxid=t.zxid, why=f"log_pointer {old} -> {value}"))


def _pulled(st: _State, pointer: int) -> int:
    """The spec's log_pointer for ClickHouse's: the entries created with a suffix below it."""
    return sum(1 for suffix in st.log_index if suffix < pointer)


def _trimmed(st: _State, t: Txn, node: str, events, unmapped) -> None:
    """The cleanup thread removed log entries: one trim event per multi, up to the last it removed,
    with the replicas it had just marked lost (18.16 marks them in a multi of its own before)."""
    k = st.log_index.get(int(node.removeprefix("log-")))
    if k is None:
        unmapped(t, f"log entry {node} removed, which the trace never saw created")
        return
    if events and events[-1].a == "trim" and events[-1].zxid == t.zxid:
        events[-1] = Event("trim", k=max(k, events[-1].k), rs=events[-1].rs, zxid=t.zxid, why=events[-1].why)
        return
    events.append(Event("trim", k=k, rs=frozenset(st.marked), zxid=t.zxid, why="clearOldLogs"))
    st.marked.clear()


def _lost_flag(st: _State, t: Txn, r: str, value: bytes, events, unmapped) -> None:
    if value == b"1":
        st.lost.add(r)
        st.marked.add(r)
        return
    if value != b"0":
        unmapped(t, f"replicas/{r}/is_lost set to {value!r}")
        return
    if r not in st.cloning:
        if r in st.lost:
            unmapped(t, f"replicas/{r}/is_lost cleared without a clone")
        return   # a replica that was not lost writes 0 at start
    clone = st.cloning.pop(r)
    st.lost.discard(r)
    copied = _copies(st, t, r, clone["queue"], "the clone", unmapped)
    if copied is None:
        return
    ks, gets = copied
    pointer = clone["pointer"] if clone["pointer"] is not None else st.pointer.get(r, 0)
    kept = _active(st.znodes.get(r, set()))
    events.append(Event("clone", r=r, k=_pulled(st, pointer), ks=ks, gets=gets,
                        kept=frozenset(abstract_part(st, n) for n in kept), out=frozenset(clone["out"]), zxid=t.zxid,
                        why=f"cloneReplica: log_pointer {pointer}, {len(clone['queue'])} entries queued"
                            + (f", {len(clone['out'])} of its own removed" if clone["out"] else "")
                            + f", keeps {', '.join(sorted(kept)) or 'no part'}"))


def _first_of_removals(st: _State, events: list[Event], at: int, r: str, partition: str) -> int:
    """The first of the run of queue removals by r, without a part, of entries of `partition`,
    that ends at events[at] (other replicas' events may lie between them; any other event of r's
    ends the run): removePartProducingOpsInRange's removals of one DROP_RANGE."""
    first = at
    for n in range(at - 1, -1, -1):
        e = events[n]
        if e.r != r:
            continue
        if e.a != "execute" or e.part != NO_PART or e.k == 0 or st.entries[e.k].partition != partition:
            break
        first = n
    return first


def _active(names: set[str]) -> set[str]:
    """The part nodes no other contains (the rest are replaced parts whose nodes go later), with
    MergeTreePartInfo::contains's rule: the block range, the level and the mutation."""
    parts = {n: PartName.parse(n) for n in names}
    return {n for n, x in parts.items() if not any(m != n and _contains(y, x) for m, y in parts.items())}


def _contains(y: PartName, x: PartName) -> bool:
    """MergeTreePartInfo::contains: y's block range holds x's, at a level and a mutation no lower."""
    return y.covers(x) and y.level >= x.level and y.mutation >= x.mutation


def _registered(st: _State, t: Txn, r: str, name: str, events, unmapped) -> None:
    """replicas/<r>/parts/<name> created outside an INSERT: the execution of the queue entry that
    makes it (a GET, MERGE or MUTATE of that part), else of the oldest that it covers."""
    try:
        made = PartName.parse(name)
    except BadPart as err:
        unmapped(t, f"a part node that does not parse ({err})")
        return
    if made.max_block > st.allocated.get(made.partition, made.max_block):
        unmapped(t, f"{r} registered {name}, beyond block {st.allocated[made.partition]}, the highest any "
                    f"INSERT, mutation or drop of {made.partition} has taken")
        return
    pending = sorted((k, node, part) for node, (k, part) in st.queue[r].items() if node not in st.executed[r])
    exact = [(k, node, part) for k, node, part in pending if part == name]
    covered = [(k, node, part) for k, node, part in pending
               if part and (k == 0 or st.entries[k].type != DROP_RANGE) and made.covers(PartName.parse(part))]
    if not (exact or covered):
        # A fetch that finished after a DROP_RANGE's removePartProducingOpsInRange took its entry
        # out of the queue (18.16 removes the znode of an entry that is executing): the removal was
        # the step, with this part, and the drop's execution takes the part away later.
        ev = st.removed[r].pop(name, None)
        at = next((n for n in range(len(events) - 1, -1, -1) if ev is not None and events[n].a == "execute"
                   and (events[n].zxid, events[n].r, events[n].k) == (ev.zxid, ev.r, ev.k)), None)
        if at is not None:
            fetched = replace(events[at], part=abstract_part(st, name),
                              why=ev.why + f"; its fetch of {name} committed after (zxid {t.zxid:#x})")
            # The drop removes the partition's entries one request after another and waits for
            # this fetch before it takes the parts away: the fetch is a step before the drop's
            # execution, whose first removal of the batch the spec takes for that execution (and
            # which already took this entry out, seen from the spec). So it goes before the batch.
            first = _first_of_removals(st, events, at, r, made.partition)
            del events[at]
            events.insert(first, fetched)
            return
        unmapped(t, f"{r} registered {name}, which no entry in its queue makes")
        return
    k, node, part = (exact or covered)[0]
    st.executed[r].add(node)
    # A fetch that commits a part r already holds inside a bigger one (its fetch of the merged part
    # won the race): the part is Outdated on arrival, and the entry's step is the core's "already
    # covered" one, which adds no part.
    inside = next((m for m in st.znodes.get(r, ()) if m != name and _contains(PartName.parse(m), made)), None)
    events.append(Event("execute", r=r, k=k, part=NO_PART if inside else abstract_part(st, name),
                        q=_queued_part(st, k, part), zxid=t.zxid,
                        why=f"{r} registered {name} for {'a clone' if k == 0 else st.entries[k].type}'s {part}"
                            + (f", inside its {inside}" if inside else "")))


# --- the trace as a TLA+ module --------------------------------------------------------------

def tla_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _tla_part(part: tuple | None) -> str:
    if part is None:
        return "NoPart"
    p, blocks, mv = part
    b = ", ".join(f"<<{i}, {k}>>" for i, k in sorted(blocks))
    return f"[p |-> {tla_string(p)}, b |-> {{{b}}}, mv |-> {mv}]"


def tla_module(trace: Trace, name: str) -> str:
    """The trace as a module of definitions the trace cfg substitutes for the spec's constants."""
    reps = ", ".join(tla_string(r) for r in trace.replicas)
    parts = ", ".join(tla_string(p) for p in trace.partitions)
    ip = " @@ ".join(f"{i} :> {tla_string(p)}" for i, p in sorted(trace.insert_partition.items())) or "<<>>"
    lines = [f"---- MODULE {name} ----", "EXTENDS TraceSelectiveReplication",
             f"TrReplicas == {{{reps}}}", f"TrPartitions == {{{parts}}}",
             f"TrInsertPartition == {ip}",
             # a selective table allocates each partition on its first INSERT; a plain one is owned by all
             "TrInitOwners == [p \\in TrPartitions |-> " + ("{}]" if trace.selective else "TrReplicas]"),
             "TrDomain == [r \\in TrReplicas |-> r]", "TrCapacity == [r \\in TrReplicas |-> 1]",
             # ClickHouse merges a range of any length, one part too (OPTIMIZE ... FINAL rewrites it)
             f"TrMergeWidths == 1..{max(2, len(trace.insert_partition))}",
             "TrTrace == <<"]
    for n, e in enumerate(trace.events):
        sep = "," if n + 1 < len(trace.events) else ""
        rs = ", ".join(tla_string(r) for r in sorted(e.rs))
        ks = ", ".join(str(k) for k in sorted(e.ks))
        gets = ", ".join(sorted(_tla_part(g) for g in e.gets))
        kept = ", ".join(sorted(_tla_part(g) for g in e.kept))
        out = ", ".join(sorted(f"<<{k}, {_tla_part(q)}>>" for k, q in e.out))
        lines.append(f"  [a |-> {tla_string(e.a)}, r |-> {tla_string(e.r)}, d |-> {tla_string(e.d)}, i |-> {e.i}, "
                     f"k |-> {e.k}, p |-> {tla_string(e.p)}, part |-> {_tla_part(e.part)}, "
                     f"take |-> {'TRUE' if e.take else 'FALSE'}, "
                     f"q |-> {_tla_part(e.q)}, rs |-> {{{rs}}}, ks |-> {{{ks}}}, gets |-> {{{gets}}}, "
                     f"kept |-> {{{kept}}}, out |-> {{{out}}}]{sep}"
                     f"  \\* {n + 1}: {e.why}")
    lines += ["  >>", "===="]
    return "\n".join(lines) + "\n"
