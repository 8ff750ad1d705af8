"""The windows a racing run must open for its history to judge a guard (issue 37): the orderings
in which a weakened guard loses a row, which uniform random choice reaches on few seeds. Each is
observed where it happens (Cluster's SWITCH and queries, Nemesis's faults), on the run's own
Keeper state, and counted in the run's actions as `window <name>`; reference/races.py forces
each one a profile lists (Profile.windows) on the seeds it forces (FORCED_SEEDS), and the
coverage report (lab/window_coverage.py, printed by make spark-check) says which seeds opened
which windows.

- `switch_with_target_queued`: a SWITCH tried while its target still has an entry of the
  partition in its queue: SWITCH's gate (CaughtUpTo the fetch's position, F23) decides here
  whether the source may leave with rows the target has not got;
- `query_at_clone_target`: a SELECT received by the replica that is the target of a CLONE of a
  partition, its map saying so (F5 at the other receiver: its own copy is incomplete, so it must
  route the partition to an owner);
- `repair_racing_loss`: a replica crashes, is dropped or loses its session while a repair (a
  CLONE with no source, after SYSTEM DROP REPLICA) is in flight: the second loss a repair must
  survive.
"""

from __future__ import annotations

from protocol.migration import migrations_rows
from protocol.replica import queued_of

WINDOWS = {
    "switch_with_target_queued": "SWITCH tried with an entry of the partition in the target's queue",
    "query_at_clone_target": "a SELECT received by a CLONE's target",
    "repair_racing_loss": "a replica lost while a repair is in flight",
}

# A seed is forced when seed % FORCED_SEEDS == 0: half the seeds open each of their profile's
# windows on purpose; the other half show what the profile reaches on its own.
FORCED_SEEDS = 2


def forced(seed: int) -> bool:
    return seed % FORCED_SEEDS == 0


def switch_with_target_queued(keeper, layout, partition: str, target: str) -> bool:
    return bool(queued_of(keeper, layout, target, partition))


def clone_target_of(keeper, layout, receiver, cache: dict) -> list[str]:
    """The partitions whose CLONE in flight has `receiver` as its target by Keeper's record and by
    the receiver's own map (`cache`): a map that has not seen the CLONE routes as before it, so
    only one that has can send the partition to the target's incomplete copy (F5)."""
    return [m["partition_id"] for m in clones(keeper, layout)
            if m["dst"] == receiver and getattr(cache.get(m["partition_id"]), "target", None) == receiver]


def clones(keeper, layout) -> list[dict]:
    """The migrations in CLONE, as system.selective_migrations' rows (protocol.migration
    migrations_rows: each record read once, with its partition_id)."""
    return [m for m in migrations_rows(keeper, layout) if m.get("state") == "clone"]


def repair_in_flight(keeper, layout) -> bool:
    return any(m["src"] is None for m in clones(keeper, layout))


class WindowLog:
    """How many times each window opened in one run, and the step it first did."""

    def __init__(self) -> None:
        self.opened: dict[str, int] = {}
        self.first: dict[str, int] = {}

    def open(self, name: str, step: int) -> None:
        assert name in WINDOWS, name
        self.opened[name] = self.opened.get(name, 0) + 1
        self.first.setdefault(name, step)

    def as_counts(self) -> dict[str, int]:
        return {f"window {n}": k for n, k in sorted(self.opened.items())}
