"""The PR's background rebalancer (PR102244.md M13): in cycles, it plans moves from the counts
and starts at most `limit` migrations per cycle.

What the sources leave open, and what this reads: the plan reads the counts, which change only
at SWITCH, so a CLONE in flight is not counted (as written; the fixed design counts it, F13); a
partition with a `:cloning` entry is not planned again (a choice of this planner, not the PR's:
with `second_migration_allowed` a second migration comes only from an explicit request); the
limit is per cycle, not on migrations in flight (as written).
"""

from __future__ import annotations

from protocol.assignment import active_replicas
from protocol.keeper import Keeper
from protocol.layout import Layout
from protocol.pr102244.assignment import read_assignment, read_count
from protocol.pr102244.migration import start_clone


def plan_cycle(keeper: Keeper, layout: Layout, limit: int,
               failed: frozenset[str] = frozenset()) -> list[tuple[str, str, str]]:
    """Up to `limit` moves (partition, source, target), each from the most to the least loaded
    active replica by the counts, while they differ by more than one. A partition whose CLONE
    timed out earlier in this rebalance (`failed`) is not planned again: its CLONE may wait on
    parts only a down replica holds, and planning it first every cycle would retry it for ever
    and move nothing else (the PR leaves a failed move's retry open; this is the planner's
    reading: the next rebalance retries it)."""
    active = active_replicas(keeper, layout)
    loads = {r: read_count(keeper, layout, r)[0] for r in active}
    assignments = {p: read_assignment(keeper, layout, p) for p in keeper.get_children(layout.assignments)}
    moves: list[tuple[str, str, str]] = []
    while len(moves) < limit and loads:
        most = max(sorted(loads), key=lambda r: loads[r])
        least = min(sorted(loads), key=lambda r: loads[r])
        if loads[most] - loads[least] <= 1:
            break
        movable = [p for p, a in sorted(assignments.items())
                   if most in a.owners and least not in a.keepers() and not a.cloning
                   and p not in {m[0] for m in moves} and p not in failed]
        if not movable:
            break
        moves.append((movable[0], most, least))
        loads[most] -= 1   # within the cycle the plan counts its own moves
        loads[least] += 1
    return moves


def plan_repairs(keeper: Keeper, layout: Layout, rf: int, failed: frozenset[str] = frozenset()) -> list[tuple[str, str, str]]:
    """The code's phase 1 (computeRebalancePlan): each partition with fewer owners than
    min(rf, active replicas), from its most loaded owner to the least loaded active replica not in
    its list; a partition with a :cloning entry is in flight and left alone."""
    active = active_replicas(keeper, layout)
    loads = {r: read_count(keeper, layout, r)[0] for r in active}
    repairs = []
    for p in keeper.get_children(layout.assignments):
        a = read_assignment(keeper, layout, p)
        owners = set(a.owners) & set(loads)
        if a.cloning or p in failed or len(set(a.owners)) >= min(rf, len(active)) or not owners:
            continue
        targets = sorted((r for r in loads if r not in a.keepers()), key=lambda r: (loads[r], r))
        if targets:
            repairs.append((p, max(sorted(owners), key=lambda r: loads[r]), targets[0]))
            loads[targets[0]] += 1
    return repairs


def plan(keeper: Keeper, layout: Layout, limit: int, failed: frozenset[str] = frozenset(),
         rf: int | None = None) -> list[tuple[str, str, str, bool]]:
    """One cycle's plans, up to `limit`: phase 1's repairs (with `rf`), then the moves, each
    (partition, source, target, add: planned to add a replica)."""
    repairs = plan_repairs(keeper, layout, rf, failed) if rf else []
    plans = [(*x, True) for x in repairs]
    plans += [(*x, False) for x in plan_cycle(keeper, layout, limit, failed | {p for p, _, _ in repairs})]
    return plans[:limit]


def rebalance_cycle(keeper: Keeper, layout: Layout, coordinator: str, limit: int, bugs=frozenset(),
                    failed: frozenset[str] = frozenset(), rf: int | None = None) -> list:
    """One cycle: its plans (`plan`), StartClone each (a plan whose CLONE is refused is left out)."""
    from protocol.assignment import GuardFailed
    started = []
    for p, s, t, add in plan(keeper, layout, limit, failed, rf):
        try:
            started.append((p, s, t, start_clone(keeper, layout, p, s, t, coordinator, bugs, add=add)))
        except GuardFailed:
            continue
    return started
