"""The driver that runs a reproduction file (reference/pr102244/repro.py) on the reference's PR
design: each SQL statement of the file becomes the reference's step that the server would take,
each wait a round of background steps until its query answers 1, each expectation a read of the
reference's state; then the run's history is judged by the oracle (checkers/oracle.py), and by
the Spark job when its caller asks.

The statements are those the files say, no more: a statement this driver does not know is bad
input, named in one line, not guessed at. Time is the reference's background steps: a wait's
`timeout_s` allows `STEPS_PER_SECOND` rounds per second of it.

The cluster is the PR design driven as its code drives migrations (code_cluster.py's
PRCodeCluster: each replica's monitor a MigrationDriver, SYSTEM SYNC SELECTIVE MIGRATIONS one
more driver of every migration). The code's behaviour is PR102244Code.tla's `Bugs`: CODE maps the
code's strings to the reference's switches; a file that needs one the reference does not have
yet is refused (ReproUnsupported). Each replica holds its own migration_timeout_seconds (the
table's setting at CREATE; an ALTER ... MODIFY SETTING reaches a replica when it pulls the log),
judged on the run's clock: STEPS_PER_SECOND rounds a second.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from checkers.oracle import check
from protocol.assignment import GuardFailed
from protocol.keeper import MemoryEnsemble
from protocol.pr102244 import CODE, code_switches
from protocol.pr102244.assignment import read_assignment
from protocol.pr102244.driver import Pending
from protocol.pr102244.migration import read_migrations
from protocol.replica import log_number
from protocol.table import Table
from reference.pr102244.code_cluster import PRCodeCluster
from reference.pr102244.repro import Repro, ReproError, Step

# The pause failpoints the reproductions need, which the PR does not have (proposed in
# spec/pr102244/REVIEW-PR102244.md): in startClone between reading the snapshot and its multi
# (PR-F6); in driveStateMachine after the read that decided a rollback, before `rollback` (PR-F7);
# after updateState moved the node to SWITCH, before the SWITCH's fresh read and multi (PR-F7).
PAUSE_AFTER_SNAPSHOT = "selective_replication_pause_after_snapshot"
PAUSE_BEFORE_ROLLBACK = "selective_replication_pause_before_rollback"
PAUSE_BEFORE_SWITCH_MULTI = "selective_replication_pause_before_switch_multi"
PAUSE_BEFORE_WRITE = {"rollback": PAUSE_BEFORE_ROLLBACK, "switch": PAUSE_BEFORE_SWITCH_MULTI}
FAILPOINTS = (PAUSE_AFTER_SNAPSHOT, PAUSE_BEFORE_ROLLBACK, PAUSE_BEFORE_SWITCH_MULTI)
STEPS_PER_SECOND = 5      # background rounds a second of a wait's timeout_s allows
SYNC_ROUNDS = 200         # rounds SYSTEM SYNC SELECTIVE MIGRATIONS drives before it gives up
# migration_timeout_seconds unless the file sets it: the PR's default is in server settings that are
# not stored (PR102244.md, sources); an hour keeps a scenario's CLONE from timing out unasked.
MIGRATION_TIMEOUT_S = 3600


class ReproUnsupported(Exception):
    """A reproduction the reference cannot run yet (a behaviour of the code it does not have)."""


@dataclass
class Expectation:
    name: str
    expected: str
    got: str

    @property
    def held(self) -> bool:
        return self.expected == self.got


@dataclass
class ReproOutcome:
    repro: Repro
    fixed: bool
    expectations: list[Expectation] = field(default_factory=list)
    broken: dict[str, list[str]] = field(default_factory=dict)   # the oracle's failing invariants
    history: Path | None = None

    @property
    def held(self) -> bool:
        return all(e.held for e in self.expectations)


def reference_switches(repro: Repro, fixed: bool) -> frozenset[str]:
    """The reference's switches for the code as it is (`fixed` False) or with the file's fix."""
    missing = sorted(s for s in repro.code if s not in CODE)
    if missing:
        raise ReproUnsupported(f"{repro.path.name}: code names behaviour the reference's PR design does not "
                               f"implement: {', '.join(missing)} (it implements {', '.join(sorted(CODE))})")
    return code_switches(repro.code - repro.fix if fixed else repro.code)


class ReproCluster(PRCodeCluster):
    """PRCodeCluster whose background steps honour SYSTEM STOP FETCHES / STOP PULLING REPLICATION
    LOG and the pause failpoints a replica's monitor can stop at, and whose clock is the
    reproduction's seconds (STEPS_PER_SECOND rounds each)."""

    def __init__(self, *a, failpoints: set, **kw):
        self.stopped: set[tuple[str, str]] = set()   # (replica, kind) a SYSTEM STOP holds back
        self.failpoints = failpoints                  # (replica, name) enabled: the driver's set
        self.monitor_paused: dict[str, str] = {}      # replica -> the failpoint its monitor waits at
        self.rounds = 0
        super().__init__(*a, migration_timeout=MIGRATION_TIMEOUT_S, **kw)

    def migration_clock(self) -> float:
        return self.rounds / STEPS_PER_SECOND

    def _decided(self, d) -> None:
        point = PAUSE_BEFORE_WRITE.get(d.pending.op)
        if (d.name, point) in self.failpoints:
            self.monitor_paused[d.name] = point

    def _try(self, kind, rep, random_choice=False):
        if (rep.name, kind) in self.stopped:
            return None
        # The monitor is one thread: its drop and its driving wait while it is paused.
        if kind in ("migrate", "drop") and rep.name in self.monitor_paused:
            return None
        return super()._try(kind, rep, random_choice)

    def round(self) -> int:
        """Every replica tries every background kind once: one round of the servers' time."""
        self.rounds += 1
        self.read_in_flight()
        n = 0
        for r in sorted(self.replicas):
            for kind in self.BACKGROUND_KINDS:
                if r in self.replicas and self._try(kind, self.replicas[r]):
                    self.tick()
                    n += 1
        return n


_CREATE = re.compile(r"CREATE TABLE (\w+) \((?P<cols>[^)]*)\) ENGINE = ReplicatedMergeTree\([^)]*\) "
                     r"PARTITION BY (?P<part>.+?) ORDER BY (?P<order>\w+) SETTINGS (?P<settings>.+)$", re.S)
_INSERT = re.compile(r"INSERT INTO (\w+) VALUES (?P<values>.+)$", re.S)
_TUPLE = re.compile(r"\(([^)]*)\)")
_SYSTEM = re.compile(r"SYSTEM (?P<verb>STOP|START) (?P<what>FETCHES|PULLING REPLICATION LOG) (\w+)$")
_MIGRATE = re.compile(r"SYSTEM MIGRATE PARTITION '(?P<p>[^']+)' OF (\w+) TO REPLICA '(?P<r>\w+)'$")
_UPDATE = re.compile(r"UPDATE \w+ SET (?P<col>\w+) = (?P<value>'[^']*'|\d+) WHERE (?P<key>\w+) = (?P<kv>'[^']*'|\d+)$")
_MODIFY_SETTING = re.compile(r"ALTER TABLE \w+ MODIFY SETTING migration_timeout_seconds = (?P<value>\d+)$")
_SYNC = re.compile(r"SYSTEM SYNC SELECTIVE MIGRATIONS (\w+)$")
_REBALANCE = re.compile(r"SYSTEM START SELECTIVE REBALANCE (\w+)$")
_FAILPOINT = re.compile(r"SYSTEM (?P<verb>ENABLE|DISABLE|WAIT) FAILPOINT (?P<name>\w+)(?: PAUSE)?$")
_ASSIGNED = r"FROM system\.selective_assignments WHERE table = '\w+' AND partition_id = '(?P<p>[^']+)'$"
_PARTS = r"FROM system\.parts WHERE table = '\w+' AND active(?: AND partition_id = '(?P<p>[^']+)')?$"
_REPLICAS = r"FROM system\.replicas WHERE table = '\w+'$"


def _literal(text: str):
    text = text.strip()
    return text[1:-1] if text.startswith("'") else int(text)


class ReferenceDriver:
    def __init__(self, repro: Repro, fixed: bool = False, data_dir: Path | None = None, say=print):
        self.repro, self.fixed, self.say = repro, fixed, say
        self.bugs = reference_switches(repro, fixed)
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="repro-"))
        self.cluster: ReproCluster | None = None
        self.table: Table | None = None
        self.rows = 0
        self.failpoints: set[tuple[str, str]] = set()   # (replica, name) enabled
        # replica -> the background statement paused there, the failpoint, the rest of it
        self.paused: dict[str, tuple[Step, str, callable]] = {}
        self.written: dict[int, dict] = {}   # row id -> the row, every row the run wrote
        self.altered: int | None = None   # migration_timeout_seconds of the last ALTER ... MODIFY SETTING
        self.running: list[tuple[Step, callable]] = []   # background statements past their checks, to finish

    # --- statements ---------------------------------------------------------------------------
    def statement(self, step: Step) -> None:
        sql, on = step.text.strip(), step.on
        if m := _CREATE.match(sql):
            return self._create(on, m)
        c = self._running(step)
        if m := _INSERT.match(sql):
            rows = []
            for t in _TUPLE.findall(m["values"]):
                values = [_literal(v) for v in t.split(",")]
                rows.append(self._row(dict(zip((n for n, _ in self.table.columns), values))))
            status = c.insert(rows, f"repro-step-{step.index}", tries=1, at=on)
            if set(status.values()) != {"ok"}:
                raise ReproError(f"{step.describe()}: the INSERT was not acknowledged ({status})")
        elif m := _UPDATE.match(sql):
            # A lightweight UPDATE: the current version of each row it matches, rewritten, in a
            # patch part (PRCodeCluster.update); a server applies patches on read, as `answer` does.
            columns = {n for n, _ in self.table.columns}
            if not {m["col"], m["key"]} <= columns:
                raise ReproError(f"{step.describe()}: no column {m['col']!r} or {m['key']!r} in the table")
            rows = [self._row({**r, m["col"]: _literal(m["value"])}) for r in self._current(m["key"], m["kv"])]
            if not rows:
                raise ReproError(f"{step.describe()}: the UPDATE matches no row")
            status = c.update(rows, f"repro-step-{step.index}", at=on)
            if set(status.values()) != {"ok"}:
                raise ReproError(f"{step.describe()}: the UPDATE was not acknowledged ({status})")
        elif m := _SYSTEM.match(sql):
            kind = "execute" if m["what"] == "FETCHES" else "pull"
            (c.stopped.add if m["verb"] == "STOP" else c.stopped.discard)((on, kind))
            if kind == "pull" and m["verb"] == "START":
                self._apply_settings(on)
        elif m := _MODIFY_SETTING.match(sql):
            # ALTER ... MODIFY SETTING is an ALTER_METADATA entry: each replica takes the value when
            # it applies the entry, so one whose log pulling is stopped keeps the old one until START.
            self.altered = int(m["value"])
            for r in c.replicas:
                if (r, "pull") not in c.stopped:
                    self._apply_settings(r)
        elif m := _MIGRATE.match(sql):
            # The command names only the target; the interpreter's choice of source is not in the
            # stored code. Assumed: the replica the command runs on if it owns the partition, else
            # the first owner listed.
            a = read_assignment(c.admin, c.layout, m["p"])
            src = on if a is not None and on in a.owners else (a.owners[0] if a else None)
            # The command is idempotent (the PR's test_concurrent_migrate_same_partition says so): a
            # target already in the list, :cloning or not, is success at once. A check before
            # startClone's CAS: two commands running at once both pass it.
            if a is not None and m["r"] in a.keepers():
                self.say(f"    {m['r']} is already in the assignment of {m['p']}: nothing to do")
                return
            if (on, PAUSE_AFTER_SNAPSHOT) in self.failpoints:
                if not step.background:
                    raise ReproError(f"{step.describe()}: paused at {PAUSE_AFTER_SNAPSHOT}: "
                                     "run it with background = true")
                # startClone's driver reads the snapshot here and pauses before its multi.
                held = c.read_snapshot(m["p"], m["r"], src, on)
                self.paused[on] = (step, PAUSE_AFTER_SNAPSHOT, lambda: self._migrate(m["p"], m["r"], src, on, held))
            elif step.background:   # running at once with the next background statements: its
                self.running.append((step, lambda: self._migrate(m["p"], m["r"], src, on)))   # check is done
            else:
                self._migrate(m["p"], m["r"], src, on)
        elif m := _FAILPOINT.match(sql):
            name = m["name"]
            if name not in FAILPOINTS:
                raise ReproError(f"{step.describe()}: the reference has no failpoint {name} "
                                 f"(it has {', '.join(FAILPOINTS)})")
            if m["verb"] == "ENABLE":
                self.failpoints.add((on, name))
            elif m["verb"] == "DISABLE":
                self.failpoints.discard((on, name))
                if c.monitor_paused.get(on) == name:
                    del c.monitor_paused[on]
                    self.say(f"    {on}'s monitor goes on")
                if on in self.paused and self.paused[on][1] == name:
                    paused_step, _, rest = self.paused.pop(on)
                    self.say(f"    {paused_step.describe()} goes on")
                    rest()
            else:
                rounds = int(step.timeout_s * STEPS_PER_SECOND)
                for _ in range(rounds):
                    if self._paused_at(on, name):
                        break
                    c.round()
                else:
                    raise ReproError(f"{step.describe()}: nothing paused at {name} on {on} in {rounds} rounds")
        elif _REBALANCE.match(sql):
            # triggerRebalance: one cycle of the monitor, the rebalancer forced on
            for p, s, t, mig in c.rebalance_cycle():
                self.say(f"    CLONE {p}: {s} -> {t} (migration {mig})")
        elif _SYNC.match(sql):
            self._go_on(step, self._sync(on))
        else:
            raise ReproError(f"{step.describe()}: a statement the reference driver does not run")

    def _sync(self, on: str):
        """SYSTEM SYNC SELECTIVE MIGRATIONS on `on` (waitForMigrationsComplete): a driver of its
        own drives every migration in flight (PRCodeCluster.drive_all), the servers' rounds run
        between its passes, until none is in flight or its timeout. A generator: it yields the
        failpoint it stops at before a decided write. The command's answer on a timeout is not
        in the stored code: said, not raised."""
        c = self.cluster
        d = c.driver_for(on)
        for _ in range(SYNC_ROUNDS):
            if not read_migrations(c.admin, c.layout):
                return
            for x in c.drive_all(d):
                if isinstance(x, Pending):
                    if (on, PAUSE_BEFORE_WRITE[x.op]) in self.failpoints:
                        yield PAUSE_BEFORE_WRITE[x.op]
                else:
                    self.say(f"    {x}")
            c.round()
        self.say(f"    migrations still in flight after {SYNC_ROUNDS} rounds (the command's timeout)")

    def _go_on(self, step: Step, process) -> None:
        """Run a statement's process until it ends or stops at a failpoint; a stop is a pause of
        a background statement (DISABLE FAILPOINT resumes it), and an error for any other."""
        point = next(process, None)
        if point is None:
            return
        if not step.background:
            raise ReproError(f"{step.describe()}: paused at {point}: run it with background = true")
        self.paused[step.on] = (step, point, lambda: self._go_on(step, process))

    def _row(self, values: dict) -> dict:
        """A row the run writes, with the next row id (INSERT and UPDATE alike), remembered."""
        self.rows += 1
        row = {**{k: v for k, v in values.items() if k != "row_id"}, "row_id": self.rows}
        self.written[self.rows] = row
        return row

    def _current(self, key: str, value: str, among=None) -> list[dict]:
        """The current version of each written row whose `key` equals `value` (of `among`, row ids,
        when given): a patch's row supersedes the rows of the same key written before it."""
        wanted = _literal(value)
        latest = {}
        for i, r in sorted(self.written.items()):
            if r[key] == wanted and (among is None or i in among):
                latest[r[key]] = r
        return list(latest.values())

    def _select(self, on: str) -> list[int]:
        """A SELECT on `on` as a server runs it (routed by the cache, no wait for replication):
        the row ids it read, each as often as it read it."""
        c = self.cluster
        c.query(at=on, sync=False)
        q = c.history.tables["queries"][-1]["query_id"]
        return [r["row_id"] for r in c.history.tables["query_rows"] if r["query_id"] == q]

    def _paused_at(self, on: str, name: str) -> bool:
        """Whether something on `on` waits at failpoint `name`: its monitor or a statement."""
        return self.cluster.monitor_paused.get(on) == name or (on in self.paused and self.paused[on][1] == name)

    def _apply_settings(self, replica: str) -> None:
        """The ALTER ... MODIFY SETTING migration_timeout_seconds `replica` applies now."""
        if self.altered is not None:
            self.cluster.timeouts[replica] = self.altered

    def _finish_running(self) -> None:
        """Background statements that started together end here, in order: each made its checks
        when it started, so none saw what the others are about to write."""
        while self.running:
            step, rest = self.running.pop(0)
            try:
                rest()
            except GuardFailed as e:
                if not step.refusable:
                    raise
                self.say(f"    {step.describe()}: refused: {e}")

    def _migrate(self, partition: str, target: str, source: str | None, on: str, snapshot=None) -> None:
        m = self.cluster.reassign(partition, target, source, snapshot_read_before=snapshot, on=on)
        self.say(f"    CLONE {partition}: {source} -> {target} (migration {m})")

    def _create(self, on: str, m: re.Match) -> None:
        columns = tuple(tuple(c.split()) for c in m["cols"].split(","))
        rf = re.search(r"replication_factor = (\d+)", m["settings"])
        timeout = re.search(r"migration_timeout_seconds = (\d+)", m["settings"])
        table = Table(columns=columns, name="t", partition_by=m["part"], order_by=(m["order"],),
                      replication_factor=int(rf[1]) if rf else 1)
        if self.cluster is None:
            self.table = table
            self.cluster = ReproCluster(MemoryEnsemble().connect, self.data_dir / "parts", (on,), table=table,
                                        bugs=self.bugs, seed=1, failpoints=self.failpoints)
        elif table != self.table:
            raise ReproError(f"CREATE on {on} defines another table than the first CREATE")
        else:
            self.cluster.add_replica(on)
        if timeout:   # the table's setting, as each replica reads it at CREATE
            self.cluster.timeouts[on] = int(timeout[1])

    def _running(self, step: Step) -> ReproCluster:
        if self.cluster is None:
            raise ReproError(f"{step.describe()}: no CREATE TABLE before it")
        if step.on and step.on not in self.cluster.replicas:
            raise ReproError(f"{step.describe()}: {step.on} has no table (no CREATE on it, or it is down)")
        return self.cluster

    # --- queries: the answers a server would give ---------------------------------------------
    def answer(self, step: Step) -> str:
        sql, c = step.text.strip(), self._running(step)
        rep = c.replicas[step.on]
        if m := re.fullmatch(r"SELECT (?P<e>.+?) " + _ASSIGNED, sql):
            # Reading system.selective_assignments refreshes the replica's assignment cache (the
            # PR's StorageSystemSelectiveAssignments reads with force_refresh): so here too.
            rep.refresh_view(m["p"])
            a = read_assignment(c.admin, c.layout, m["p"])
            listed = sorted([*a.owners, *(f"{x}:cloning" for x in a.cloning)]) if a else []
            e = m["e"]
            if x := re.fullmatch(r"assigned_replicas = \[(.*)\]", e):
                return str(int(listed == [_literal(v) for v in x[1].split(",") if v.strip()]))
            if x := re.fullmatch(r"has\(assigned_replicas, '([\w:]+)'\) AND length\(assigned_replicas\) = (\d+)", e):
                return str(int(x[1] in listed and len(listed) == int(x[2])))
            if e == "length(arrayDistinct(assigned_replicas))":
                return str(len(set(listed)))
            if e == "length(assigned_replicas)":
                return str(len(listed))
        elif m := re.fullmatch(r"SELECT (?P<e>.+?) " + _PARTS, sql):
            names = rep.store.names(m["p"]) if m["p"] else rep.store.names()
            value = {"count()": len(names), "sum(rows)": sum(len(rep.store.read(n)) for n in names)}
            if x := re.fullmatch(r"(count\(\)|sum\(rows\))(?: = (\d+))?", m["e"]):
                return str(value[x[1]] if x[2] is None else int(value[x[1]] == int(x[2])))
        elif m := re.fullmatch(r"SELECT (?P<e>.+?) " + _REPLICAS, sql):
            queue = rep.queue()
            log_end = max((log_number(n) for n in c.admin.get_children(c.layout.log)), default=-1) + 1
            pointer = int(rep.keeper.get(c.layout.log_pointer(rep.name))[0] or 0)
            conds = {"is_readonly = 0": not rep.keeper.expired, "queue_size = 0": not queue,
                     "log_pointer = log_max_index + 1": pointer >= log_end}
            parts = m["e"].split(" AND ")
            if all(p in conds for p in parts):
                return str(int(all(conds[p] for p in parts)))
        elif sql.startswith("SELECT (SELECT count() FROM system.replication_queue"):
            # The queue is empty, or every GET_PART in it has no running holder: a server's
            # fetches would fail again and again (num_tries growing).
            holders = {p for r in c.replicas.values() for p in map(str, r.store.names())}
            return str(int(all(e.new_part_name not in holders for _, e in rep.queue() if e.new_part_name)))
        elif m := re.fullmatch(r"SELECT (?P<col>\w+) FROM \w+ WHERE (?P<key>\w+) = (?P<kv>'[^']*'|\d+)", sql):
            # A SELECT as a server runs it (routed by the cache), patches applied: the newest row
            # of the key among those it read; none read is an empty answer.
            rows = self._current(m["key"], m["kv"], among=set(self._select(step.on)))
            return str(rows[0][m["col"]]) if rows else ""
        elif m := re.fullmatch(r"SELECT count\(\) FROM (\w+)", sql):
            # A SELECT as a server runs it: routed by the cache, no wait for replication.
            return str(len(self._select(step.on)))
        raise ReproError(f"{step.describe()}: a query the reference driver does not answer")

    # --- the run ----------------------------------------------------------------------------
    def run(self, history: Path | None = None) -> ReproOutcome:
        out = ReproOutcome(self.repro, self.fixed)
        try:
            for step in self.repro.steps:
                if not (step.kind == "sql" and step.background):
                    self._finish_running()
                self.say(f"  {step.describe()}")
                if step.kind == "sql" and step.refusable:
                    try:
                        self.statement(step)
                    except GuardFailed as e:
                        self.say(f"    refused: {e}")
                elif step.kind == "sql":
                    self.statement(step)
                elif step.kind == "until":
                    rounds = int(step.timeout_s * STEPS_PER_SECOND)
                    for _ in range(rounds):
                        if self.answer(step) == "1":
                            break
                        self.cluster.round()
                    else:
                        raise ReproError(f"{step.describe()}: not reached in {rounds} rounds")
                elif step.kind == "expect":
                    if self.paused:
                        raise ReproError(f"{step.describe()}: a background statement is still paused")
                    got = self.answer(step)
                    out.expectations.append(Expectation(step.name, step.equals, got))
                    self.say(f"    {'held' if got == step.equals else 'FAILED'}: got {got}, expected {step.equals}")
                elif step.kind == "sleep":
                    for _ in range(int(step.seconds * STEPS_PER_SECOND)):
                        self.cluster.round()
                elif step.kind == "kill":
                    self._running(step).crash_replica(step.on)
                elif step.kind == "restart":
                    self.cluster.add_replica(step.on)
            self._finish_running()
            # The run ends as a test's teardown would wait: every replica caught up as far as it
            # can (a SYSTEM STOP left in place still holds), then the history is written.
            self.cluster.settle()
            out.history = Path(history) if history is not None else self.data_dir / "history"
            self.cluster.write_history(out.history, settled=True)   # the final snapshot the oracle judges
            out.broken = {k: v for k, v in check(self.cluster.history, self.table.replication_factor).items() if v}
        except GuardFailed as e:
            raise ReproError(f"the reference refused a step: {e}") from e
        finally:
            if self.cluster is not None:
                self.cluster.close()
        return out


def cmd_repro(a) -> int:
    """`python -m reference repro FILE [--fixed]`: the file on the reference, each step as it goes,
    each expectation's verdict, the oracle's; 0 every expectation held and the history holds, 1
    otherwise (the finding shown, when not --fixed)."""
    from harness.cli_args import BadInput
    from reference.pr102244.repro import load
    try:
        repro = load(a.file)
        reference_switches(repro, a.fixed)
    except (ReproError, ReproUnsupported) as e:
        raise BadInput(str(e)) from None
    with tempfile.TemporaryDirectory(prefix="repro-") as parts:
        return _run_repro(a, repro, ReferenceDriver(repro, fixed=a.fixed, data_dir=Path(parts)))


def _run_repro(a, repro: Repro, driver: ReferenceDriver) -> int:
    from harness.cli_args import BadInput
    print(f"{repro.finding}: {repro.title}")
    print(f"on the reference's PR design, {'with the fix' if a.fixed else 'as the code is'} "
          f"(switches: {', '.join(sorted(driver.bugs))})")
    try:
        out = driver.run(history=a.history)
    except ReproError as e:
        raise BadInput(str(e)) from None
    failed = [e for e in out.expectations if not e.held]
    for e in failed:
        print(f"expectation failed: {e.name}: got {e.got}, expected {e.expected}")
    for name, why in sorted(out.broken.items()):
        print(f"history: {name} violated: {why[0]}" + (f" (and {len(why) - 1} more)" if len(why) > 1 else ""))
    if a.history:
        print(f"history written to {out.history}")
    shown = bool(failed) and repro.invariant in out.broken
    print(f"verdict: {'holds' if out.held and not out.broken else 'violated'}"
          + ("" if a.fixed else f" ({repro.finding} {'shown' if shown else 'not shown'}: "
                                f"{repro.invariant} {'flagged' if repro.invariant in out.broken else 'not flagged'})"))
    return 0 if out.held and not out.broken else 1
