"""The fewest moves of a rebalance, exactly, as a min-cost flow (networkx): the planner's test oracle.

A final state gives each partition its number of owners, at most one per domain, every replica
a load in its band [lo, hi], busy partitions their owners of today; its number of moves is the
number of (partition, owner) pairs it adds. So:

    partition p --1--> (p, domain D) --1, cost 0 if r owns p today else 1--> replica r in D
    replica r: demand lo - fixed load, and an edge to a slack node for the hi - lo more it may hold

Exact, and slow: |partitions| x |replicas| edges. For small inputs only.
"""

from __future__ import annotations

import networkx as nx

from protocol.placement import NONE, Placement
from protocol.rebalance import bands


def min_moves(assignments: dict, replicas: list[str], busy=frozenset(), placement: Placement = NONE) -> int | None:
    """The fewest moves to a balanced state; None when there is none."""
    band = bands(assignments, replicas, placement)
    fixed = {r: 0 for r in replicas}
    for p in busy:
        for o in assignments[p]:
            fixed[o] += 1
    g = nx.DiGraph()
    free_total = sum(len(o) for p, o in assignments.items() if p not in busy)
    need = 0
    for r in replicas:
        lo, hi = band[r]
        if fixed[r] > hi:
            return None
        floor = max(lo, fixed[r])
        g.add_node(("replica", r), demand=floor - fixed[r])
        need += floor - fixed[r]
        g.add_edge(("replica", r), "slack", capacity=hi - floor, weight=0)
    if need > free_total:
        return None
    g.add_node("slack", demand=free_total - need)
    for p, owners in assignments.items():
        if p in busy:
            continue
        g.add_node(("partition", p), demand=-len(owners))
        for r in replicas:
            d = placement.domain(r)
            g.add_edge(("partition", p), ("domain", p, d), capacity=1, weight=0)
            g.add_edge(("domain", p, d), ("replica", r), capacity=1, weight=0 if r in owners else 1)
    try:
        cost, _ = nx.network_simplex(g)
    except nx.NetworkXUnfeasible:
        return None
    return cost
