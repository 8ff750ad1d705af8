"""The racing loop's forced windows (a mixin of reference/races.py's Race, issue 37): on a forced
seed (windows.forced), each window the profile lists (Profile.windows) is opened on purpose once,
at a turn drawn from the race's own generator, by driving the order that opens it; the other
seeds are left to the profile's random choice. Whether the window did open is what Cluster and
Nemesis observe (reference/windows.py), never assumed from having tried: a forced attempt that a
guard refused, or that found no partition to move, is counted `forced <name> missed`.

- `switch_with_target_queued`: a move's target fetches and catches up to the fetch's position,
  then a block of the partition is written at the source and the target pulls its GET_PART, and
  the coordinator tries SWITCH at once: SWITCH's gate (F23) must let it through (the position is
  reached) with the entry still queued on the target, and the source's CLEANUP must then wait for
  an owner staying to have it;
- `query_at_clone_target`: a replica pulls the log up to date (skipping a partition it does not
  keep), a move of that partition to it starts, its map is refreshed so that it names the target,
  and before the fetch an unsynced SELECT is sent to it: its own copy lacks rows whose entries it
  has pulled, which no lag excuses (F5: the query must read an owner);
- `repair_racing_loss`: a replica lost for good (crash, SYSTEM DROP REPLICA) if none is yet, the
  repairs started, and a second replica crashed while a repair is in flight.

The class it is mixed into provides `c`, `p`, `rng`, `work`, `_count`, `_start_move`, `_drive`,
`_send`, `_down`, `_lose` and `_fail_served`.
"""

from __future__ import annotations

from protocol.migration import at_limit, read_migration
from reference.recorder import KEEPER_FAULTS
from reference.windows import WINDOWS, clones


class RaceWindows:
    def _init_windows(self, seed: int, steps: int) -> None:
        from reference.windows import forced
        todo = [w for w in self.p.windows if w in WINDOWS] if forced(seed) else []
        # each forced window at its own turn, in the race's first three quarters (the rest of the
        # run and the wind-down then race what it left: a SWITCH, a CLEANUP, a restart)
        self.force_at = {self.rng.randrange(1, max(2, steps * 3 // 4)): w for w in todo}

    def _force_due(self, turn: int) -> None:
        w = self.force_at.get(turn)
        if w is None:
            return
        before = self.c.windows.opened.get(w, 0)
        try:
            getattr(self, f"_force_{w}")()
        except KEEPER_FAULTS:
            raise
        except Exception as e:  # noqa: BLE001 - as Race.run logs an action that raised: the run goes on
            self.c.failed("", f"forced {w}", e)
        self._count(f"forced {w}" if self.c.windows.opened.get(w, 0) > before else f"forced {w} missed")

    def _a_clone(self, fetched: bool | None = None) -> str | None:
        """A move in CLONE whose target runs (not fetched yet, when `fetched` is False): one in
        flight, or one started now (at the concurrency limit, the REASSIGN is refused)."""
        c = self.c
        flying = [m["partition_id"] for m in clones(c.admin, c.layout)
                  if m["src"] is not None and m["dst"] in c.replicas and (fetched is None or m["fetched"] == fetched)]
        if flying:
            return self.rng.choice(sorted(flying))
        for _ in range(3):
            p = self._start_move()
            if p is not None:
                return p
        return None

    def _force_switch_with_target_queued(self) -> None:
        c = self.c
        p = self._a_clone()
        if p is None:
            return
        mig = self._drive(p, lambda m: m["fetched"])
        if not mig or mig["state"] != "clone" or mig["dst"] not in c.replicas:
            return
        target = c.replicas[mig["dst"]]
        for _ in range(60):   # the target executes what the fetch queued: caught up to the position
            if not c._try("execute", target):
                break
            c.tick()
        block = self._block_into(p)
        if block is None:
            return
        self._send(*block, at=mig["src"] if mig["src"] in c.replicas else None)
        while c._try("pull", target):   # its GET_PART queued on the target, not executed
            c.tick()
        coord = read_migration(c.admin, c.layout, p)[0]["coord"]
        if coord in c.replicas and c._try("migrate", c.replicas[coord]):
            c.tick()

    def _block_into(self, p: str) -> tuple[str, list[dict]] | None:
        """The workload's next block, its rows moved into partition p (the date and user of a row
        p holds: the same month and bucket); None when the workload is spent or p has no row."""
        c = self.c
        a_row = next((r for rep in c.replicas.values() for r in rep.has_rows_of(p)), None)
        nxt = next(self.work, None)
        if a_row is None or nxt is None:
            return None
        block_id, rows = nxt
        return block_id, [{**r, "date": a_row["date"], "user_id": a_row["user_id"]} for r in rows]

    def _force_query_at_clone_target(self) -> None:
        """The target first pulls the log up to date while it keeps nothing of the partition (its
        filter skips the partition's GET_PARTs), then the move starts: the rows it skipped are not
        in flight to it (the spec's InFlightTo: it has pulled their entries), only the fetch brings
        them, so a read of its own copy before the fetch misses them for good (F5), where a target
        that had not pulled them yet would still receive them as lag."""
        c = self.c
        if at_limit(c.admin, c.layout, c.max_concurrent):
            # at the limit a REASSIGN is refused: the moves in flight end first (maps refreshed, CLEANUPs done)
            c.settle()
        dst = self.rng.choice(sorted(c.replicas))
        while c._try("pull", c.replicas[dst]):
            c.tick()
        p = self._start_move(dst=dst)
        if p is None:
            return
        c.replicas[dst].replica_refresh_cache(p)   # its map names it the target (ReplicaRefreshCache)
        # read at once: a background step before the read could run the fetch, whose GET_PARTs
        # then bring the rows as lag (InFlightTo), which is no longer F5's window
        q = c.query(at=dst, interleave=0, sync=False)
        self._count("query" if q is not None else "query failed")

    def _force_repair_racing_loss(self) -> None:
        c = self.c
        if not c.gone:
            self._lose()
        c.repair()
        repairs = [m for m in clones(c.admin, c.layout) if m["src"] is None]
        # the repair's own target or coordinator first: the loss that races it most closely
        near = sorted({r for m in repairs for r in (m["dst"], m["coord"])} & set(c.replicas))
        if len(c.replicas) <= max(self.p.min_live, c.table.replication_factor) or not near:
            return
        self._down(self.rng.choice(near))
        self._count("crash")
