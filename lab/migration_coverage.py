"""How many of a machine's walks complete a migration with writes and queries around it.

The bugs the invariants alone miss most (F5, F6, F9, cleanup_no_delay) live in the windows a
migration opens: a query routed while maps disagree about the owners, an INSERT committed while
the target is cloning. A walk that never takes a migration to its end, or takes one with no
traffic around it, cannot find them; this counts the walks that do, so a profile's power can be
read off its report instead of guessed.

A migration of partition p is *covered* when, in one walk, it goes CLONE -> SWITCH -> CLEANUP
(the migration znode's state clone, switched, done), at least one INSERT of p is written while
p is in CLONE, and at least one query is started while p is in CLONE or SWITCHED (between the
CLONE and the CLEANUP: the window in which maps may route p to the source, the target or both).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Migration:
    switched: bool = False
    insert_in_clone: bool = False
    query_around_switch: bool = False


@dataclass
class MigrationCoverage:
    walks: int = 0
    completed: int = 0            # walks with at least one migration CLONE -> SWITCH -> CLEANUP
    covered: int = 0              # ... of which one had an INSERT in CLONE and a query around the SWITCH
    _open: dict = field(default_factory=dict)       # partition -> _Migration in flight this walk
    _walk_completed: bool = False
    _walk_covered: bool = False
    _steps: int = 0
    windows: dict = field(default_factory=dict)     # window -> walks that opened it (conformance/windows.py window_of)
    _walk_windows: set = field(default_factory=set)

    def start_walk(self) -> None:
        self._open, self._walk_completed, self._walk_covered, self._steps = {}, False, False, 0
        self._walk_windows = set()

    def end_walk(self) -> None:
        # Hypothesis also starts examples it gives up before their first step (a draw past its
        # buffer): not walks.
        self.walks += self._steps > 0
        self.completed += self._walk_completed
        self.covered += self._walk_covered
        if self._steps > 0:
            for w in self._walk_windows:
                self.windows[w] = self.windows.get(w, 0) + 1

    def window(self, name: str) -> None:
        """A step of this walk opened `name` (a SWITCH with the target's queue not empty of its
        partition counts as a SWITCH too)."""
        self._walk_windows.add(name)
        if name == "switch_with_target_queued":
            self._walk_windows.add("switch")

    def observe(self, action: str, partition_of_step: str | None, before: dict, after: dict) -> None:
        """One step taken: `before`/`after` map each partition to its migration state ("clone",
        "switched", "done", ... or None); `partition_of_step` is the partition an INSERT wrote."""
        self._steps += 1
        for p, st in before.items():
            m = self._open.get(p)
            if m is None:
                continue
            if action == "ReplicaWriteInsert" and partition_of_step == p and st == "clone":
                m.insert_in_clone = True
            if action == "ClientStartQuery" and st in ("clone", "switched"):
                m.query_around_switch = True
        for p, st in after.items():
            if st == "clone" and before.get(p) != "clone":
                self._open[p] = _Migration()       # a new migration of p began with this step
            m = self._open.get(p)
            if m is None:
                continue
            if st == "switched":
                m.switched = True
            elif st != "clone":                    # done, cancelled, cancelling: this migration ends
                if st == "done" and m.switched:
                    self._walk_completed = True
                    self._walk_covered |= m.insert_in_clone and m.query_around_switch
                if st != "cancelling":
                    del self._open[p]

    def as_dict(self) -> dict:
        per_100 = {w: round(100 * n / self.walks, 1) if self.walks else 0.0 for w, n in sorted(self.windows.items())}
        return {"walks": self.walks, "migrations_completed": self.completed,
                "migrations_completed_with_writes_and_queries": self.covered, "windows_per_100_walks": per_100}
