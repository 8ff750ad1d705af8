"""Parallel replicas (seed 004): one SELECT spread over replicas by a coordinator, step for step
with spec/parallel_replicas/ParallelReplicas.tla (PRStart, PRAnnounce, PRSkip, PRRead, PRFinish,
PRFail as pr_start ... pr_fail; spec/parallel_replicas/README.md cites the ClickHouse code each step
follows; conformance/transitions.py lists them).

The initiator takes `max_parallel_replicas` replicas of the cluster, itself among them. Each
announces its snapshot: its active parts as they are when it plans its read, kept with their rows
(ClickHouse's storage snapshot holds the parts, so a part the table drops meanwhile stays
readable for the query). The coordinator builds its working set from the announcements, hands
each part out once to a replica that announced that very part, and the answer is what was read.

What the working set is, is `coordinator`:
- "snapshot_replica": ClickHouse master (DefaultCoordinator::initializeReadingState): the first
  announcement is the whole working set; later ones add nothing. PR #102244 runs this (PR-F11).
- "union": the coordinator of 2023 (updateReadingState): every announcement adds its parts but
  one overlapping a part already known.
- "partition_snapshot": the fix for a selective table (F24): each partition's parts come from
  the first announcement of a replica that owns it by its own map; a partition the initiator's
  map knows that no announcement served fails the query.
Nothing here chooses the order of steps or records a history: reference/cluster.py does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from protocol.assignment import GuardFailed
from protocol.parts import PartName
from protocol.replica import Replica

COORDINATORS = ("snapshot_replica", "union", "partition_snapshot")
# The one a selective table needs; the other two are ClickHouse's, kept to show what they do.
SAFE_COORDINATOR = "partition_snapshot"


def overlap(x: PartName, y: PartName) -> bool:
    """Not disjoint, in MergeTreePartInfo's sense: one partition, block ranges that meet (a merge
    of the other, or a mutation of it, or two merges sharing a block)."""
    return x.partition_id == y.partition_id and x.min_block <= y.max_block and y.min_block <= x.max_block


@dataclass
class Announcement:
    replica: str
    parts: dict[PartName, list[dict]]     # the snapshot: each active part with its rows
    serves: frozenset[str]                # partitions the replica owns by its own map


@dataclass
class ParallelQuery:
    at: str
    coordinator: str
    participants: list[str]
    known: frozenset[str]                 # the partitions the initiator's map knew when it started
    announced: dict[str, Announcement] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    live: set[str] = field(default_factory=set)          # announced and still connected
    snapshot_replica: str | None = None
    served_by: dict[str, str] = field(default_factory=dict)  # partition_snapshot: partition -> announcer
    work: dict[PartName, str] = field(default_factory=dict)  # working set: part -> whose announcement gave it
    read: dict[PartName, str] = field(default_factory=dict)  # part -> the replica that read it
    failed: bool = False

    @property
    def rows(self) -> dict[str, list[dict]]:
        """partition -> the rows read: each read part's, from the snapshot of the replica that read it."""
        out: dict[str, list[dict]] = {}
        for part, name in sorted(self.read.items()):
            out.setdefault(part.partition, []).extend(self.announced[name].parts[part])
        return out

    def waiting_for(self) -> list[str]:
        """Participants that neither announced nor were marked unavailable."""
        return [r for r in self.participants if r not in self.announced and r not in self.skipped]

    def announced_enough(self) -> bool:
        """The spec's Announced: the snapshot replica's announcement alone (later ones add nothing),
        or, for the other two, every participant's or its being unavailable."""
        if self.coordinator == "snapshot_replica":
            return self.snapshot_replica is not None
        return not self.waiting_for()

    def unserved(self) -> set[str]:
        """partition_snapshot: partitions the initiator's map knew that no announcement served."""
        return set(self.known) - set(self.served_by)

    def unread(self) -> list[PartName]:
        return sorted(set(self.work) - set(self.read))

    def stuck(self) -> bool:
        """The spec's PRFail guard: a part of the working set no connected replica announced
        ("Some segments were left unread"), or a partition no announcement served."""
        if any(not any(x in self.announced[r].parts for r in self.live) for x in self.unread()):
            return True
        return self.coordinator == "partition_snapshot" and self.announced_enough() and bool(self.unserved())


def pr_start(initiator: Replica, cluster: list[str], max_parallel_replicas: int, coordinator: str,
             rng: random.Random) -> ParallelQuery:
    """PRStart: the initiator and max_parallel_replicas - 1 others of the cluster, shuffled
    (getShuffledPools), up or not: one that is down is skipped when it cannot be reached."""
    if coordinator not in COORDINATORS:
        raise ValueError(f"coordinator {coordinator!r}: one of {', '.join(COORDINATORS)}")
    if max_parallel_replicas < 1:
        raise ValueError(f"max_parallel_replicas {max_parallel_replicas}: at least 1")
    if initiator.keeper.expired:
        raise GuardFailed("PRStart", f"{initiator.name} is read-only (its Keeper session expired)")
    others = sorted(r for r in cluster if r != initiator.name)
    chosen = rng.sample(others, min(max_parallel_replicas - 1, len(others)))
    return ParallelQuery(initiator.name, coordinator, [initiator.name, *chosen], frozenset(initiator.cache))


def pr_announce(q: ParallelQuery, replica: Replica) -> set[str] | None:
    """PRAnnounce: `replica` takes its snapshot and announces it. Returns the partitions this
    announcement speaks for, whose rows in flight to the replica are lag (the caller records them:
    the spec's LagAt): the ones it served (partition_snapshot), none (a later announcement to the
    snapshot replica's coordinator), or None for every partition (the snapshot replica's own, and
    each of the union's: a partition it keeps with nothing on disk yet is lag too)."""
    name = replica.name
    if name not in q.waiting_for():
        raise GuardFailed("PRAnnounce", f"{name} is not a participant waiting to announce")
    snapshot = {n: replica.store.read(n) for n in replica.store.names() if not n.patch}
    serves = frozenset(p for p, a in replica.cache.items() if name in a.owners)
    first = q.snapshot_replica is None
    if q.coordinator == "snapshot_replica":
        taken = set(snapshot) if first else set()
    elif q.coordinator == "union":
        taken = {x for x in snapshot if all(x == y or not overlap(x, y) for y in q.work)}
    else:
        takes = {p for p in serves if p not in q.served_by}
        taken = {x for x in snapshot if x.partition in takes}
        q.served_by.update({p: name for p in takes})
    for x in taken:
        q.work.setdefault(x, name)
    q.announced[name] = Announcement(name, snapshot, serves)
    q.live.add(name)
    if first:
        q.snapshot_replica = name
    if q.coordinator == "partition_snapshot":
        return {p for p, r in q.served_by.items() if r == name}
    return None if q.coordinator == "union" or first else set()


def pr_skip(q: ParallelQuery, name: str) -> None:
    """PRSkip: a participant that cannot be reached before it announced (markReplicaAsUnavailable)."""
    if name not in q.waiting_for():
        raise GuardFailed("PRSkip", f"{name} is not a participant waiting to announce")
    q.skipped.add(name)


def pr_read(q: ParallelQuery, part: PartName, name: str) -> list[dict]:
    """PRRead: a replica that announced `part` reads it from its snapshot; each part once."""
    if part not in q.work or part in q.read:
        raise GuardFailed("PRRead", f"{part} is not an unread part of the working set")
    if name not in q.live or part not in q.announced[name].parts:
        raise GuardFailed("PRRead", f"{name} did not announce {part}, or is gone")
    q.read[part] = name
    return q.announced[name].parts[part]


def pr_lost(q: ParallelQuery, name: str) -> None:
    """A participant's process is gone: it reads nothing more (its snapshot was in its memory);
    the query fails if it was the initiator (spec: Survive)."""
    q.live.discard(name)
    if name == q.at:
        q.failed = True


def pr_fail(q: ParallelQuery) -> None:
    """PRFail: the query cannot be answered whole (`stuck`), so it fails: the client sees an error."""
    if not q.stuck():
        raise GuardFailed("PRFail", "every part of the working set can still be read and every partition was served")
    q.failed = True


def pr_finish(q: ParallelQuery) -> dict[str, list[dict]]:
    """PRFinish: every announcement awaited is in and the working set is read; the rows by partition."""
    if q.failed or not q.announced_enough() or q.unread():
        raise GuardFailed("PRFinish", "announcements or reads are still outstanding, or the query failed")
    if q.coordinator == "partition_snapshot" and q.unserved():
        raise GuardFailed("PRFinish", f"no announcement served {sorted(q.unserved())}")
    return q.rows
