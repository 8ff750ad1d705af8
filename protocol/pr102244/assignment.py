"""The PR's assignment node and counts (PR102244.md M2, M3).

The assignment of a partition is the list of its replicas, comma-separated; a migration's target
carries the suffix `:cloning` ("r1,r2,r3:cloning"), and is left out of SELECT and INSERT routing
but kept by the log filter. The znode version is the CAS token. The counts are one node per
replica (`selective/counts/{r}`, an integer): how many partitions list it as an owner, changed in
the same multi as the assignment (at creation and at SWITCH).
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.assignment import CorruptAssignment, GuardFailed, NotEnoughActiveReplicas, active_replicas
from protocol.keeper import Create, Keeper, MultiError, NoNodeError, SetData
from protocol.layout import Layout
from protocol.pr102244 import layout as pr_layout

CLONING = ":cloning"


@dataclass(frozen=True)
class PRAssignment:
    owners: tuple[str, ...]
    cloning: tuple[str, ...] = ()
    version: int = -1  # znode version it was read at; -1 when not read from Keeper

    def keepers(self) -> set[str]:
        """AssignedIn: the replicas whose log filter keeps the partition (owners and `:cloning`)."""
        return set(self.owners) | set(self.cloning)

    def encode(self) -> bytes:
        return ",".join([*self.owners, *(f"{t}{CLONING}" for t in self.cloning)]).encode()

    @classmethod
    def decode(cls, data: bytes, version: int, path: str) -> "PRAssignment":
        try:
            items = data.decode().split(",")
        except UnicodeDecodeError:
            raise CorruptAssignment(f"{path}: not text: {data[:60]!r}") from None
        if items == [""]:
            # The code writes an empty list (a SWITCH of the last owner after its target was rolled
            # back: FINDINGS PR-F7); readAllAssignmentsFromZK skips such a node.
            return cls((), (), version)
        owners = [i for i in items if not i.endswith(CLONING)]
        cloning = [i[:-len(CLONING)] for i in items if i.endswith(CLONING)]
        names = owners + cloning
        if not names or not all(n and "/" not in n and ":" not in n for n in names):
            raise CorruptAssignment(f"{path}: expected replica names, the target with {CLONING}, not {data[:80]!r}")
        # A name listed twice is not corrupt: the PR's code writes such lists (two CLONEs of one
        # partition to one target, and the SWITCH after them: FINDINGS PR-F3 against the code).
        return cls(tuple(owners), tuple(cloning), version)


def read_assignment(keeper: Keeper, layout: Layout, partition: str) -> PRAssignment | None:
    path = layout.assignment(partition)
    try:
        data, stat = keeper.get(path)
    except NoNodeError:
        return None
    return PRAssignment.decode(data, stat.version, path)


def read_count(keeper: Keeper, layout: Layout, replica: str) -> tuple[int, int]:
    """A replica's count and its znode version (0 and -1 before its node exists)."""
    try:
        data, stat = keeper.get(pr_layout.counts(layout, replica))
    except NoNodeError:
        return 0, -1
    return int(data), stat.version


def set_count(layout: Layout, replica: str, value: int, version: int):
    """The multi op that writes a count read at `version` (a create when it had no node)."""
    path = pr_layout.counts(layout, replica)
    return Create(path, str(value).encode()) if version < 0 else SetData(path, str(value).encode(), version)


def ensure_partition_assignment(keeper: Keeper, layout: Layout, partition: str, rf: int,
                                choose=None) -> PRAssignment:
    """`ensurePartitionAssignment` (M2): the partition's assignment, created by CAS when missing
    on the rf active replicas with the lowest counts (ties by name), their counts +1 in the same
    multi, each count checked at the version read. A concurrent creator wins: its assignment is read.
    As the code does (allocatePartitions over the active replicas), with fewer active replicas than
    rf the factor degrades to their number; none active is refused (NO_ACTIVE_REPLICAS). PR-F9.
    `choose(ranked, n)`: which n of the active replicas, ranked by (count, name), are taken; by
    default the first n (a conformance harness passes the spec's choice among tied counts)."""
    for _ in range(16):
        a = read_assignment(keeper, layout, partition)
        if a is not None:
            return a
        active = active_replicas(keeper, layout)
        if not active:
            raise NotEnoughActiveReplicas("ensurePartitionAssignment", f"no active replica, replication_factor {rf}")
        loads = {r: read_count(keeper, layout, r) for r in active}
        ranked, n = sorted(active, key=lambda r: (loads[r][0], r)), min(rf, len(active))
        chosen = ranked[:n] if choose is None else choose(ranked, n)
        ops = [Create(layout.assignment(partition), PRAssignment(tuple(chosen)).encode())]
        ops += [set_count(layout, r, loads[r][0] + 1, loads[r][1]) for r in chosen]
        try:
            keeper.multi(ops)
        except MultiError:
            continue  # another INSERT created it, or a count moved meanwhile: read again
        return read_assignment(keeper, layout, partition)
    raise GuardFailed("ensurePartitionAssignment", f"{partition}: the assignment kept changing; retry")


def assignments_rows(keeper: Keeper, layout: Layout) -> list[dict]:
    """Rows of system.selective_assignments in the PR's terms, shaped as the history's
    `assignments` (owners, the `:cloning` target as clone_target; the PR has no leaving role)."""
    rows = []
    for p in keeper.get_children(layout.assignments):
        a = read_assignment(keeper, layout, p)
        rows.append({"partition_id": p, "replicas": list(a.owners), "cloning": list(a.cloning),
                     "clone_target": ",".join(a.cloning) or None, "leaving_replica": None, "version": a.version})
    return rows
