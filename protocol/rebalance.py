"""SYSTEM REBALANCE: a plan that brings every replica within one partition of its share with the
fewest moves, and the moves it starts now (which ones and when: scheduler.py).

Share and band. The N ownerships (partition x owner; a CLONE in flight counted as switched,
FINDINGS F13) are shared out in proportion to capacity, no fault domain holding two copies of a
partition (placement.shares; all capacities equal and every replica its own domain unless
configured). A replica is *balanced* when its load is strictly within one partition of its
share: lo = floor(share) <= load <= ceil(share) = hi. With equal capacities and no domains that
is load in {b, b+1}, b = N // R: max - min <= 1.

Lower bound. A move lowers one load by one and raises another by one, so no plan is shorter than
    LB = max(sum (load - hi)+, sum (lo - load)+)
(for equal shares this is the sorted formula: b + 1 for the N % R most loaded, b for the rest).
A plan is *minimal* when no plan reaching a balanced state, moving no busy partition, giving no
replica a partition it owns and no domain two owners of one partition, has fewer moves.

Why a greedy reaches LB. Call a move improving when it lowers LB: from a replica above hi to one
below lo (E = D), or, when one side dominates, from above hi to below hi (E > D) or from above lo
to below lo (E < D). Such a source holds more partitions than such a sink, so it holds one the
sink does not (pigeonhole): with every partition movable, no domains and equal capacities, an
improving move always exists until LB = 0 (with unequal capacities a source may hold fewer
partitions than a sink, all owned there too, and LB is not reachable), and the greedy (most above its share to most below, as the spec's
AdminRebalance does) makes exactly LB moves. It is also a min-cost flow's successive shortest
path: a replica only gives or only takes, so every path from a source to a sink in the residual
graph costs at least one move, and a direct move costs one.

When direct moves run out (a partition in flight may not move, or a domain forbids the sink),
the naive greedy is stuck although a plan of LB moves may exist by re-routing an earlier move
(an augmenting swap). Then the plan goes on by successive shortest paths in the residual graph
of replicas: an edge x -> y is a partition x holds now that y may take, costing one move, or
minus one when it undoes a planned move (networkx.bellman_ford_path: some costs are
negative). That is the min-cost flow again, so the plan stays minimal; only when no path is left
is there no balanced plan (RebalanceError). It builds |partitions| x |replicas| edges per
augmentation, so it is for the small leftovers that direct moves cannot place, not for a
cluster (the min-cost flow over all partition x replica edges took 166 s at 100 x 10,000).

The plan is the difference between the final owners and today's, in the order the moves were
found (most loaded source first). By bytes (placement.sizes): `_plan_by_bytes`, below.
"""

from __future__ import annotations

import heapq
import math

from protocol.assignment import read_assignment
from protocol.keeper import Keeper
from protocol.layout import Layout
from protocol.migration import MigrationError, admin_reassign, migrations_in_flight, read_migration
from protocol.placement import NONE, Placement, PlacementError, allowed_owner, read_placement, shares

Move = tuple[str, str, str]  # (partition, from replica, to replica)


class RebalanceError(ValueError):
    """No plan exists that evens out the replicas under the constraints."""


def targets(loads: dict[str, int]) -> dict[str, int]:
    """The equal-share targets: N // R each, the remainder to the most loaded (fewest moves)."""
    total, n = sum(loads.values()), len(loads)
    base, extra = divmod(total, n)
    by_load = sorted(loads, key=lambda r: (-loads[r], r))
    return {r: base + (1 if i < extra else 0) for i, r in enumerate(by_load)}


def loads_of(assignments: dict[str, tuple[str, ...]], replicas) -> dict[str, int]:
    loads = {r: 0 for r in replicas}
    for owners in assignments.values():
        for o in owners:
            loads[o] += 1
    return loads


def bands(assignments: dict[str, tuple[str, ...]], replicas: list[str],
          placement: Placement = NONE) -> dict[str, tuple[int, int]]:
    """(lo, hi) per replica: the loads strictly within one partition of its share."""
    n = sum(len(o) for o in assignments.values())
    return {r: (math.floor(s), math.ceil(s)) for r, s in shares(replicas, n, len(assignments), placement).items()}


def lower_bound(loads: dict[str, int], band: dict[str, tuple[int, int]]) -> int:
    """No plan reaching the bands has fewer moves (see the module docstring)."""
    return max(sum(max(0, loads[r] - hi) for r, (_, hi) in band.items()),
               sum(max(0, lo - loads[r]) for r, (lo, _) in band.items()))


def is_balanced(loads: dict[str, int], band: dict[str, tuple[int, int]]) -> bool:
    return all(lo <= loads[r] <= hi for r, (lo, hi) in band.items())


def apply_moves(assignments: dict[str, tuple[str, ...]], moves, placement: Placement = NONE) -> dict[str, tuple[str, ...]]:
    """The assignments after `moves`, one at a time; a move onto an owner, from a non-owner or
    into a domain the partition has is refused (RebalanceError naming it)."""
    out = {p: tuple(o) for p, o in assignments.items()}
    for p, src, dst in moves:
        if src not in out[p] or not allowed_owner(placement, out[p], src, dst):
            raise RebalanceError(f"move of {p} from {src} to {dst} is not allowed: owners are {list(out[p])}")
        out[p] = tuple(sorted((set(out[p]) - {src}) | {dst}))
    return out


def plan_rebalance(assignments: dict[str, tuple[str, ...]], replicas: list[str],
                   busy=frozenset(), placement: Placement | None = None) -> list[Move]:
    """Moves (partition, from, to) that bring every replica within one partition of its share
    with the fewest moves; [] when balanced. `busy` partitions (already migrating) do not move.
    With placement.sizes the shares are of bytes (`_plan_by_bytes`)."""
    placement = placement or NONE
    unknown = {o for owners in assignments.values() for o in owners} - set(replicas)
    if unknown:
        raise RebalanceError(f"assignments name replicas that are not in the replica list: {sorted(unknown)}")
    try:
        placement.check(replicas, assignments)
        if placement.sizes:
            return _plan_by_bytes(assignments, replicas, set(busy), placement)
        return _CountPlan(assignments, replicas, set(busy), placement).run()
    except PlacementError as e:
        raise RebalanceError(str(e)) from None


class _CountPlan:
    """The plan by partition counts: direct improving moves, then shortest augmenting paths."""

    def __init__(self, assignments, replicas, busy, placement: Placement):
        self.replicas, self.placement = sorted(replicas), placement
        self.orig = {p: frozenset(o) for p, o in assignments.items()}
        self.owners = {p: set(o) for p, o in assignments.items()}
        self.load = {r: 0 for r in self.replicas}
        # Ordered sets (dicts), so plans do not depend on string hashing.
        self.movable: dict[str, dict[str, None]] = {r: {} for r in self.replicas}
        for p in sorted(assignments):
            for o in sorted(assignments[p]):
                self.load[o] += 1
                if p not in busy:
                    self.movable[o][p] = None
        n = sum(self.load.values())
        self.share = shares(self.replicas, n, len(assignments), placement)
        self.share_f = {r: float(s) for r, s in self.share.items()}  # heap keys; bands are exact
        self.lo = {r: math.floor(s) for r, s in self.share.items()}
        self.hi = {r: math.ceil(s) for r, s in self.share.items()}
        self.excess = sum(max(0, self.load[r] - self.hi[r]) for r in self.replicas)
        self.deficit = sum(max(0, self.lo[r] - self.load[r]) for r in self.replicas)
        self.made: list[Move] = []
        self.moved: set[str] = set()
        self.busy = busy

    # --- which replicas may give and take (an improving move lowers max(excess, deficit)) ---
    def can_give(self, r: str) -> bool:
        return self.load[r] > (self.hi[r] if self.excess >= self.deficit else self.lo[r])

    def can_take(self, r: str) -> bool:
        return self.load[r] < (self.hi[r] if self.excess > self.deficit else self.lo[r])

    def dev(self, r: str) -> float:
        return self.load[r] - self.share_f[r]

    def apply(self, p: str, src: str, dst: str) -> None:
        for r, d in ((src, -1), (dst, 1)):
            self.excess -= max(0, self.load[r] - self.hi[r])
            self.deficit -= max(0, self.lo[r] - self.load[r])
            self.load[r] += d
            self.excess += max(0, self.load[r] - self.hi[r])
            self.deficit += max(0, self.lo[r] - self.load[r])
        self.owners[p].discard(src)
        self.owners[p].add(dst)
        self.moved.add(p)
        for o in self.owners[p]:
            if o != dst and p in self.movable[o]:
                del self.movable[o][p]  # to the back: pick() looks for partitions not moved yet first
                self.movable[o][p] = None
        del self.movable[src][p]
        self.movable[dst][p] = None
        self.made.append((p, src, dst))

    def pick(self, src: str, dst: str) -> str | None:
        """A partition src may give dst; one the plan does not move yet if there is one, as two
        moves of a partition cannot run at once (the second waits for the first's CLEANUP)."""
        later = None
        for p in self.movable[src]:
            if allowed_owner(self.placement, self.owners[p], src, dst):
                if p not in self.moved:
                    return p
                later = later or p
        return later

    # --- the direct phase ------------------------------------------------------------------
    def direct(self) -> None:
        """Most above its share to most below, while such a move exists. Heaps with stale
        entries skipped (a replica's key changes by one each move)."""
        givers = [(-self.dev(r), r) for r in self.replicas]
        takers = [(self.dev(r), r) for r in self.replicas]
        heapq.heapify(givers)
        heapq.heapify(takers)
        while max(self.excess, self.deficit) > 0:
            move = self._find_direct(givers, takers)
            if move is None:
                return
            self.apply(*move)
            _, src, dst = move
            heapq.heappush(givers, (-self.dev(src), src))
            heapq.heappush(takers, (self.dev(dst), dst))
            heapq.heappush(givers, (-self.dev(dst), dst))
            heapq.heappush(takers, (self.dev(src), src))

    def _valid(self, entries: list, sign: int, limit: int | None = None) -> list:
        """Pop up to `limit` current (non-stale) entries that may give (sign -1) or take (+1), in
        order; the caller pushes them back."""
        out, seen = [], set()
        while entries and (limit is None or len(out) < limit):
            key, r = entries[0]
            if key != sign * self.dev(r) or r in seen:
                heapq.heappop(entries)  # stale, or a duplicate of a current entry
                continue
            if not (self.can_give(r) if sign < 0 else self.can_take(r)):
                break  # keys are ordered and eligibility is a threshold on them: no one further is
            seen.add(r)
            out.append(heapq.heappop(entries))
        return out

    def _find_direct(self, givers: list, takers: list) -> Move | None:
        popped_g, popped_t = [], []
        try:
            while True:
                g = self._valid(givers, -1, limit=1)  # the next giver
                if not g:
                    return None
                popped_g += g
                src = g[0][1]
                # Takers in order: the first usually fits; all of them are popped only when not.
                if not popped_t:
                    popped_t += self._valid(takers, 1, limit=1)
                i = 0
                while True:
                    if i == len(popped_t):
                        more = self._valid(takers, 1)
                        if not more:
                            break
                        popped_t += more
                    p = self.pick(src, popped_t[i][1])
                    if p is not None:
                        return p, src, popped_t[i][1]
                    i += 1
        finally:
            for e in popped_g:
                heapq.heappush(givers, e)
            for e in popped_t:
                heapq.heappush(takers, e)

    # --- the augmenting phase ------------------------------------------------------------
    def augment(self) -> bool:
        """One unit along a shortest path of moves from where it must leave to where it must go;
        False if there is none. The residual graph of the min-cost flow, at replica level: a
        path starts at a replica above its band (or, when deficits dominate, at a replica that
        may give one within its band, through `slack`) and ends at one below its band (or at one
        that may take one within its band); it may pass `slack` once, as a replica taking one
        within its band and another giving one."""
        import networkx as nx  # here, not at the top: it is most of `python -m reference`'s start-up
        g = nx.DiGraph()
        via: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for x in self.replicas:
            for p in self.movable[x]:
                for y in self.replicas:
                    if y != x and allowed_owner(self.placement, self.owners[p], x, y):
                        cost = (y not in self.orig[p]) - (x not in self.orig[p])
                        via.setdefault((x, y), []).append((cost, p))
        for (x, y), options in via.items():
            options.sort()
            g.add_edge(x, y, weight=options[0][0])
        start, end, slack = ("start",), ("end",), ("slack",)
        g.add_nodes_from([start, end, slack])
        for r in self.replicas:
            if self.load[r] > self.hi[r]:
                g.add_edge(start, r, weight=0)
            if self.load[r] < self.lo[r]:
                g.add_edge(r, end, weight=0)
            if self.load[r] < self.hi[r]:
                g.add_edge(r, slack, weight=0)
            if self.load[r] > self.lo[r]:
                g.add_edge(slack, r, weight=0)
        if self.deficit > self.excess:
            g.add_edge(start, slack, weight=0)
        if self.excess > self.deficit:
            g.add_edge(slack, end, weight=0)
        try:
            path = nx.bellman_ford_path(g, start, end)
        except nx.NetworkXNoPath:
            return False
        hops = [(x, y) for x, y in zip(path, path[1:]) if (x, y) in via]
        for x, y in hops:
            cost = g[x][y]["weight"]
            # An earlier move on this path may have changed the partition's owners: take one of
            # the same cost that is still allowed.
            p = next((p for c, p in via[(x, y)] if c == cost and x in self.owners[p]
                      and allowed_owner(self.placement, self.owners[p], x, y)), None)
            if p is None:
                raise RebalanceError(f"augmenting path {path} is not realisable at {x} -> {y}")
            self.apply(p, x, y)
        return True

    def run(self) -> list[Move]:
        self.direct()
        while max(self.excess, self.deficit) > 0:
            if not self.augment():
                out = {r: self.load[r] for r in self.replicas if not self.lo[r] <= self.load[r] <= self.hi[r]}
                raise RebalanceError(
                    f"no plan evens out the replicas: {out} stay outside their shares' bands "
                    f"{ {r: (self.lo[r], self.hi[r]) for r in out} } (moving no partition already migrating "
                    f"({len(self.busy)}), giving none to a replica or domain that has it)")
        return self.net_moves()

    def net_moves(self) -> list[Move]:
        """Today's owners to the final ones, one move per owner that changes, in the order found.
        Same-domain moves of a partition go first: then no step puts two owners in one domain."""
        first = {}
        for i, (p, src, dst) in enumerate(self.made):
            first.setdefault((p, src, dst), i)
            first.setdefault(p, i)
        out = []
        for p in {p for p, _, _ in self.made}:
            removed = sorted(self.orig[p] - self.owners[p])
            added = sorted(self.owners[p] - self.orig[p])
            dom = self.placement.domain
            pairs = []
            for x in list(removed):
                y = next((y for y in added if dom(y) == dom(x)), None)
                if y is not None:
                    pairs.append((x, y))
                    removed.remove(x)
                    added.remove(y)
            pairs += list(zip(removed, added))
            out += [(first.get((p, x, y), first[p] + 0.5), k, (p, x, y)) for k, (x, y) in enumerate(pairs)]
        return [m for _, _, m in sorted(out)]


def _plan_by_bytes(assignments, replicas, busy, placement: Placement) -> list[Move]:
    """The plan by bytes (placement.sizes), in proportion to capacity.

    Balanced: every replica's bytes strictly within one largest partition (s_max) of its share
    (with unit sizes and equal capacities, the count bands above). Finding the fewest moves is
    a subset-sum problem here, so the plan is a greedy with these guarantees, which the tests
    check: each move takes a partition out of a replica above its share into one below its
    share; a replica above its band gives its largest movable partitions to the replicas most
    below their shares (no move can push either across its band), then a replica below its band
    takes from those most above their shares; the bytes moved are at most
    sum (bytes - share - s_max)+ + sum (share - s_max - bytes)+ + s_max per replica out of band
    (the first two terms are each a lower bound for any plan). Stuck (every partition of the
    givers is busy or already on the takers' domains): RebalanceError naming the replica."""
    size = placement.size
    total_one_copy = sum(size(p) for p in assignments)
    used = {r: 0 for r in replicas}
    for p, owners in assignments.items():
        for o in owners:
            used[o] += size(p)
    share = shares(sorted(replicas), sum(used.values()), total_one_copy, placement)
    s_max = max((size(p) for p in assignments), default=0)
    owners = {p: set(o) for p, o in assignments.items()}
    # Each replica's movable partitions, largest first (ties by id, for a deterministic plan).
    held = {r: [] for r in replicas}
    for p in sorted(assignments, key=lambda p: (-size(p), p)):
        if p not in busy:
            for o in assignments[p]:
                held[o].append(p)
    moves: list[Move] = []

    def dev(r):
        return used[r] - share[r]

    def move_one(givers, takers) -> bool:
        for x in givers:
            for y in takers:
                for p in held[x]:
                    if x in owners[p] and allowed_owner(placement, owners[p], x, y):
                        owners[p] = (owners[p] - {x}) | {y}
                        held[x].remove(p)
                        held[y].append(p)  # may move on later only from y; order no longer by size there
                        held[y].sort(key=lambda q: (-size(q), q))
                        used[x] -= size(p)
                        used[y] += size(p)
                        moves.append((p, x, y))
                        return True
        return False

    while True:
        order = sorted(replicas, key=lambda r: (dev(r), r))
        over = [r for r in reversed(order) if dev(r) >= s_max]
        under = [r for r in order if dev(r) <= -s_max]
        if over:
            givers, takers = over[:1], [r for r in order if dev(r) < 0]
        elif under:
            givers, takers = [r for r in reversed(order) if dev(r) > 0], under[:1]
        else:
            return moves
        if not move_one(givers, takers):
            stuck = givers[0] if over else takers[0]
            raise RebalanceError(f"no move brings {stuck} within one largest partition ({s_max} bytes) of its share "
                                 f"{float(share[stuck]):.0f}: its partitions are busy or already on every "
                                 f"replica (or domain) that could take them")


# --- SYSTEM REBALANCE ----------------------------------------------------------------------

def planned_assignments(keeper: Keeper, layout: Layout) -> tuple[dict[str, tuple[str, ...]], dict[str, dict]]:
    """Every partition's owners as they will be once its CLONE in flight switches (F13), and the
    migrations in flight (partition -> its selective/migrations record)."""
    in_flight = {p: read_migration(keeper, layout, p)[0] for p in migrations_in_flight(keeper, layout)}
    assignments = {}
    for p in keeper.get_children(layout.assignments):
        owners = set(read_assignment(keeper, layout, p).owners)
        mig = in_flight.get(p)
        if mig and mig["state"] == "clone":
            owners = (owners - {mig["src"]}) | {mig["dst"]}  # plan as if it had switched: no move undone
        assignments[p] = tuple(sorted(owners))
    return assignments, in_flight


def system_rebalance(keeper: Keeper, layout: Layout, replicas: list[str], max_concurrent: int | None = None,
                     schedule=None, placement: Placement | None = None) -> list[Move]:
    """SYSTEM REBALANCE TABLE t: plan, then start the moves the schedule allows now (the rest on
    a later call). Returns the moves started.

    `schedule` (scheduler.Schedule) decides which and how many; the default is the largest
    partition first, at most 2 CLONEs per source and 16 per target for the replicas with the most
    bytes left and fewer, in proportion, for the others (scheduler.py says why). `max_concurrent` is the table's
    own cap on migrations in flight (None: none), which no schedule exceeds. `placement` defaults
    to what the replicas declared in Keeper (read_placement)."""
    from protocol.scheduler import Running, Schedule, in_flight_moves

    schedule = (schedule or Schedule()).capped(max_concurrent)
    assignments, in_flight = planned_assignments(keeper, layout)
    if placement is None:
        placement = read_placement(keeper, layout, replicas)
    try:
        plan = plan_rebalance(assignments, replicas, set(in_flight), placement)
    except RebalanceError:
        if in_flight:
            return []  # the leftovers need a partition that is migrating now: plan again once it is done
        raise
    running = in_flight_moves(in_flight)
    started = []
    for p, src, dst in schedule.starts(plan, running, placement):
        try:
            admin_reassign(keeper, layout, p, dst, src=src, max_concurrent=schedule.per_table)
        except MigrationError:
            continue
        running.append(Running(p, src, dst))
        started.append((p, src, dst))
    return started


__all__ = ["RebalanceError", "plan_rebalance", "system_rebalance", "lower_bound", "bands", "targets",
           "apply_moves", "is_balanced", "planned_assignments"]
