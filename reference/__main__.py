"""Command line of the reference implementation.

    python -m reference run [options]      a cluster, a workload, migrations, queries, a history
    python -m reference tables --zk H:P    the system tables of a table on ZooKeeper
    python -m reference gantt [options]    a Gantt chart of a rebalance: simulated (bandwidths) or a reference run
    python -m reference repro FILE         a reproduction of a PR #102244 finding (reference/pr102244/repro/)

`run` starts N replicas on the embedded in-memory keeper (or on ZooKeeper with --zk), inserts a
generated workload on the RFC's table, then adds/crashes replicas, reassigns or rebalances with
progress lines, runs queries, prints the system tables and the history check, and writes the
history (--history DIR). --json prints one JSON document instead of tables.

Exit status (harness/cli_args.py): 0 the history check holds, 1 it found a violation, 2 bad input
(named), 3 the environment failed (ZooKeeper unreachable, ...), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kazoo.exceptions import KazooException

from checkers.oracle import violations
from harness.cli_args import (
    BadInput,
    Parser,
    existing_file,
    fraction,
    int_at_least,
    keeper_reachable,
    one_of,
    output_dir,
    output_file,
    positive_float,
    refused,
    run_main,
    text,
    zk_address,
    znode_path,
)
from protocol.assignment import GuardFailed, read_assignment, selective_assignments_rows
from protocol.bugs import SWITCHES, UnknownSwitch
from protocol.pr102244 import READINGS
from protocol.keeper import KeeperUnavailableError, MemoryEnsemble, NoAuthError
from protocol.layout import Layout
from protocol.migration import MigrationError, migrations_in_flight
from protocol.parallel_replicas import COORDINATORS
from protocol.parts import BadPart
from protocol.registration import LeftoverRoot, NothingToAttach, RootInUse, UnsafeRootAcl
from protocol.scheduler import Schedule
from protocol.system_tables import FORMATS, ONE_TABLE_FORMATS, all_tables, to_json_each_row, to_tsv
from protocol.table import BadPartitionId, Table, TableDefinitionError
from reference.cli_checks import ARGV_AUTH, ZK_AUTH_ENV, check_gantt, check_run, switches, zk_credentials
from reference.cluster import Cluster
from reference.profiles import PROFILES, UnknownProfile
from reference.run_state import RUN_OPTIONS, RunState
from reference.workload import WORKLOAD, blocks

ROOT = "/clickhouse/tables/01/events"
JOURNAL = "journal"   # under --history: the history as it is recorded, and the run's state (--attach)
# How long an attach waits for the killed run's session (ZooKeeperKeeper's 10 s timeout) to
# expire and take its `reference_run` node with it.
ATTACH_WAIT = 15.0


# A replica's name as the run names them (r1, r2, ...); one that is not in the run is refused by check_run.
REPLICA = text("a replica name", r"[\w-]+")

def table_with_buckets(buckets: int, rf: int) -> Table:
    if buckets < 1:
        raise TableDefinitionError(f"--buckets must be >= 1, not {buckets}")
    return Table(WORKLOAD.name, WORKLOAD.columns, f"(toYYYYMM(date), user_id % {buckets})", WORKLOAD.order_by,
                 replication_factor=rf)


def keeper_factory(zk: str | None, auth: str | None = None):
    """auth: USER:PASSWORD, already checked (cli_checks.zk_credentials)."""
    if zk is None:
        if auth is not None:
            raise BadInput(f"--zk-auth-file or {ZK_AUTH_ENV} needs --zk (the in-memory keeper has no ACLs)")
        return MemoryEnsemble().connect, "memory"
    from protocol.keeper.zookeeper import ZooKeeperKeeper
    return (lambda: ZooKeeperKeeper(zk, auth=auth)), "zookeeper"


def add_credentials(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--zk-auth-file", type=existing_file, metavar="FILE",
                   help=f"a file (mode 600) whose first line is USER:PASSWORD: {what}; or set {ZK_AUTH_ENV}")
    # Refused with one line that does not repeat the value (an unknown option's error would).
    p.add_argument("--zk-auth", type=refused(ARGV_AUTH), help=argparse.SUPPRESS)


def print_table(title: str, rows: list[dict], out) -> None:
    print(f"\n{title} ({len(rows)} rows)", file=out)
    if not rows:
        return
    cols = list(rows[0])
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)), file=out)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)), file=out)


def check_format(a: argparse.Namespace) -> None:
    """--format tsv and jsoneachrow are a stream of one table's rows (TSVWithNames, JSONEachRow), as
    clickhouse-local reads them: --show names that table."""
    a.json = a.format == "json"
    if a.format in ONE_TABLE_FORMATS:
        if getattr(a, "design", "rfc") != "rfc":
            raise BadInput(f"--format {a.format}: the {a.design} design's run prints text or json")
        if len(a.show) != 1:
            raise BadInput(f"--format {a.format} prints one table, for clickhouse-local: name it with --show "
                           f"(one of {', '.join(TABLES)}), not {len(a.show)}")


def show_tables(tables: dict, names: list[str], fmt: str, out) -> None:
    """The system tables as aligned text on `out`, or one table's rows on stdout (tsv, jsoneachrow)."""
    for name in names:
        if fmt == "tsv":
            sys.stdout.write(to_tsv(tables[name], name))
        elif fmt == "jsoneachrow":
            sys.stdout.write(to_json_each_row(tables[name]))
        else:
            print_table(name, tables[name], out)
    sys.stdout.flush()


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v)) if len(v) <= 4 else f"{len(v)} items"
    return str(v)


def check_attach(a: argparse.Namespace) -> RunState | None:
    """--attach: the run to carry on, its options taken back into `a` (run_state.py); None
    without --attach. A run on the in-memory keeper dies with its process: nothing to attach to."""
    if not a.attach:
        return None
    if not a.zk:
        raise BadInput("--attach needs --zk: the in-memory keeper's table ended with the process that was killed")
    if not a.data or not a.history:
        raise BadInput("--attach needs the killed run's --data (the replicas' parts) and --history (its journal)")
    if a.fresh:
        raise BadInput("--attach carries on the table at --root; --fresh would clear it: give one of the two")
    if a.design != "rfc" or a.profile != "quiet" or a.placement_chart:
        raise BadInput("--attach carries on a quiet run of the RFC's design (not --design pr102244, a racing "
                       "--profile or --placement-chart, whose before is the killed run's)")
    state = RunState.load(Path(a.history) / JOURNAL)
    state.apply(a, a.run_defaults)
    return state


def cmd_run(a: argparse.Namespace) -> int:
    state = check_attach(a)
    check_format(a)
    if a.reading and a.design != "pr102244":
        raise BadInput("--reading is a reading of PR #102244's text: use it with --design pr102244")
    if a.as_code and a.design != "pr102244":
        raise BadInput("--as-code runs PR #102244's code: use it with --design pr102244")
    if a.parallel_replicas and a.profile == "quiet":
        raise BadInput("--parallel-replicas picks the coordinator of a racing profile's parallel-replicas SELECTs: "
                       "use it with --profile parallel")
    bugs = switches(a.bug, a.design)
    if a.as_code:
        from protocol.pr102244 import code_switches   # the PR design's own module
        bugs |= code_switches()
    table = table_with_buckets(a.buckets, a.replication_factor)
    reassigns = check_run(a)
    if a.zk:
        keeper_reachable(a.zk)
    out = sys.stdout if a.format == "text" else sys.stderr   # stdout: the document or the rows alone
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - t0:7.2f}s] {msg}", file=out, flush=True)

    auth = zk_credentials(a)
    if a.fix_acls and auth is None:
        raise BadInput(f"--fix-acls needs credentials (--zk-auth-file or {ZK_AUTH_ENV}): an ACL is given to them")
    connect, backend = keeper_factory(a.zk, auth)
    holder = claim(a, connect, progress)   # one root, one table: held until the run ends
    data = Path(a.data or tempfile.mkdtemp(prefix="selective-"))
    try:
        if a.design == "pr102244":   # PR #102244's design: reference/pr102244/cli.py
            from reference.pr102244.cli import cmd_run as cmd_run_pr102244
            return cmd_run_pr102244(a, bugs, table, reassigns, connect, backend, data, progress, out, print_table)
        if a.profile != "quiet":
            return run_profile(a, bugs, connect, backend, data, progress, out)
        return _run(a, bugs, table, reassigns, out, progress, connect, backend, data, state)
    finally:
        holder.close()
        # A temporary folder of our own goes with the run unless --keep; --data is the user's.
        if not a.data:
            if a.keep:
                print(f"replicas' parts kept in {data}", file=out)
            else:
                shutil.rmtree(data, ignore_errors=True)


def _run(a, bugs, table, reassigns, out, progress, connect, backend, data: Path, state: RunState | None) -> int:
    # With --history the history is journaled as it is recorded, and the run's state kept beside
    # it, so that a killed run can be carried on (--attach: `state` is the killed run's).
    journal = Path(a.history) / JOURNAL if a.history else None
    if journal is not None and state is None:
        shutil.rmtree(journal, ignore_errors=True)   # an earlier run's, whose table --fresh cleared or was elsewhere
        journal.mkdir(parents=True)
        state = RunState.start(journal, a, [f"r{i}" for i in range(1, a.replicas + 1)])
    attach = bool(a.attach)
    c = Cluster(connect, data, replicas=state.running if state else [f"r{i}" for i in range(1, a.replicas + 1)],
                table=table, root=a.root, bugs=bugs, seed=a.seed, fault_rate=a.fault_rate,
                max_concurrent=a.max_concurrent, schedule=Schedule(per_source=a.per_source, per_target=a.per_target),
                backend=backend, log=progress, journal=journal, resume=attach)

    def phase(name: str) -> bool:
        """Whether `name` is still to do: not done before a kill (`done` marks it)."""
        return state is None or not state.is_done(name)

    def done(name: str) -> None:
        if state is not None:
            state.mark(name, list(c.replicas))
    try:
        # An attach sends the blocks the killed run had not sent, after those it sent and had no
        # answer to (the unknown its client was left with: c.resume_record): those go again with
        # their block ids and rows, as a client retries an INSERT whose connection broke, so the
        # block is deduplicated where the first sending was written and written where it was not.
        everything = list(blocks(random.Random(a.seed), a.blocks, a.rows, a.months))
        sent = {x["block_id"] for x in c.history.tables["inserts"]}
        again = set(c.unanswered_at_resume)
        resent = [(b, rows) for b, rows in everything if b in again]
        work = resent + [(b, rows) for b, rows in everything if b not in sent]
        before = a.blocks - len(work) + len(resent)   # answered before a kill

        def loaded(i: int, statuses: dict) -> None:
            i = before + max(0, i - len(resent))
            if i % max(1, a.blocks // 5) == 0 or i == a.blocks:
                progress(f"inserted {i}/{a.blocks} blocks; sub-blocks ok {statuses['ok']}, "
                         f"unknown {statuses['unknown']}, failed {statuses['failed']}" + (" since the attach" if attach else ""))
        if phase("load"):
            if attach:
                progress(f"attached: {before} of {a.blocks} blocks answered before the kill; {len(resent)} sent "
                         "and not answered are sent again with their block ids")
            c.load(work, progress=loaded)
            done("load")
        # The sub-blocks' answers over the whole history (before a kill and after), each counted by
        # its last answer: a sub-block sent again after a kill was unknown first.
        last: dict[str, dict] = {}
        for x in c.history.tables["inserts"]:
            if x["insert_id"] not in last or (x["ack_step"] or 0) >= (last[x["insert_id"]]["ack_step"] or 0):
                last[x["insert_id"]] = x
        statuses = {st: sum(x["status"] == st for x in last.values()) for st in ("ok", "unknown", "failed")}
        if not statuses["ok"]:
            raise BadInput(f"no INSERT was acknowledged (--fault-rate {a.fault_rate:g}, --blocks {a.blocks}): "
                           "nothing to check")
        c.settle()
        if phase("membership"):
            for r in a.crash or []:
                if r in c.replicas:   # not crashed already before the kill
                    c.crash_replica(r)
            for r in a.lose or []:   # a permanent loss: the replica crashes and is dropped for good (F20)
                if r in c.replicas:
                    c.crash_replica(r)
                if r in c.admin.get_children(c.layout.replicas):
                    c.drop_replica(r)
            for k in range(a.add_replicas):
                if f"r{a.replicas + k + 1}" not in c.replicas:
                    c.add_replica(f"r{a.replicas + k + 1}")
            done("membership")
        during = lambda: c.query(interleave=2) if c.rng.random() < a.query_rate else None  # noqa: E731
        before = selective_assignments_rows(c.admin, c.layout) if a.placement_chart else None
        if a.lose and not a.rebalance and phase("repair"):
            repairs = c.repair_all(interleave=during)
            progress(f"REPAIR done: {len(repairs)} partitions back to replication factor {a.replication_factor}")
            done("repair")
        for i, (p, dst) in enumerate(reassigns):
            if phase(f"reassign {i}"):
                held = read_assignment(c.admin, c.layout, p) if attach else None
                if held is not None and dst in held.keepers():
                    progress(f"REASSIGN {p} TO {dst}: made before the kill")
                else:
                    c.reassign(p, dst)
                    progress(f"REASSIGN {p} TO {dst}: CLONE started")
                done(f"reassign {i}")
        if reassigns:
            while migrations_in_flight(c.admin, c.layout):
                during()
                if not c.background_step():
                    c.settle()
        if a.rebalance and phase("rebalance"):   # the plan is read from Keeper: an attach goes on with it
            moves = c.rebalance(interleave=during)
            progress(f"REBALANCE done: {len(moves)} moves")
            done("rebalance")
        c.end_of_run([r for r in a.restart or [] if r not in c.replicas], a.queries, a.history, a.history_format)
        done("end")
        problems = violations(c.history, c.table.replication_factor)
        tables = all_tables(c.admin, c.layout, c.stores)
        if a.placement_chart:
            from reference import placement_chart
            names = sorted(c.replicas)
            shown = placement_chart.draw(
                placement_chart.owners_by_replica(before, names),
                placement_chart.owners_by_replica(tables["system.selective_assignments"], names), a.placement_chart,
                f"partitions per replica before and after {'REBALANCE' if a.rebalance else 'REASSIGN'} "
                f"({a.replicas} + {a.add_replicas} replicas, RF {a.replication_factor}, seed {a.seed})")
            moved = sum(len(x["arrived"]) for x in shown["per_replica"].values())
            progress(f"placement chart written to {a.placement_chart}: {moved} partition copies moved")
        if a.json:
            json.dump({"tables": tables, "inserts": statuses, "queries": c.queries, "steps": c.step,
                       "violations": problems, "data": str(data) if a.data or a.keep else None},
                      sys.stdout, indent=1, default=str)
            print()
        else:
            show_tables(tables, a.show, a.format, out)
            print(f"\nhistory check: {len(problems)} violations" + "".join(f"\n  {p}" for p in problems[:20]), file=out)
        return 1 if problems else 0
    finally:
        c.close()


def claim(a: argparse.Namespace, connect, progress):
    """A session holding --root for this run (registration.claim_root); on the in-memory keeper
    every run has its own tree, so there is nothing to hold. An attach knows the killed run's
    is_active nodes by the identifiers in --data (PartStore.server_uuid) and waits up to
    ATTACH_WAIT seconds for its `reference_run` node to go with its session."""
    import os
    import socket

    from protocol.parts import read_server_uuid
    from protocol.registration import Attach, check_root_acl, claim_root
    attach = None
    if a.attach:
        own = {d.name: uid for d in sorted(Path(a.data).iterdir()) if (uid := read_server_uuid(d)) is not None}
        attach = Attach(own, ATTACH_WAIT)
        progress(f"attaching to {a.root}: replicas {', '.join(sorted(own)) or 'none'} in {a.data}; waiting up to "
                 f"{ATTACH_WAIT:g} s for the killed run's session to expire")
    k = connect()
    try:
        if check_root_acl(k, Layout(a.root), fix=a.fix_acls):
            print(f"--fix-acls: {a.root} is now changed by these credentials alone", file=sys.stderr)
        claim_root(k, Layout(a.root), f"run pid {os.getpid()} on {socket.gethostname()}", a.fresh, a.zk or "",
                   attach=attach)
    except BaseException:
        k.close()
        raise
    return k


def run_profile(a, bugs, connect, backend, data, progress, out) -> int:
    """--profile racing|stale|...|leaving (reference/profiles.py): the profile's seeded loop
    (reference/races.py) instead of the phases above; --replicas, --buckets, --replication-factor,
    --blocks, --rows, --months, --steps and --seed apply, the history and the check as for quiet."""
    from reference.races import profile_of, race, racing_cluster
    profile = profile_of(a.profile)
    c = racing_cluster(connect, data, profile, a.seed, bugs, replicas=a.replicas, buckets=a.buckets,
                       rf=a.replication_factor, root=a.root, backend=backend, log=progress)
    if a.parallel_replicas:
        c.coordinator = a.parallel_replicas
    try:
        counts = race(c, profile, a.seed, blocks=a.blocks, rows=a.rows, months=a.months, steps=a.steps)
        progress(f"profile {a.profile}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if a.history:
            c.write_history(a.history, a.history_format)
            progress(f"history written to {a.history}")
        else:
            c.snapshot()
        problems = violations(c.history, c.table.replication_factor)
        if a.json:
            json.dump({"profile": a.profile, "actions": counts, "queries": c.queries, "steps": c.step,
                       "violations": problems, "data": str(data)}, sys.stdout, indent=1, default=str)
            print()
        else:
            print(f"\nhistory check: {len(problems)} violations" + "".join(f"\n  {p}" for p in problems[:20]), file=out)
        return 1 if problems else 0
    finally:
        c.close()


def cmd_tables(a: argparse.Namespace) -> int:
    check_format(a)
    keeper_reachable(a.zk)
    k = keeper_factory(a.zk, zk_credentials(a))[0]()
    try:
        layout = Layout(a.root)
        if k.exists(layout.config) is None:
            raise BadInput(f"--root {a.root}: no selective table on {a.zk} (no znode {layout.config})")
        tables = all_tables(k, layout)
    finally:
        k.close()
    if a.json:
        json.dump(tables, sys.stdout, indent=1, default=str)
        print()
    else:
        show_tables(tables, a.show, a.format, sys.stdout)
    return 0


def schedule_of(a: argparse.Namespace) -> Schedule:
    if a.rule == "table_limit":
        return Schedule.table_limit(a.per_table or 4)
    return Schedule(a.per_table, a.per_source, a.per_target, a.rule, proportional=not a.equal_limits)


def cmd_gantt(a: argparse.Namespace) -> int:
    """Simulate the growth scenario's rebalance (default: the RFC's) or run it on the reference,
    and draw one bar per migration."""
    from protocol.rebalance import plan_rebalance
    from reference import gantt
    from reference.makespan import GB, Bandwidth, simulate
    from reference.scenarios import growth
    check_gantt(a)
    schedule = schedule_of(a)
    if a.run:
        data = tempfile.mkdtemp(prefix="selective-gantt-")
        # The table's cap: the schedule's own per-table limit, or else one no run can reach (the
        # history records a number): the table's partitions, 16 buckets a month, one migration each.
        c = Cluster(MemoryEnsemble().connect, data,
                    replicas=[f"r{i:02d}" for i in range(1, a.old + 1)], seed=a.seed,
                    table=table_with_buckets(16, a.rf), schedule=schedule,
                    max_concurrent=schedule.per_table or 16 * a.months)
        try:
            c.load(blocks(random.Random(a.seed), a.blocks, 10, a.months))
            c.settle()
            moves = c.grow_and_rebalance([f"r{i:02d}" for i in range(a.old + 1, a.old + a.new + 1)])
            c.settle()
            migrations = gantt.from_timeline(c.timeline)
        finally:
            c.close()
            shutil.rmtree(data, ignore_errors=True)
        title = f"reference run: {a.old} -> {a.old + a.new} replicas, {len(moves)} moves, {schedule.describe()}"
        unit = "driver steps"
        print(f"{len(moves)} moves; {len(migrations)} switched; steps {min(m['start'] for m in migrations)}.."
              f"{max(m.get('cleanup') or m['switch'] for m in migrations)}")
    else:
        assignments, replicas = growth(a.old, a.new, a.partitions, a.rf, a.seed)
        plan = plan_rebalance(assignments, replicas)
        if a.rule == "table_limit":
            plan = sorted(plan)  # the landed order: by partition
        bw = Bandwidth(a.read * GB, a.ingest * GB)
        r = simulate(plan, lambda p: a.size * GB, bw, schedule)
        migrations = gantt.from_spans(r.spans)
        title = (f"simulated: {a.old} -> {a.old + a.new} replicas, {len(plan)} x {a.size:g} GB, read {a.read:g} GB/s, "
                 f"ingest {a.ingest:g} GB/s, {schedule.describe()}\nmakespan {r.makespan:.0f} s, bound "
                 f"{r.lower_bound:.0f} s ({r.ratio:.2f}x), serial {r.serial:.0f} s")
        unit = "s"
        print(f"makespan {r.makespan:.0f} s, lower bound {r.lower_bound:.0f} s ({r.ratio:.3f}x), serial {r.serial:.0f} s")
    out = a.out or f"build/gantt-{'run' if a.run else 'sim'}.png"
    gantt.draw(migrations, out, title, unit, a.lane)
    print(f"wrote {out}")
    return 0


def add_format(p) -> None:
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text: aligned tables; json: one document; tsv (TSVWithNames) or jsoneachrow (JSONEachRow): "
                        "the rows of the one --show table on stdout, for clickhouse-local (progress on stderr)")
    p.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")


TABLES = ["system.replicas", "system.replication_queue", "system.selective_assignments", "system.selective_migrations"]


def main(argv: list[str] | None = None) -> int:
    at_least_0, at_least_1 = int_at_least(0), int_at_least(1)
    ap = Parser(prog="python -m reference", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a cluster with a workload (in-memory keeper unless --zk)")
    r.add_argument("--replicas", type=at_least_1, default=3)
    r.add_argument("--replication-factor", type=at_least_1, default=None,
                   help="default: the profile's (2; windows_rf1: 1)")
    r.add_argument("--buckets", type=at_least_1, default=16, help="user_id %% BUCKETS in the partition key")
    r.add_argument("--months", type=at_least_1, default=2)
    r.add_argument("--blocks", type=at_least_1, default=20, help="INSERT blocks")
    r.add_argument("--rows", type=at_least_1, default=10, help="rows per block")
    r.add_argument("--fault-rate", type=fraction, default=0.0, help="chance a forward breaks (outcome unknown)")
    r.add_argument("--add-replicas", type=at_least_0, default=0)
    r.add_argument("--crash", action="append", metavar="REPLICA", type=REPLICA,
                   help="crash a replica after the inserts")
    r.add_argument("--restart", action="append", metavar="REPLICA", type=REPLICA,
                   help="restart a crashed replica after the migrations")
    r.add_argument("--lose", action="append", metavar="REPLICA", type=REPLICA,
                   help="lose a replica for good after the inserts: crash, SYSTEM DROP REPLICA, then repair "
                        "each partition it owned back to the replication factor")
    r.add_argument("--reassign", action="append", metavar="PARTITION:REPLICA",
                   type=text("PARTITION:REPLICA", r"[\w-]+:[\w-]+"))
    r.add_argument("--rebalance", action="store_true")
    r.add_argument("--max-concurrent", type=at_least_1, default=4,
                   help="the table's cap on migrations in flight (REASSIGN, REPAIR and REBALANCE)")
    r.add_argument("--per-source", type=at_least_1, default=2,
                   help="SYSTEM REBALANCE: CLONEs reading from one source replica at once")
    r.add_argument("--per-target", type=at_least_1, default=16,
                   help="SYSTEM REBALANCE: CLONEs writing to one target replica at once")
    r.add_argument("--query-rate", type=fraction, default=0.1, help="chance of a query between migration steps")
    r.add_argument("--queries", type=at_least_0, default=3, help="queries at the end")
    r.add_argument("--bug", action="append", metavar="SWITCH", type=one_of(SWITCHES, "switch"),
                   help="turn on an RFC-as-written / broken switch")
    r.add_argument("--design", choices=["rfc", "pr102244"], default="rfc",
                   help="the RFC's design (default) or ClickHouse PR #102244's (spec/pr102244/PR102244.md)")
    r.add_argument("--reading", action="append", metavar="READING", type=one_of(READINGS, "reading"),
                   help="(--design pr102244) a reading of what the PR leaves open, e.g. filter_cached")
    r.add_argument("--as-code", action="store_true",
                   help="(--design pr102244) the PR's code as it is: every switch of PR102244Code.tla's Bugs the "
                        "reference implements (protocol/pr102244/__init__.py CODE), on top of any --bug")
    r.add_argument("--seed", type=int_at_least(0), default=0)
    r.add_argument("--profile", default="quiet", type=one_of(["quiet", *PROFILES], "profile"),
                   help="quiet (the phases above: inserts, then migrations, "
                   "synced queries) or a racing profile of reference/profiles.py: " + ", ".join(PROFILES))
    r.add_argument("--steps", type=at_least_1, help="(racing profiles) loop turns; default the profile's")
    r.add_argument("--parallel-replicas", choices=COORDINATORS, metavar="COORDINATOR",
                   help="(racing profiles) the coordinator of the parallel-replicas SELECTs (profile parallel): "
                        "partition_snapshot (the fix, default), snapshot_replica (ClickHouse master, the path "
                        "PR #102244 takes: PR-F11) or union (2023's); spec/FINDINGS.md F24")
    r.add_argument("--zk", type=zk_address, metavar="HOST:PORT", help="ZooKeeper instead of the in-memory keeper")
    r.add_argument("--root", type=znode_path, default=ROOT, help="the table's znode path")
    add_credentials(r, "digest identity (as ClickHouse's <identity>): every znode the run creates is readable "
                       "and writable by it only")
    r.add_argument("--fix-acls", action="store_true",
                   help="with credentials: a --root that lets others change it (refused otherwise) is given to "
                        "the credentials alone")
    r.add_argument("--fresh", action="store_true",
                   help="clear a table an earlier run left at --root (refused while its replicas are live)")
    r.add_argument("--attach", action="store_true",
                   help="carry on a run that was killed (kill -9, a crash): its table at --root on --zk, its parts "
                        "in --data, its history journaled in --history; its options come from there")
    r.add_argument("--data", type=output_dir, help="folder for the replicas' parts (default: a temporary folder, "
                   "removed after the run unless --keep)")
    r.add_argument("--keep", action="store_true", help="keep the temporary folder of the replicas' parts and name it")
    r.add_argument("--history", type=output_dir, metavar="DIR", help="write the history there")
    r.add_argument("--history-format", choices=["parquet", "jsonl"], default="parquet")
    r.add_argument("--show", nargs="*", choices=TABLES, default=TABLES[2:3] + TABLES[:1])
    r.add_argument("--placement-chart", type=output_file, metavar="FILE",
                   help="draw each replica's partitions before and after --rebalance/--reassign (.png or .svg)")
    add_format(r)
    r.set_defaults(run_defaults={k: r.get_default(k) for k in RUN_OPTIONS})
    t = sub.add_parser("tables", help="print the system tables of a table on ZooKeeper")
    t.add_argument("--zk", type=zk_address, required=True, metavar="HOST:PORT")
    t.add_argument("--root", type=znode_path, default=ROOT)
    add_credentials(t, "the identity the table was created with")
    t.add_argument("--show", nargs="*", choices=TABLES, default=TABLES)
    add_format(t)
    g = sub.add_parser("gantt", help="Gantt chart of a rebalance: simulated (default) or a reference run (--run)")
    g.add_argument("--run", action="store_true", help="run the reference on the in-memory keeper instead of simulating")
    g.add_argument("--old", type=at_least_1, default=10, help="replicas before")
    g.add_argument("--new", type=at_least_1, default=2, help="replicas added")
    g.add_argument("--partitions", type=at_least_1, default=192, help="(simulation) partitions")
    g.add_argument("--rf", type=at_least_1, default=2, help="replication factor")
    g.add_argument("--size", type=positive_float, default=50, help="(simulation) GB per partition")
    g.add_argument("--read", type=positive_float, default=1, help="(simulation) GB/s a source disk reads")
    g.add_argument("--ingest", type=positive_float, default=10, help="(simulation) GB/s a target takes in")
    g.add_argument("--months", type=at_least_1, default=3, help="(--run) months of data")
    g.add_argument("--blocks", type=at_least_1, default=40, help="(--run) INSERT blocks")
    g.add_argument("--rule", choices=["least_busy", "largest_first", "table_limit"], default="largest_first",
                   help="the start rule (protocol/scheduler.py); largest_first with --equal-limits and --per-target "
                        "ceil(ingest/read) is the matched setting")
    g.add_argument("--per-table", type=at_least_1, help="migrations per table (default: no limit; 4 with table_limit)")
    g.add_argument("--per-source", type=at_least_1, default=2, help="CLONEs per source (the busiest's, unless --equal-limits)")
    g.add_argument("--per-target", type=at_least_1, default=16, help="CLONEs per target (the busiest's, unless --equal-limits)")
    g.add_argument("--equal-limits", action="store_true",
                   help="every source and target gets --per-source and --per-target (default: in proportion to its bytes left)")
    g.add_argument("--lane", choices=["dst", "src"], default="dst", help="a lane per target (dst) or source replica")
    g.add_argument("--seed", type=int_at_least(0), default=1)
    g.add_argument("--out", type=output_file, help="PNG path (default build/gantt-sim.png or build/gantt-run.png)")
    x = sub.add_parser("repro", help="run a reproduction of a PR #102244 finding (reference/pr102244/repro/*.toml)")
    x.add_argument("file", type=existing_file, help="the reproduction file")
    x.add_argument("--fixed", action="store_true", help="with the finding's fix (default: the code as it is)")
    x.add_argument("--history", type=output_dir, metavar="DIR", help="write the run's history there")
    a = ap.parse_args(argv)
    if a.cmd == "run" and a.replication_factor is None:   # a racing profile names its own (Profile.rf)
        from reference.profiles import PROFILES as RACING   # an unknown name is refused later, as before
        a.replication_factor = RACING[a.profile].rf if a.profile in RACING else 2

    def no_auth(e):   # an ACL refusal is bad input: the credentials name another identity, or none
        return BadInput(f"ZooKeeper refused a request by the node's ACL ({e}): the credentials (--zk-auth-file, "
                        f"{ZK_AUTH_ENV}) name another identity, or none were given")

    def command() -> int:
        try:
            if a.cmd == "repro":
                from reference.pr102244.repro_reference import cmd_repro   # the PR's driver builds on this one
                return cmd_repro(a)
            return {"run": cmd_run, "tables": cmd_tables, "gantt": cmd_gantt}[a.cmd](a)
        except NoAuthError as e:
            raise no_auth(e) from None
    # RootInUse: another run is live on the root: the environment, not the input (exit 3).
    return run_main(ap.prog, command,
                    bad_input=(UnknownSwitch, UnknownProfile, BadPartitionId, TableDefinitionError, MigrationError,
                               GuardFailed, BadPart, LeftoverRoot, UnsafeRootAcl, NothingToAttach),
                    environment=(KeeperUnavailableError, KazooException, RootInUse))


if __name__ == "__main__":
    sys.exit(main())
