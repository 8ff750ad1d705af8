"""Racing runs of part moves between shards (protocol/part_moves/, seed 001): parts move from
the source shard to the destination one at a time while Distributed SELECTs read one replica of
each shard, replicas lag in processing their logs, the destination merges, the source mutates,
and the orchestrating replica may crash or be told to KILL the move. The history is written in
the one format every checker reads (history/schema.py), so the oracle, the Spark job and DuckDB
judge it unchanged.

How a two-shard run reads as a history (the checkers know one table with owners per partition):
each moving part is the only part of its partition, and the destination's own rows are in a
partition of their own, so a partition is a unit that is on one shard. Its owners at a snapshot
are the replicas of the shard that holds it by the task's state (the source's until SOURCE_DROP,
the destination's from there on, the source's again after a rollback), and while a move of it is
in flight the other shard's replicas are named as its clone target: who may hold it then. So
R2/R3 are QueryNoMissingInv/QueryNoDuplicateInv; a row left on the shard that no longer owns it
(F28, F31's window) is NoForeignPartsInv; the replication factor is a shard's replica count.

Driver policy, not protocol: the step chosen at random among those enabled, by weight; one
replica of each shard lags (chosen per run, its turns rarer) so the windows between a shard's
replicas open; the orchestrating replica crashes at most once per move, right after its state's
entry went out. `version`, `fixes` and `dedup` are the spec's Orchestrator, Fixes and Dedup.
"""

from __future__ import annotations

import random
import time
import uuid as uuidlib
from pathlib import Path

from harness.cli_args import text
from history.record import History
from protocol.assignment import GuardFailed
from protocol.part_moves import (ENDED, ENTRY_SHARD, FIXES, SHARDS, STATES, VERSIONS, CannotExecute,
                                 DistributedQuery, Layout, Orchestrator, ShardReplica, active_task, assign_merge,
                                 assign_mutation, before, create_shards, move_part, tasks)
from protocol.parts import PartName, PartStore

REPLICAS = {"src": ["src-1", "src-2"], "dst": ["dst-1", "dst-2"]}
ROWS_PER_PART = 3
DESTINATION_PARTITION = "202412"
SNAPSHOT_EVERY = 20
QUERIES_PER_MOVE = 6   # a steady stream: the budget is renewed at each move, and once the moves end
SETTLE_BUDGET = 2_000
# Tries (the run's clock: a step is tried whether its guard holds or not) between a crash of the
# orchestrating replica and another leader's takeover: its lock_holder is ephemeral and goes only
# when the dead session expires (ZooKeeper's session timeout), while the replicas go on.
TAKEOVER_TRIES = 40
# With a crash after SOURCE_DROP (crash_at), the lagging source replica holds back the drop this
# many tries (a replica may lag that long): the window 21.8's skipped wait leaves open (F31).
DROP_LAG_TRIES = 400
# part_moves_between_shards_delay_seconds (30 s) in tries: the sleeps before and after the drop,
# during which queries run (the spec has no clock: there a sleep is a step that waits for nothing).
SLEEP_TRIES = 60
# A query's two shard reads are this many tries apart at most (a slow or skewed query): the gap
# is drawn per query, so some reads straddle a sync, an attach or a drop.
QUERY_GAPS = (0, 0, 20, 80, 200)


class PartMoveRace:
    def __init__(self, connect, data_dir: Path, seed: int, version: str = "current", fixes=FIXES, dedup: bool = True,
                 moves: int = 3, max_crashes: int = 1, kills: int = 0, mutations: int = 1,
                 crash_at: str | None = None):
        if version not in VERSIONS:
            raise ValueError(f"orchestrator version must be one of {VERSIONS}, not {version!r}")
        self.rng = random.Random(seed)
        self.seed, self.version, self.fixes, self.dedup = seed, version, frozenset(fixes), dedup
        self.keeper = connect()
        self.layout = Layout(f"/part_moves_{seed}")
        create_shards(self.keeper, self.layout, REPLICAS)
        self.replicas = {r: ShardReplica(r, s, self.keeper, self.layout, PartStore(Path(data_dir) / r))
                         for s in SHARDS for r in REPLICAS[s]}
        self.orch = Orchestrator(self.keeper, self.layout, version, self.fixes)
        self.leader = "src-1"   # the replica the orchestrator runs on; a crash hands it to the other
        self.lagging = {s: self.rng.choice(REPLICAS[s]) for s in SHARDS}
        self.history = History(run_id=f"part_moves-{version}-{'dedup' if dedup else 'nodedup'}-{seed}")
        self.step = 0
        self.queries: list[DistributedQuery] = []
        self.query_starts: dict[str, int] = {}
        self.budget = {"crash": max_crashes, "kill": kills, "mutation": mutations, "merge": 2 * moves,
                       "query": QUERIES_PER_MOVE}
        self.drop_lag_until = -1   # the try until which the lagging source replica holds back a DROP_PART
        self.crashed_in: set[tuple[str, str]] = set()
        # The state whose entry the crash follows (None: any, at random). "SOURCE_DROP" opens F31's
        # window: 21.8's re-run skips the drop's wait.
        self.crash_at = crash_at
        self.takeover_at = 0   # the try from which a leader may run the orchestrator again
        self.tries = 0
        self.settling = False
        self.state_since: dict[tuple[str, str], int] = {}   # (task, state) -> the try it was first seen in
        self.next_read_at: dict[str, int] = {}              # query -> the try its next shard read may come
        self.counts: dict[str, int] = {}
        self.to_move: list[PartName] = []
        self.partitions: list[str] = []   # every partition the run starts with, each on one shard
        self._load(moves)

    # --- set-up -------------------------------------------------------------------------------
    def _load(self, moves: int) -> None:
        """The parts each shard starts with, on each of its replicas, and their rows as
        acknowledged INSERTs (step 0)."""
        row = 1
        parts = [("src", PartName(f"2024{i + 1:02d}", i + 1, i + 1, 0)) for i in range(moves)]
        parts.append(("dst", PartName(DESTINATION_PARTITION, 1, 1, 0)))
        for s, part in parts:
            rows = [{"row_id": row + k, "value": 0} for k in range(ROWS_PER_PART)]
            row += ROWS_PER_PART
            u = str(uuidlib.UUID(int=self.rng.getrandbits(128)))
            for r in REPLICAS[s]:
                self.replicas[r].write_part(part, rows, u)
            self.history.insert(f"block-{part.partition}", part.partition, rows, "ok", 0, 0)
            self.partitions.append(part.partition)
            if s == "src":
                self.to_move.append(part)

    # --- the steps ----------------------------------------------------------------------------
    def _try(self, what: str, fn) -> bool:
        try:
            fn()
        except (GuardFailed, CannotExecute):
            return False
        self.counts[what] = self.counts.get(what, 0) + 1
        self.step += 1
        if self.step % SNAPSHOT_EVERY == 0:
            self.snapshot()
        return True

    def _running(self) -> list[DistributedQuery]:
        return [q for q in self.queries if q.running]

    def _move(self) -> None:
        if active_task(self.keeper, self.layout) is not None or not self.to_move:
            raise GuardFailed("MovePart", "a move is in flight, or nothing is left to move")
        move_part(self.keeper, self.layout, self.replicas[self.leader], self.to_move.pop(0))
        self.budget["query"] = QUERIES_PER_MOVE

    def _orchestrate(self) -> None:
        t = active_task(self.keeper, self.layout)
        if t is None or self.tries < self.takeover_at:
            raise GuardFailed("Orchestrate", "no task, or its lock_holder is still the crashed replica's")
        leader = self.replicas[self.leader]
        since = self.state_since.setdefault((t.path, t.state), self.tries)
        if t.state in ("SOURCE_DROP_PRE_DELAY", "SOURCE_DROP_POST_DELAY") and not t.rollback \
                and not self.settling and self.tries < since + SLEEP_TRIES:
            raise GuardFailed("Advance", f"{t.state} sleeps part_moves_between_shards_delay_seconds")
        if t.rollback:
            self.orch.rollback_step(leader)
        elif t.state in ENTRY_SHARD and self.orch.issued(t) is None and not self.orch.drop_skips_wait(t, leader):
            self.orch.issue(leader)
            self._maybe_crash(t)
        else:
            self.orch.advance(leader, self._running())

    def _maybe_crash(self, t) -> None:
        """The orchestrating replica crashes right after its state's entry went out (the spec's
        OrchestratorCrash), once per move and state, within the run's budget."""
        wanted = t.state == self.crash_at if self.crash_at else self.rng.random() < 0.5
        if self.budget["crash"] and (t.path, t.state) not in self.crashed_in and wanted:
            self.budget["crash"] -= 1
            self.crashed_in.add((t.path, t.state))
            self.orch.crash()
            self.takeover_at = self.tries + TAKEOVER_TRIES
            if t.state == "SOURCE_DROP":
                self.drop_lag_until = self.tries + DROP_LAG_TRIES
            # The leader that takes over: the source replica that does not lag (any leader may).
            self.leader = next(r for r in REPLICAS["src"] if r != self.lagging["src"])
            self.counts["orchestrator crash"] = self.counts.get("orchestrator crash", 0) + 1

    def _process(self, r: str) -> None:
        rep = self.replicas[r]
        if r == self.lagging["src"] and self.tries < self.drop_lag_until:
            pending = rep.pending()
            if pending and pending[0][1].type == "DROP_PART":
                raise GuardFailed("Process", f"{r} lags behind the drop")
        rep.process(self.replicas)

    def _start_query(self) -> None:
        if len(self._running()) >= 2 or not self.budget["query"]:
            raise GuardFailed("QueryStart", "two queries running, or none left to run")
        self.budget["query"] -= 1
        t = active_task(self.keeper, self.layout)
        q = DistributedQuery(f"q{len(self.queries) + 1}", t.state if t else None, self.dedup)
        self.queries.append(q)
        self.query_starts[q.query_id] = self.step + 1

    def _read_shard(self) -> None:
        running = [q for q in self._running() if self.next_read_at.get(q.query_id, 0) <= self.tries]
        if not running:
            raise GuardFailed("QueryReadShard", "no query running, or none due to read its next shard")
        q = self.rng.choice(running)
        s = self.rng.choice([s for s in SHARDS if s not in q.read])
        q.read_shard(self.replicas[self.rng.choice(REPLICAS[s])])
        self.next_read_at[q.query_id] = self.tries + self.rng.choice(QUERY_GAPS)
        if not q.running:
            self._answer(q)

    def _answer(self, q: DistributedQuery) -> None:
        self.history.query(q.query_id, "src-1", self.query_starts[q.query_id], self.step + 1, q.routes,
                           q.rows if q.status == "complete" else {}, q.status)

    def _merge(self) -> None:
        if not self.budget["merge"]:
            raise GuardFailed("AssignMerge", "the run's merges are spent")
        rep = self.replicas[self.rng.choice(REPLICAS["dst"])]
        # The merge selector takes small, new parts first: a moved part is the newest there. A
        # single part merges once (OPTIMIZE ... FINAL of a merged part alone does nothing).
        fresh = [n for n in rep.active() if n.level == 0]
        if not fresh:
            raise GuardFailed("AssignMerge", f"{rep.name} has no unmerged part")
        part = max(fresh, key=lambda n: n.min_block)
        assign_merge(self.keeper, self.layout, rep, part)
        self.budget["merge"] -= 1

    def _mutate(self) -> None:
        """An UPDATE on the source while a moved part is attached and not yet dropped."""
        t = active_task(self.keeper, self.layout)
        if not self.budget["mutation"] or t is None or t.state not in ("SOURCE_DROP_PRE_DELAY", "SOURCE_DROP"):
            raise GuardFailed("MutateSource", "no part in the pre-drop window, or the run's mutation is spent")
        rep = self.replicas[self.leader]
        assign_mutation(self.keeper, self.layout, rep, PartName.parse(t.part_name),
                        respect_pins="mutations_respect_pins" in self.fixes)
        self.budget["mutation"] -= 1

    def _kill(self) -> None:
        if not self.budget["kill"]:
            raise GuardFailed("Kill", "the run's kills are spent")
        self.orch.kill()
        self.budget["kill"] -= 1

    def _choices(self) -> list[tuple[float, str, object]]:
        """(weight, what it is counted as, the step): every replica's processing counts as one kind."""
        out = [(1.0, "move part", self._move), (3.0, "orchestrator", self._orchestrate),
               (1.0, "query start", self._start_query), (3.0, "query read shard", self._read_shard),
               (0.5, "merge", self._merge), (0.5, "mutation", self._mutate), (0.2, "kill", self._kill)]
        for s in SHARDS:
            for r in REPLICAS[s]:
                out.append((0.4 if r == self.lagging[s] else 2.0, "process", lambda r=r: self._process(r)))
        return out

    def run(self, steps: int = 300) -> None:
        """Random enabled steps until every move ended or `steps` were taken (a try whose guard
        is false is no step; tries are bounded too, so a wedged run ends)."""
        for self.tries in range(steps * 20):
            if self.step >= steps or (not self.to_move and active_task(self.keeper, self.layout) is None):
                break
            choices = self._choices()
            w, what, fn = self.rng.choices(choices, weights=[c[0] for c in choices])[0]
            self._try(what, fn)

    def settle(self) -> bool:
        """Every move finished and every log processed, queries answered: each enabled step taken in
        turn until none is. False when a step stays enabled (F30's wedge) past SETTLE_BUDGET."""
        self.settling = True
        self.takeover_at = 0   # the dead session has long expired
        for _ in range(SETTLE_BUDGET):
            progressed = False
            for q in self._running():
                s = next(s for s in SHARDS if s not in q.read)
                q.read_shard(self.replicas[self.rng.choice(REPLICAS[s])])
                if not q.running:
                    self._answer(q)
                progressed = True
            for r in self.replicas:
                progressed |= self._try("process", lambda r=r: self._process(r))
            progressed |= self._try("orchestrator", self._orchestrate)
            progressed |= self._try("move part", self._move)
            if not progressed:
                return self._ended()
        return False

    def _ended(self) -> bool:
        return (active_task(self.keeper, self.layout) is None and not self.to_move
                and all(not rep.pending() for rep in self.replicas.values()))

    # --- the history --------------------------------------------------------------------------
    def assignments(self) -> list[dict]:
        """Each partition's owners by the task's state (module docstring)."""
        moved = {PartName.parse(t.part_name).partition: t for t in tasks(self.keeper, self.layout)}
        out = []
        for p in sorted(self.partitions):
            t = moved.get(p)
            on_dst = p == DESTINATION_PARTITION or (t is not None and t.state in STATES
                                                    and not before(t.state, "SOURCE_DROP"))
            in_flight = t is not None and t.state not in ENDED
            owners, other = (REPLICAS["dst"], REPLICAS["src"]) if on_dst else (REPLICAS["src"], REPLICAS["dst"])
            out.append({"partition_id": p, "replicas": owners, "clone_target": ",".join(other) if in_flight else None,
                        "leaving_replica": None})
        return out

    def snapshot(self) -> None:
        self.history.snapshot(self.step, {r: rep.store for r, rep in self.replicas.items()}, self.assignments())

    def finish(self, settled: bool, backend: str = "memory") -> None:
        self.snapshot()
        self.history.finish(len(REPLICAS["src"]), backend, [], self.seed, self.step,
                            settled_step=self.step if settled else None)


def part_move_history(folder, seed: int, version: str = "current", fixes=FIXES, dedup: bool = True,
                      steps: int = 300, connect=None, fmt: str = "parquet", **kw) -> dict:
    """One racing run on the in-memory keeper (or `connect`'s), its history written to
    `folder`/history; the in-process oracle's verdict and the run's figures."""
    from checkers.oracle import violations
    from protocol.keeper import MemoryEnsemble
    folder = Path(folder)
    t0 = time.perf_counter()
    race = PartMoveRace(connect or MemoryEnsemble().connect, folder / "data", seed, version, fixes, dedup, **kw)
    race.run(steps)
    settled = race.settle()
    race.finish(settled, "memory" if connect is None else "zookeeper")
    race.history.write(folder / "history", fmt)
    problems = violations(race.history, len(REPLICAS["src"]))
    return {"version": version, "fixes": sorted(race.fixes), "dedup": dedup, "seed": seed,
            "history": str(folder / "history"), "settled": settled, "oracle_violations": len(problems),
            "oracle_invariants": sorted({x.split(":")[0] for x in problems}), "oracle_sample": problems[:5],
            "actions": race.counts, "queries": len(race.queries),
            "moves": {t.part_name: t.state for t in tasks(race.keeper, race.layout)},
            "steps": race.step, "seconds": round(time.perf_counter() - t0, 2)}


def main(argv: list[str] | None = None) -> int:
    """`python -m reference.part_move_races --out DIR`: one racing run of part moves, its history
    written to DIR/history, the oracle's verdict printed (0 holds, 1 violation, 2 bad input)."""
    import json

    from harness.cli_args import BadInput, Parser, int_at_least, output_dir, run_main
    from protocol.part_moves import ENTRY_SHARD
    ap = Parser(prog="python -m reference.part_move_races",
                description="A racing run of part moves between shards (seed 001): parts move from the source "
                            "shard to the destination while Distributed SELECTs read both; the history is judged "
                            "by the oracle and can be given to the Spark job or DuckDB.")
    ap.add_argument("--out", type=output_dir, required=True,
                    help="folder for data/ and history/ (must not hold a history)")
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    ap.add_argument("--version", choices=VERSIONS, default="current",
                    help="the orchestrator: today's (barrier znodes) or 21.8's (none)")
    fix = "(" + "|".join(FIXES) + ")"
    ap.add_argument("--fixes", default=",".join(FIXES), type=text("fixes", rf"({fix}(,{fix})*)?"),
                    help=f"comma-separated fixes the orchestrator applies, of {', '.join(FIXES)}; '' for the code "
                         "as is")
    ap.add_argument("--no-dedup", action="store_true", help="query deduplication off (ClickHouse master: removed)")
    ap.add_argument("--moves", type=int_at_least(1), default=3)
    ap.add_argument("--steps", type=int_at_least(10), default=300)
    ap.add_argument("--crashes", type=int_at_least(0), default=1, help="crashes of the orchestrating replica")
    ap.add_argument("--crash-at", choices=sorted(ENTRY_SHARD), help="crash the orchestrating replica right after "
                    "this state's entry (default: after any, at random)")
    ap.add_argument("--kills", type=int_at_least(0), default=0,
                    help="KILL PART_MOVE_TO_SHARD tries (today's orchestrator only: 21.8 has none)")
    ap.add_argument("--mutations", type=int_at_least(0), default=1,
                    help="UPDATEs of a moving part on the source during the pre-drop sleep")
    ap.add_argument("--json", action="store_true", help="print the run's figures as JSON")
    a = ap.parse_args(argv)

    def run() -> int:
        fixes = [f for f in a.fixes.split(",") if f]
        unknown = sorted(set(fixes) - set(FIXES))
        if unknown:
            raise BadInput(f"--fixes {','.join(unknown)}: unknown; known are {', '.join(FIXES)}")
        if (a.out / "history").exists() and any((a.out / "history").iterdir()):
            raise BadInput(f"--out {a.out}: holds a history already; give an empty or new folder")
        if a.crash_at and not a.crashes:
            raise BadInput("--crash-at says where the orchestrating replica crashes; --crashes 0 says it never does")
        res = part_move_history(a.out, a.seed, a.version, fixes, not a.no_dedup, a.steps, moves=a.moves,
                                crash_at=a.crash_at, max_crashes=a.crashes, mutations=a.mutations, kills=a.kills)
        if a.json:
            print(json.dumps(res, indent=2, sort_keys=True))
        else:
            verdict = "holds" if not res["oracle_violations"] else "violated: " + ", ".join(res["oracle_invariants"])
            print(f"part moves {a.version} seed {a.seed}: {res['steps']} steps, {res['queries']} queries, "
                  f"moves {sorted(set(res['moves'].values()))}, {'settled' if res['settled'] else 'NOT settled'}; "
                  f"{verdict}; history in {res['history']}")
        return 1 if res["oracle_violations"] else 0
    return run_main("python -m reference.part_move_races", run)


if __name__ == "__main__":
    raise SystemExit(main())
