"""What SYSTEM REBALANCE starts, and when: limits per table, per source and per target, and the
order in which planned moves are started.

The RFC leaves "how many partitions to migrate simultaneously" open and the spec models one
table-wide limit (`MaxConcurrentMigrations`). A limit per table does not say where the bytes
flow: with 4 per table and the plan's order, all four first copies went to one new replica and
the RFC scenario took 2.4x its physical bound (makespan.py). What bounds a migration is the
source's disk and the target's ingest, so the limits here are per source (ClickHouse's
`replicated_max_parallel_sends`) and per target (`background_fetches_pool_size`), and the
least busy source and target go first, the one with the most bytes still to send breaking ties
(the longest queue is the one that sets the makespan).

How many at once (the RFC's open question): no order beats the single copies' total time divided
by the number in flight (makespan.bound_under), so a limit per table must be at least that total
over the physical bound before the order matters: 3,200 s / 350 s, 10, on the RFC scenario at
10 GB/s targets, and it grows with the cluster (about 100 for 50 -> 60 replicas). A fixed table-wide
limit is therefore the wrong knob: at 16 the RFC scenario meets its bound and 50 -> 60 takes 3x it.
The default schedule has no table-wide limit of its own (a table's own cap, MaxConcurrentMigrations,
still applies through AdminReassign's guard) and bounds what each disk and each target share.

The default: limits in proportion to the bytes left, largest partition first. Fetches share a
source's read and a target's ingest max-min fairly, so a replica's rate follows the number of
CLONEs it has in flight. Equal limits (2 per source, 16 per target, least busy first: the
default until 2026-11-30, `Schedule.least_busy`) give every source the same rate, and the
source with the most bytes to send finishes last, alone; 16 fetches into a target that takes in
2.5 sources' worth each run at a sixteenth of it, and the largest partitions, started with the
rest, end last, alone and slow. So `per_source` and `per_target` are the limits of the replica
with the most bytes left (in CLONEs not started and in flight); another replica's is that limit
times its share of those bytes, rounded, and at least 1, and among the moves these allow the
least busy source and target go first, then the largest partition (`largest_first`: the big
copies early, the small ones fill the tail). It needs no rates, only partition sizes (with none
declared, partitions count alike). BENCHMARKS.md, "makespan", measures it against the physical
bound: within 1.05x on the 54 cells of its table (the equal limits: 46, the worst 1.18x), and
on 99 cells it was not tuned on (other seeds, shapes and ingests) within 1.05x on 75 (equal
limits 50, `Schedule.matched` 81), the worst 1.23x. Closer needs the rates, which ClickHouse does
not measure (`matched` takes their ratio as a setting, as background_fetches_pool_size is one).

Every move started is an AdminReassign the spec allows whatever the order (its guard is the
migration's, not the order's), so the rule changes time, not safety. The landed rule (per table
only, in plan order; `Schedule.table_limit`) is kept to compare against: it is also the spec's
AdminRebalance order (most loaded to least loaded) when one move is started per call.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple

from protocol.placement import NONE, Placement


class Running(NamedTuple):
    """A migration in flight; `copying` while in CLONE (after SWITCH it only waits for CLEANUP)."""

    partition: str
    src: str
    dst: str
    copying: bool = True


# plan_order: the plan's order; least_busy: the least busy source and target, then the most bytes
# still to send and fetch; largest_first: the least busy source and target, then the largest
# partition (longest processing time first, which leaves the small copies for the tail).
RULES = ("plan_order", "least_busy", "largest_first")


@dataclass(frozen=True)
class Schedule:
    # The defaults are SYSTEM REBALANCE's (module docstring: why these, and why no table-wide one).
    per_table: int | None = None    # migrations in flight per table, any state (None: no limit of the schedule's)
    per_source: int | None = 2      # CLONEs reading from one source replica (replicated_max_parallel_sends)
    per_target: int | None = 16     # CLONEs writing to one target replica (background_fetches_pool_size)
    rule: str = "largest_first"
    # per_source and per_target are the busiest replica's limits; another's is in proportion to
    # the bytes it has left (module docstring: why)
    proportional: bool = True

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"unknown start rule {self.rule!r}; rules are {', '.join(RULES)}")
        for name in ("per_table", "per_source", "per_target"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a whole number >= 1 (or None for no limit), not {v!r}")

    @classmethod
    def table_limit(cls, n: int) -> "Schedule":
        """The landed rule: at most n in flight per table, started in plan order, no other limit."""
        return cls(per_table=n, per_source=None, per_target=None, rule="plan_order", proportional=False)

    @classmethod
    def least_busy(cls, per_table: int | None = None, per_source: int | None = 2,
                   per_target: int | None = 16) -> "Schedule":
        """Least busy source and target first under equal limits (the default until 2026-11-30).
        Defaults: no table-wide limit, 2 per source (one per new replica in the RFC scenario), 16
        per target (ClickHouse's background_fetches_pool_size)."""
        return cls(per_table, per_source, per_target, "least_busy", proportional=False)

    @classmethod
    def matched(cls, read: float, ingest: float, per_table: int | None = None, per_source: int | None = 2) -> "Schedule":
        """Per target as many fetches as fill its ingest from sources reading `read` each (ceil of
        the ratio, at least 2), the largest partition first (module docstring: why)."""
        if not (read > 0 and ingest > 0):
            raise ValueError(f"read and ingest rates must be positive, not {read!r} and {ingest!r}")
        return cls(per_table, per_source, max(2, math.ceil(ingest / read - 1e-9)), "largest_first", proportional=False)

    def capped(self, limit: int | None) -> "Schedule":
        """This schedule under a table's own cap on migrations in flight (None: no cap)."""
        if limit is None or (self.per_table is not None and self.per_table <= limit):
            return self
        return replace(self, per_table=limit)

    def describe(self) -> str:
        limits = [f"{v} per {k}" for k, v in (("table", self.per_table), ("source", self.per_source),
                                              ("target", self.per_target)) if v]
        shares = ", in proportion to the bytes left" if self.proportional and (self.per_source or self.per_target) else ""
        return f"{self.rule.replace('_', ' ')}, " + (", ".join(limits) or "no limit") + shares

    def starts(self, plan: list[tuple[str, str, str]], running: list[Running],
               placement: Placement = NONE) -> Iterator[tuple[str, str, str]]:
        """The planned moves to start now, one at a time. The caller appends each one it did
        start to `running` before asking for the next (a refused one is not offered again)."""
        size = placement.size if placement.sizes else (lambda p: 1)
        offered: set[int] = set()
        # Bytes each source has still to send and each target to fetch, over the moves not yet
        # offered: kept as the moves are offered, not summed over the plan again for each start
        # (with no table-wide limit one call starts hundreds of moves of a large plan).
        to_send, to_fetch = Counter(), Counter()
        for p, src, dst in plan:
            to_send[src] += size(p)
            to_fetch[dst] += size(p)
        source_limit, target_limit = self._limits(to_send, to_fetch, running, size)
        while self.per_table is None or len(running) < self.per_table:
            sending = Counter(m.src for m in running if m.copying)
            fetching = Counter(m.dst for m in running if m.copying)
            moving = {m.partition for m in running}
            candidates = [(i, m) for i, m in enumerate(plan) if i not in offered and m[0] not in moving
                          and (self.per_source is None or sending[m[1]] < source_limit(m[1]))
                          and (self.per_target is None or fetching[m[2]] < target_limit(m[2]))]
            if not candidates:
                return
            if self.rule == "plan_order":
                i, move = candidates[0]
            elif self.rule == "largest_first":
                i, move = min(candidates, key=lambda c: (sending[c[1][1]], fetching[c[1][2]], -size(c[1][0]), c[0]))
            else:
                i, move = min(candidates, key=lambda c: (sending[c[1][1]], fetching[c[1][2]],
                                                         -to_send[c[1][1]], -to_fetch[c[1][2]], c[0]))
            offered.add(i)
            to_send[move[1]] -= size(move[0])
            to_fetch[move[2]] -= size(move[0])
            yield move

    def _limits(self, to_send: Counter, to_fetch: Counter, running: list[Running], size):
        """Each source's and target's limit on CLONEs for this call: per_source and per_target,
        or with `proportional` those times the replica's share of the bytes left (`to_send` and
        `to_fetch`, the moves not started, and the CLONEs in flight) against the replica with the
        most, rounded, at least 1. Fixed for the call: the bytes left change as CLONEs end, and
        the caller asks again then."""
        if not self.proportional:
            return (lambda r: self.per_source), (lambda r: self.per_target)
        out, into = Counter(to_send), Counter(to_fetch)
        for m in running:
            if m.copying:
                out[m.src] += size(m.partition)
                into[m.dst] += size(m.partition)

        def share(limit, left):
            most = max(left.values(), default=0)
            return lambda r: max(1, round(limit * left[r] / most)) if limit and most else limit
        return share(self.per_source, out), share(self.per_target, into)


def in_flight_moves(in_flight: dict[str, dict]) -> list[Running]:
    """Running migrations from their selective/migrations records (partition -> record)."""
    return [Running(p, m["src"], m["dst"], m["state"] == "clone") for p, m in sorted(in_flight.items())]
