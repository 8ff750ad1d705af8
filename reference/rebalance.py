"""SYSTEM REBALANCE: a plan that evens out partitions per replica with the fewest moves.

Targets: the N ownerships are spread as N // R per replica, the remainder going to the replicas
that hold most now (so fewer rows move). Every move takes one ownership from a replica above its
target to one below, so the number of moves is fixed by the targets: the sum of the excesses.
What the flow decides is *which* partitions go where, under two constraints: a partition moves
only to a replica that does not own it, and at most once to a given replica. That is a
min-cost flow (networkx.min_cost_flow):

    over-target replica --1--> (partition it owns) --1--> under-target replica not owning it

with supply = excess and demand = deficit, and cost 1 per move, plus a small penalty for
moving a partition that is already migrating (such moves are left out entirely).
"""

from __future__ import annotations

import networkx as nx

from .keeper import Keeper
from .layout import Layout
from .assignment import read_assignment
from .migration import MigrationError, admin_reassign, migrations_in_flight, read_migration


class RebalanceError(ValueError):
    """No plan exists that evens out the replicas under the constraints."""


def targets(loads: dict[str, int]) -> dict[str, int]:
    total, n = sum(loads.values()), len(loads)
    base, extra = divmod(total, n)
    by_load = sorted(loads, key=lambda r: (-loads[r], r))
    return {r: base + (1 if i < extra else 0) for i, r in enumerate(by_load)}


def plan_rebalance(assignments: dict[str, tuple[str, ...]], replicas: list[str],
                   busy: set[str] = frozenset()) -> list[tuple[str, str, str]]:
    """Moves (partition, from, to) that bring every replica to its target; [] when balanced.
    `busy` partitions (already migrating) are not moved."""
    unknown = {o for owners in assignments.values() for o in owners} - set(replicas)
    if unknown:
        raise RebalanceError(f"assignments name replicas that are not in the replica list: {sorted(unknown)}")
    loads = {r: 0 for r in replicas}
    for owners in assignments.values():
        for o in owners:
            loads[o] += 1
    want = targets(loads)
    g = nx.DiGraph()
    for r in replicas:
        g.add_node(("replica", r), demand=want[r] - loads[r])  # negative demand = supply
    for p, owners in sorted(assignments.items()):
        if p in busy:
            continue
        for src in owners:
            if loads[src] > want[src]:
                g.add_edge(("replica", src), ("move", p, src), capacity=1, weight=0)
                for dst in replicas:
                    if dst not in owners and loads[dst] < want[dst]:
                        g.add_edge(("move", p, src), ("into", p, dst), capacity=1, weight=1)
        for dst in replicas:
            if dst not in owners and loads[dst] < want[dst]:
                g.add_edge(("into", p, dst), ("replica", dst), capacity=1, weight=0)
    try:
        flow = nx.min_cost_flow(g)
    except nx.NetworkXUnfeasible:
        raise RebalanceError(f"no plan evens out loads {loads} to {want} without giving a partition "
                             "the same replica twice (or without moving partitions already migrating)") from None
    moves = []
    for node, out in flow.items():
        if node[0] == "move":
            _, p, src = node
            moves += [(p, src, dst[2]) for dst, f in out.items() if f]
    return sorted(moves)


def system_rebalance(keeper: Keeper, layout: Layout, replicas: list[str], max_concurrent: int = 4) -> list:
    """SYSTEM REBALANCE TABLE t: plan, then start as many moves as the concurrency limit allows
    (the rest on a later call). Returns the moves started."""
    busy = set(migrations_in_flight(keeper, layout))
    assignments = {}
    for p in keeper.get_children(layout.assignments):
        owners = set(read_assignment(keeper, layout, p).owners)
        mig = read_migration(keeper, layout, p)[0] if p in busy else None
        if mig and mig["state"] == "clone":
            owners = (owners - {mig["src"]}) | {mig["dst"]}  # plan as if it had switched: no move undone
        assignments[p] = tuple(sorted(owners))
    started = []
    for p, src, dst in plan_rebalance(assignments, replicas, busy):
        if p in busy or len(busy) >= max_concurrent:
            continue
        try:
            admin_reassign(keeper, layout, p, dst, src=src, max_concurrent=max_concurrent)
        except MigrationError:
            continue
        busy.add(p)
        started.append((p, src, dst))
    return started
