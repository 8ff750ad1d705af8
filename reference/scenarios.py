"""Clusters to plan and simulate: the RFC's growth scenario and random ones at scale.

Assignments are made as the RFC allocates on first INSERT (the least loaded replicas, ties
broken by a seeded shuffle), so the replicas that exist start balanced, as they would be.
"""

from __future__ import annotations

import random



def allocated(replicas: list[str], partitions: list[str], rf: int, seed: int = 1) -> dict[str, tuple[str, ...]]:
    """Partitions allocated one after another to the `rf` least loaded replicas."""
    if rf > len(replicas):
        raise ValueError(f"replication factor {rf} is above the {len(replicas)} replicas")
    rng = random.Random(seed)
    load = {r: 0 for r in replicas}
    out = {}
    for p in partitions:
        order = list(replicas)
        rng.shuffle(order)
        owners = sorted(order, key=load.get)[:rf]
        for o in owners:
            load[o] += 1
        out[p] = tuple(sorted(owners))
    return out


def growth(old: int = 10, new: int = 2, partitions: int = 192, rf: int = 2, seed: int = 1):
    """The RFC's scenario by default: 192 partitions on 10 replicas at RF 2, then 2 replicas join.
    Returns (assignments, all replicas)."""
    before = [f"r{i:02d}" for i in range(1, old + 1)]
    after = before + [f"r{i:02d}" for i in range(old + 1, old + new + 1)]
    names = [f"p{i:04d}" for i in range(partitions)]
    return allocated(before, names, rf, seed), after


def random_cluster(replicas: int, partitions: int, rf: int, new_fraction: float = 0.1, seed: int = 1):
    """`partitions` on a random `rf` of the first (1 - new_fraction) replicas each, the rest new
    and empty: both a skew to even out and new replicas to fill. Returns (assignments, replicas)."""
    rng = random.Random(seed)
    old = [f"r{i:05d}" for i in range(max(rf, round(replicas * (1 - new_fraction))))]
    names = old + [f"n{i:05d}" for i in range(replicas - len(old))]
    return {f"p{i:07d}": tuple(rng.sample(old, rf)) for i in range(partitions)}, names
