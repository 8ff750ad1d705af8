"""The driver that runs a reproduction file (reference/pr102244/repro.py) over ClickHouse's HTTP
interface against real clickhouse-server replicas (harness/clickhouse.py): the same file, unchanged,
that reference/pr102244/repro_reference.py runs on the reference's PR design.

Statements go to the server verbatim: `{replica}` and `{shard}` inside ReplicatedMergeTree(...)
are the server's macros (the harness's config defines both), so nothing is substituted here.

A server without selective replication (Debian's 18.16, today's releases) can run a file's base
steps (CREATE TABLE, INSERT, SYSTEM STOP FETCHES, kills, waits) but not the PR's statements: the
run stops at the first selective step with one line saying so (`refused`), rather than a syntax
error that reads like a finding. With a build of the PR (CLICKHOUSE_BIN) every step runs.

    python -m agreement repro FILE [--zk HOST:PORT[/chroot]]

Exit status (harness/cli_args.py): 0 every expectation held, 1 one failed (named with its expected
and actual answer), 2 a file that does not load, 3 no verdict (no server, a step refused as
selective, a statement the server refused, a wait that timed out), 130 Ctrl-C.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from harness.clickhouse import ClickHouseCluster, ClickHouseError, ClickHouseUnavailable, server_command, server_version
from harness.cli_args import (HOLDS, VIOLATED, BadInput, EnvironmentFailure, Parser, existing_file, keeper_reachable,
                              run_main, zk_address)
from harness.zookeeper import ZooKeeperServer, ZooKeeperUnavailable, interrupt_on_ctrl_c_and_kill
from reference.pr102244.repro import SELECTIVE, Repro, ReproError, Step, load

POLL_S = 0.2   # an `until`'s polling period
# Whether the server has the PR's table setting: the PR adds replication_factor to MergeTree's
# settings, and nothing else does; an error (a release without the system table) is a no.
SELECTIVE_PROBE = "SELECT count() FROM system.merge_tree_settings WHERE name = 'replication_factor'"


class StepFailed(RuntimeError):
    """A step that did not run (a statement the server refused, a wait that timed out): no verdict."""


@dataclass
class Expectation:
    name: str
    expected: str
    got: str
    held: bool


@dataclass
class ReproOutcome:
    expectations: list[Expectation] = field(default_factory=list)
    refused: str | None = None   # one line: the selective step this server cannot run, where the run stopped
    steps_run: int = 0           # steps completed before the end (or before the refused one)

    @property
    def held(self) -> bool:
        return self.refused is None and all(e.held for e in self.expectations)


def supports_selective(cluster: ClickHouseCluster, replica: str) -> bool:
    try:
        return cluster.query(replica, SELECTIVE_PROBE).strip() != "0"
    except ClickHouseError:
        return False


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _first_line(e: Exception) -> str:
    return _one_line(getattr(e, "message", None) or str(e), 300)


def run_over_http(repro: Repro, cluster: ClickHouseCluster, say: Callable[[str], None] = print) -> ReproOutcome:
    """Run `repro`'s steps in order on `cluster` (started, with a replica per name in repro.replicas)."""
    out = ReproOutcome()
    selective = supports_selective(cluster, repro.replicas[0])
    background: list[tuple[Step, threading.Thread, list[Exception]]] = []

    def join_background() -> None:
        # A background statement (one that blocks at a pause failpoint) must have returned before
        # anything is judged, as repro_reference.py requires of its paused statements.
        while background:
            step, thread, errors = background.pop(0)
            thread.join()
            if errors and not step.refusable:
                raise StepFailed(f"{_one_line(step.describe())}: the server refused it: {_first_line(errors[0])}")

    for step in repro.steps:
        if step.selective and not selective:
            shown, what = _one_line(step.describe()), SELECTIVE.search(step.text).group(0)
            if what not in shown:   # cut off in a long statement: say what made it selective
                shown += f" (uses {what})"
            out.refused = (f"{shown} needs a server with selective replication (ClickHouse PR #102244's "
                           f"replication_factor setting); clickhouse-server {cluster.version()} has none")
            say(f"  refused: {out.refused}")
            return out
        say(f"  {_one_line(step.describe(), 200)}")
        if step.kind == "sql" and step.background:
            errors: list[Exception] = []

            def run(step=step, errors=errors):
                try:
                    cluster.query(step.on, step.text)
                except (ClickHouseError, ConnectionError) as e:
                    errors.append(e)
            background.append((step, threading.Thread(target=run, daemon=True), errors))
            background[-1][1].start()
        elif step.kind == "sql":
            try:
                cluster.query(step.on, step.text)
            except ClickHouseError as e:
                if not step.refusable:
                    raise StepFailed(f"{_one_line(step.describe())}: the server refused it: {_first_line(e)}") from None
                say(f"    refused: {_first_line(e)}")   # a fix's refusal is the answer the file asks about
            except ConnectionError as e:   # the replica is down (killed and not restarted)
                raise StepFailed(f"{_one_line(step.describe())}: {_first_line(e)}") from None
        elif step.kind == "kill":
            cluster.stop(step.on)    # kill -9 of the process group; its files stay for the restart
        elif step.kind == "restart":
            cluster.start(step.on)   # same ports and data; returns once it answers SELECT 1
        elif step.kind == "sleep":
            time.sleep(step.seconds)
        elif step.kind == "until":
            _until(cluster, step)
        elif step.kind == "expect":
            join_background()
            try:
                got = cluster.query(step.on, step.text).strip()
            except (ClickHouseError, ConnectionError) as e:   # an error is an answer that does not hold
                got = f"error: {_first_line(e)}"
            held = got == step.equals
            out.expectations.append(Expectation(step.name, step.equals, got, held))
            say(f"    {'held' if held else 'FAILED'}: got {got}, expected {step.equals}")
        out.steps_run += 1
    join_background()
    return out


def _until(cluster: ClickHouseCluster, step: Step) -> None:
    """Poll until the query answers 1. Errors are polled through too: a restarted replica's table
    is read-only until its old ZooKeeper session expires, a table may not exist on it yet."""
    deadline = time.monotonic() + step.timeout_s
    last = "no answer"
    while True:
        try:
            last = cluster.query(step.on, step.text).strip()
            if last == "1":
                return
        except (ClickHouseError, ConnectionError) as e:
            last = f"error: {_first_line(e)}"
        if time.monotonic() >= deadline:
            raise StepFailed(f"{_one_line(step.describe())}: did not answer 1 within {step.timeout_s:g} s "
                             f"(last answer: {last})")
        time.sleep(POLL_S)


# ---- the command line ------------------------------------------------------------------------

PROG = "python -m agreement repro"


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog=PROG, description="Run a PR #102244 reproduction file (reference/pr102244/repro/) on real "
                                       "ClickHouse replicas over HTTP, one per name in its `replicas`.")
    ap.add_argument("file", type=existing_file, help="the reproduction, a TOML file")
    ap.add_argument("--zk", type=zk_address, metavar="HOST:PORT[/chroot]",
                    help="a running ZooKeeper instead of starting one (a fresh chroot keeps runs apart: "
                         "the files' table paths are fixed)")
    a = ap.parse_args(argv)
    return run_main(PROG, lambda: _run(a), environment=(ClickHouseUnavailable, ZooKeeperUnavailable, StepFailed))


def _run(a) -> int:
    try:
        repro = load(a.file)   # before any server starts: a bad file costs nothing
    except ReproError as e:
        raise BadInput(_one_line(str(e), 400)) from None
    server_version(server_command())   # no clickhouse-server: one line, before ZooKeeper starts
    if a.zk:
        keeper_reachable(a.zk)
    interrupt_on_ctrl_c_and_kill()   # SIGTERM too: the `with` blocks stop every server started here
    with contextlib.ExitStack() as running:
        zk = a.zk or running.enter_context(ZooKeeperServer()).hosts
        # A short ZooKeeper session: a killed replica's is_active goes within seconds, so a
        # restarted one is writable again (18.16 waits for the old session to expire).
        cluster = running.enter_context(ClickHouseCluster(zk, repro.replicas, session_timeout_ms=3000))
        print(f"{repro.finding}: {repro.title}", flush=True)
        print(f"on clickhouse-server {cluster.version()}: "
              + ", ".join(f"{n} {cluster.url(n)}" for n in cluster.names) + f"; ZooKeeper {zk}", flush=True)
        out = run_over_http(repro, cluster, say=lambda line: print(line, flush=True))
    if out.refused:
        print("verdict: none (a step needs selective replication)", flush=True)
        raise EnvironmentFailure(out.refused)
    failed = [e for e in out.expectations if not e.held]
    for e in failed:
        print(f"expectation failed: {e.name}: expected {e.expected}, got {e.got}", flush=True)
    print(f"verdict: {'holds' if not failed else 'violated'} "
          f"({len(out.expectations) - len(failed)} of {len(out.expectations)} expectations held)", flush=True)
    return VIOLATED if failed else HOLDS


if __name__ == "__main__":
    sys.exit(main())
