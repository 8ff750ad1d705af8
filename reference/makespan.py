"""How long a plan of migrations takes: a bandwidth model and a fluid simulation of the CLONEs.

Model. A CLONE copies a partition's bytes from its source replica's disk to its target. Each
source disk reads at most `read` bytes/s and each target takes in at most `ingest` bytes/s,
shared by the CLONEs using it. Rates are max-min fair (progressive filling: every CLONE grows
at the same pace until a disk or target it uses is saturated), which is how concurrent fetches
share a disk or a link to first order. SWITCH and CLEANUP take no time (catch-up is a small
tail next to the bulk copy). Between events (a CLONE ending) rates are constant, so the
simulation jumps from event to event and is exact for the model; at each event the schedule
(scheduler.py) is asked what to start, as SYSTEM REBALANCE would be when a migration ends.

Why not a library: discrete-event libraries (SimPy) schedule processes and timeouts but do not
share a bandwidth among flows; the fluid rates are the whole model here, and they are 30 lines.

Bounds. No schedule beats the busiest source reading all it sends, the busiest target taking
all it receives, or the largest single copy:
    max(max_r out(r)/read(r), max_r in(r)/ingest(r), max_m bytes(m)/min(read(src), ingest(dst))).
Serial time (one migration at a time, PR #58132's balancer) is the sum of the single copies.

Under a schedule's limits. A migration never copies faster than it would alone (min of its
source's read and its target's ingest), so with at most k migrations in flight a table does at
most k single-copy seconds of work a second: no schedule with `per_table` k beats serial / k, and
likewise for one source's moves under `per_source` and one target's under `per_target`. The
largest of these and the bound above is the bound under the limits (`bound_under`): a schedule
that meets it does as well as its limits allow, and one that does not loses time to its order.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Mapping

from protocol.placement import Placement
from protocol.scheduler import Running, Schedule

GB = 10 ** 9  # bandwidths and sizes below are in bytes; scenarios speak of GB and GB/s


@dataclass(frozen=True)
class Bandwidth:
    """Bytes per second: a source disk's read rate and a target's ingest rate (one value for all,
    or per replica)."""

    read: float | Mapping[str, float]
    ingest: float | Mapping[str, float]

    def read_of(self, r: str) -> float:
        return self._of(self.read, r, "read")

    def ingest_of(self, r: str) -> float:
        return self._of(self.ingest, r, "ingest")

    @staticmethod
    def _of(v, r, what) -> float:
        rate = v.get(r) if isinstance(v, Mapping) else v
        if rate is None or not rate > 0:
            raise ValueError(f"{what} rate of replica {r!r} must be a positive number of bytes/s, not {rate!r}")
        return float(rate)


@dataclass(frozen=True)
class Span:
    """One migration in time: CLONE started at `start`, copied and switched at `end`."""

    partition: str
    src: str
    dst: str
    start: float
    end: float


@dataclass
class Result:
    makespan: float
    lower_bound: float
    serial: float
    spans: list[Span] = field(default_factory=list)
    limited_bound: float = 0.0   # the bound under the schedule's limits (bound_under), >= lower_bound

    @property
    def ratio(self) -> float:
        return self.makespan / self.lower_bound if self.lower_bound else 1.0

    @property
    def limited_ratio(self) -> float:
        return self.makespan / self.limited_bound if self.limited_bound else self.ratio


def alone(move, size: Callable[[str], int], bw: Bandwidth) -> float:
    """How long one move's copy takes with nothing else running: its source's read or its
    target's ingest, whichever is slower."""
    p, src, dst = move
    return size(p) / min(bw.read_of(src), bw.ingest_of(dst))


def lower_bound(moves, size: Callable[[str], int], bw: Bandwidth) -> float:
    out, into = defaultdict(int), defaultdict(int)
    for p, src, dst in moves:
        out[src] += size(p)
        into[dst] += size(p)
    return max([max(alone(m, size, bw) for m in moves)] + [b / bw.read_of(r) for r, b in out.items()]
               + [b / bw.ingest_of(r) for r, b in into.items()])


def serial_time(moves, size: Callable[[str], int], bw: Bandwidth) -> float:
    return sum(alone(m, size, bw) for m in moves)


def bound_under(moves, size: Callable[[str], int], bw: Bandwidth, schedule: Schedule) -> float:
    """No schedule with these limits finishes sooner (module docstring, "Under a schedule's limits")."""
    bounds = [lower_bound(moves, size, bw)]
    if schedule.per_table:
        bounds.append(serial_time(moves, size, bw) / schedule.per_table)
    for limit, end in ((schedule.per_source, 1), (schedule.per_target, 2)):
        if limit:
            work = defaultdict(float)
            for m in moves:
                work[m[end]] += alone(m, size, bw)
            bounds += [w / limit for w in work.values()]
    return max(bounds)


def fair_rates(flows: list[tuple[str, str]], bw: Bandwidth) -> list[float]:
    """Max-min fair rates of flows (source, target) by progressive filling."""
    left = {}
    users = defaultdict(set)
    for i, (src, dst) in enumerate(flows):
        for res, cap in ((("read", src), bw.read_of(src)), (("ingest", dst), bw.ingest_of(dst))):
            left[res] = cap
            users[res].add(i)
    rate = [0.0] * len(flows)
    growing = set(range(len(flows)))
    while growing:
        step = min(left[res] / len(users[res] & growing) for res in users if users[res] & growing)
        for res in users:
            left[res] -= step * len(users[res] & growing)
        for i in growing:
            rate[i] += step
        full = {res for res in users if users[res] & growing and left[res] <= 1e-9 * (1 + left[res])}
        growing -= {i for res in full for i in users[res]}
    return rate


def simulate(moves: list[tuple[str, str, str]], size: Callable[[str], int], bw: Bandwidth,
             schedule: Schedule, placement: Placement | None = None) -> Result:
    """Play `moves` (a plan, in its order) under `schedule`; returns makespan, bound, serial and
    one span per migration."""
    placement = placement or Placement(sizes={p: size(p) for p, _, _ in moves})
    pending = list(moves)
    running: list[Running] = []
    remaining: dict[Running, float] = {}
    started: dict[Running, float] = {}
    spans: list[Span] = []
    now = 0.0
    while True:
        for m in schedule.starts(pending, running, placement):
            r = Running(*m)
            running.append(r)
            remaining[r], started[r] = float(size(m[0])), now
        pending = [m for m in pending if Running(*m) not in started]
        if not running:
            if pending:
                raise RuntimeError(f"schedule {schedule.describe()} starts none of {len(pending)} pending moves")
            break
        rates = fair_rates([(r.src, r.dst) for r in running], bw)
        dt = min(remaining[r] / v for r, v in zip(running, rates))
        now += dt
        done = []
        for r, v in zip(running, rates):
            remaining[r] -= v * dt
            if remaining[r] <= 1e-6 * size(r.partition) + 1e-9:
                done.append(r)
        for r in done:
            running.remove(r)
            spans.append(Span(r.partition, r.src, r.dst, started[r], now))
    return Result(now, lower_bound(moves, size, bw), serial_time(moves, size, bw), spans,
                  bound_under(moves, size, bw, schedule))
