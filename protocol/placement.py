"""Placement beyond the RFC ("future work"): fault domains and capacities, and each replica's share.

A replica may declare a fault domain (an availability zone, a rack) and a disk capacity. With
domains, no two owners of a partition are in one domain (anti-affinity). With capacities, a
replica's share of the ownerships is proportional to its capacity. With neither, every replica
is its own domain and all capacities are equal: the RFC's counting (spec `LeastLoaded`) exactly.

Each replica publishes its own declaration in `replicas/{r}/placement` (what it would read from
its server config and its disks); allocators and SYSTEM REBALANCE read them.

Shares are water-filled: a domain holds at most one copy of each partition, so a domain whose
capacity-proportional share would exceed that is capped at it and the rest is spread over the
others (without configured domains, the cap is per replica). Shares are exact fractions, so the
bands derived from them (`rebalance.py`) have no rounding error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping

from protocol.keeper import Keeper, NoNodeError
from protocol.layout import Layout


class PlacementError(ValueError):
    """A placement that is incomplete or cannot hold the replication factor; names the problem."""


@dataclass(frozen=True)
class Placement:
    """Replica domains and capacities, partition sizes, and (for allocation) bytes in use."""

    domains: Mapping[str, str] | None = None     # replica -> fault domain
    capacities: Mapping[str, int] | None = None  # replica -> disk bytes (any positive unit)
    sizes: Mapping[str, int] | None = None       # partition -> bytes, for planning by bytes
    used: Mapping[str, int] | None = None        # replica -> bytes on disk, as last published

    @property
    def configured(self) -> bool:
        return bool(self.domains or self.capacities or self.sizes or self.used)

    def domain(self, replica: str) -> str:
        """A replica's fault domain; without configured domains, the replica itself."""
        return self.domains[replica] if self.domains else replica

    def capacity(self, replica: str) -> int:
        return self.capacities[replica] if self.capacities else 1

    def size(self, partition: str) -> int:
        return self.sizes[partition] if self.sizes else 1

    def check(self, replicas, partitions=()) -> "Placement":
        """Every replica has a domain and a positive capacity where those are configured, every
        partition a positive size where sizes are; raises PlacementError naming the first gap."""
        for name, table, keys, what in (("domains", self.domains, replicas, "replica"),
                                        ("capacities", self.capacities, replicas, "replica"),
                                        ("sizes", self.sizes, partitions, "partition")):
            if not table:
                continue
            missing = sorted(k for k in keys if k not in table)
            if missing:
                raise PlacementError(f"{name} are configured but {what} {missing[0]!r} has none "
                                     f"({len(missing)} {what}s without)")
            if name == "domains":
                bad = sorted(k for k in keys if not isinstance(table[k], str) or not table[k])
                if bad:
                    raise PlacementError(f"domain of replica {bad[0]!r} must be a non-empty string, not {table[bad[0]]!r}")
            else:
                bad = sorted(k for k in keys if isinstance(table[k], bool) or not isinstance(table[k], int)
                             or table[k] <= 0)
                if bad:
                    raise PlacementError(f"{name[:-1] if name == 'sizes' else 'capacity'} of {what} {bad[0]!r} "
                                         f"must be a positive whole number of bytes, not {table[bad[0]]!r}")
        return self


NONE = Placement()


def shares(replicas: list[str], total: int, per_domain_cap: int, placement: Placement = NONE) -> dict[str, Fraction]:
    """Each replica's share of `total` (ownerships, or bytes of ownerships), proportional to its
    capacity, no domain above `per_domain_cap` (one copy of every partition). Raises
    PlacementError when the domains cannot hold `total` (fewer domains than replicas of a partition)."""
    if not replicas:
        raise PlacementError("no replicas to place partitions on")
    by_domain: dict[str, list[str]] = {}
    for r in replicas:
        by_domain.setdefault(placement.domain(r), []).append(r)
    cap_of = {d: sum(placement.capacity(r) for r in rs) for d, rs in by_domain.items()}
    if total > per_domain_cap * len(by_domain):
        raise PlacementError(f"{total} to place but {len(by_domain)} fault domains hold at most {per_domain_cap} each: "
                             f"the replication factor needs more domains")
    capped: set[str] = set()
    while True:
        free = [d for d in by_domain if d not in capped]
        level = Fraction(total - per_domain_cap * len(capped), sum(cap_of[d] for d in free)) if free else Fraction(0)
        over = {d for d in free if level * cap_of[d] > per_domain_cap}
        if not over:
            break
        capped |= over
    out = {}
    for d, rs in by_domain.items():
        for r in rs:
            out[r] = (Fraction(per_domain_cap * placement.capacity(r), cap_of[d]) if d in capped
                      else level * placement.capacity(r))
    return out


def allowed_owner(placement: Placement, owners, leaving: str | None, candidate: str) -> bool:
    """May `candidate` own a partition now owned by `owners` once `leaving` has left it? Not an
    owner already, and (with domains) in no domain of the owners that stay."""
    if candidate in owners:
        return False
    if not placement.domains:
        return True
    d = placement.domains[candidate]
    return all(placement.domains[o] != d for o in owners if o != leaving)


# --- Keeper: what each replica declares ------------------------------------------------------

def publish_placement(keeper: Keeper, layout: Layout, replica: str, domain: str | None = None,
                      capacity_bytes: int | None = None, used_bytes: int | None = None) -> None:
    """Write `replicas/{r}/placement` (a replica declares its domain and disk; used_bytes as it changes)."""
    value = {"domain": domain, "capacity_bytes": capacity_bytes, "used_bytes": used_bytes}
    Placement(domains={replica: domain} if domain is not None else None,
              capacities={replica: capacity_bytes} if capacity_bytes is not None else None,
              used={replica: used_bytes} if used_bytes is not None else None).check([replica])
    if used_bytes is not None and (isinstance(used_bytes, bool) or not isinstance(used_bytes, int) or used_bytes < 0):
        raise PlacementError(f"used_bytes of replica {replica!r} must be a whole number >= 0, not {used_bytes!r}")
    data = json.dumps(value).encode()
    path = layout.placement(replica)
    if keeper.exists(path) is None:
        keeper.create(path, data)
    else:
        keeper.set(path, data)


def read_placement(keeper: Keeper, layout: Layout, replicas: list[str]) -> Placement:
    """The placement the replicas declared; NONE when none declared anything (the RFC's counting).
    A domain or capacity declared by some replicas and not others is refused, naming one."""
    declared = {}
    for r in replicas:
        try:
            declared[r] = json.loads(keeper.get(layout.placement(r))[0])
        except NoNodeError:
            declared[r] = {}
    tables = {}
    for key, name in (("domain", "domains"), ("capacity_bytes", "capacities"), ("used_bytes", "used")):
        values = {r: d[key] for r, d in declared.items() if d.get(key) is not None}
        if values and len(values) < len(replicas) and key != "used_bytes":
            missing = sorted(set(replicas) - set(values))
            raise PlacementError(f"replicas declare {name} but {missing[0]!r} declares none")
        tables[name] = values or None
    if tables["used"] and len(tables["used"]) < len(replicas):
        tables["used"] = None  # bytes in use are compared only when every replica has published them
    return Placement(**tables).check(replicas)


# --- allocation on first INSERT -------------------------------------------------------------

def fill(placement: Placement, replica: str, load: int) -> tuple[Fraction, Fraction, int]:
    """How full a replica is, for allocation: bytes in use per byte of capacity when every active
    replica has published its bytes, else partitions per byte of capacity; then partitions per
    capacity, so replicas of equal bytes (all new: none written yet) still spread; then the
    larger disk, which a partition can give at most one copy to (it would fall behind its share
    if equal fills went to the smaller ones)."""
    by_count = Fraction(load, placement.capacity(replica))
    by_bytes = Fraction(placement.used[replica], placement.capacity(replica)) if placement.used else by_count
    return by_bytes, by_count, -placement.capacity(replica)


def least_filled(active: list[str], load: dict[str, int], rf: int, placement: Placement, order: list[str]) -> list[str]:
    """The spec's LeastLoaded(rf) with domains and capacities: least full first (ties in the given
    `order`), skipping a replica whose domain is already chosen. Raises PlacementError when the
    active replicas span fewer than rf domains."""
    domains = {placement.domain(r) for r in active}
    if len(domains) < rf:
        raise PlacementError(f"replication_factor {rf} but the active replicas span {len(domains)} fault domains "
                             f"({', '.join(sorted(domains))})")
    chosen, taken = [], set()
    for r in sorted(order, key=lambda r: fill(placement, r, load.get(r, 0))):
        if placement.domain(r) not in taken:
            chosen.append(r)
            taken.add(placement.domain(r))
            if len(chosen) == rf:
                break
    return chosen


def is_least_filled(owners, active: list[str], load: dict[str, int], rf: int, placement: Placement) -> bool:
    """May an allocator choose `owners`? rf distinct active replicas in distinct domains, none of
    which could be swapped for a less full active replica without two owners in one domain."""
    owners = set(owners)
    if len(owners) != rf or not owners <= set(active):
        return False
    if len({placement.domain(o) for o in owners}) != rf:
        return False
    key = {r: fill(placement, r, load.get(r, 0))[:2] for r in active}  # the larger-disk tie-break is a preference
    return all(key[x] <= key[y] or placement.domain(y) in {placement.domain(z) for z in owners - {x}}
               for x in owners for y in set(active) - owners)
