"""The fault suite (issue 15): the live runtime on a real 3-node ZooKeeper ensemble, one migration
held in a chosen state while a fault is injected, inserts and queries running throughout; each
run's history checked by the in-process oracle and by the Spark job, invariant by invariant.

    python -m lab.faults [--seeds 2] [--faults F,...] [--states S,...] [--markdown BENCHMARKS.md]

Faults: by the PIDs the harness holds (ensemble members killed with SIGKILL or all stalled with
SIGSTOP for 5, 15 or 25 s, replicas crashed),
at the keeper layer (a session expired from the server side, a ConnectionLoss injected before or
after a multi applies), and on the CLONE target's disk (a tmpfs remounted read-only, or full, for
10 s; mounting needs root: elsewhere those cells are skipped, saying so), a network partition
(partition_N: the cell run in a network namespace of its own, its ensemble and runtime inside,
and the namespace's loopback taken down for N s: every packet between the replicas and ZooKeeper,
and between the members, dropped, not refused; `ip netns` needs root, skipped elsewhere), and the
whole process killed with SIGKILL and carried on with `reference run --attach` (process_kill: a
run of the command line, not the live runtime). States: `clone` (the fault right after REASSIGN), `switched`
(after SWITCH, while a running query's pin holds CLEANUP off), `cleanup` (the pin released in the
same step as the fault: CLEANUP is the source's next step). A run has recovered when every
replica thread is alive and its replica active (its session not expired) and past the log's head
of the fault's end, the migration has ended and an INSERT is acknowledged; *time to recover* runs
from the fault's end (the member or replica started again; the injection itself for the
instantaneous ones) to that moment. ZooKeeper itself can stop committing after a stall
(ZooKeeperEnsemble.wedged): then its evidence is kept, its members are restarted as an operator
would, the table says so, and the runtime is judged from that restart on. Prints the table and writes it into BENCHMARKS.md
between `<!-- bench:faults -->` markers. Exit 0 when every cell recovered with nothing lost or
duplicated and the checkers agree, 1 otherwise, 3 when no ensemble or Spark could be started.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.exceptions import ConnectionLoss
from kazoo.handlers.threading import KazooTimeoutError

from harness.cli_args import Parser, int_at_least, names, optional_output_file, output_dir, output_file, text
from lab.suite_command import Stopped, command_line, with_spark, write_section
from protocol.keeper.zookeeper import ZooKeeperKeeper

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ("leader_kill", "follower_kill", "full_outage", "session_expiry", "multi_loss_before",
          "multi_loss_after", "replica_crash", "coordinator_crash", "stall_5", "stall_15", "stall_25",
          "disk_read_only", "disk_full", "partition_5", "partition_15", "process_kill")
# stall_N: every ensemble member stopped with SIGSTOP for N seconds, the clients going on (each
# INSERT bounded by INSERT_DEADLINE); past the session timeout (10 s at tickTime 500 ms) the
# replicas' sessions expire when ZooKeeper resumes, and each replica re-establishes its own.
# The disk rows: each replica's data folder a tmpfs of its own (harness/tmpfs.py), the CLONE
# target's remounted read-only, or filled, for DISK_FAULT_SECONDS while the clients go on (issue 38:
# a 10-second fault stopped replication for good before its steps were retried).
DISK_FAULTS = ("disk_read_only", "disk_full")
DISK_FAULT_SECONDS = 10.0
# partition_N: the loopback of the cell's network namespace down for N s, below and above the
# 10 s session timeout. Unlike a member killed (the kernel answers RST: kazoo moves to the next
# server at once) or stopped (connections accepted, never answered), a packet to a link that is
# down is dropped: a request hangs until the client's own timeout, a connect too. The members
# lose each other as well, so the ensemble elects again once the link is back. The cell runs in a
# child process (`--cell`), since a namespace is a process's; the Spark job judges its history here.
PARTITION_CELL_TIMEOUT_S = 300.0
# Each client INSERT's own deadline (Cluster.insert's `deadline`: every Keeper call it makes, and
# its wait for a busy replica's lock, is cut short there). The latency the table reports runs from
# the client's call to its answer.
INSERT_DEADLINE = 3.0
# process_kill: not the live runtime but a whole `python -m reference run` process (3 replicas, a
# fourth added and rebalanced onto, queries between the migration steps), killed with SIGKILL when
# its output first shows the state (KILL_AT), then carried on with `run --attach` (issue 38). Time
# to recover: from the attach's start to its end, the wait for the killed session to expire (about
# 7 of kazoo's 10 s) included; the attach ends once every migration has ended, settled.
KILL_AT = {"clone": "(CLONE)", "switched": "SWITCH", "cleanup": "CLEANUP"}
STATES = ("clone", "switched", "cleanup")
RF = 2


class LosingKeeper(ZooKeeperKeeper):
    """A ZooKeeperKeeper whose connection "breaks" around chosen writes: `before` raises
    ConnectionLoss instead of sending the request, `after` sends it, waits until ZooKeeper has
    applied it, then raises ConnectionLoss as if the answer had been lost on the way back.

    A real connection cannot be cut at a chosen point: killing a server breaks it at a random
    point of a random request, never reliably between the moment ZooKeeper applies a multi and
    the moment its answer arrives, which is the case the read-back exists for. The injection is at
    the layer's one send point (`_send`), so the retry (kazoo's KazooRetry) and the read-back that
    follow are the real ones."""

    WRITES = ("commit_async", "create_async", "set_async", "delete_async")

    def __init__(self, hosts: str, plan=None, rate: float = 0.0, seed: int = 0, **kw):
        super().__init__(hosts, **kw)
        self.plan = list(plan or [])      # ("before"|"after") for the next writes, in order
        self.rate, self.rng = rate, random.Random(seed)
        self.injected: list[tuple[str, str]] = []

    def _send(self, stop, async_fn, *args, **kwargs):
        name = getattr(async_fn, "__name__", "")
        if name in self.WRITES:
            where = self.plan.pop(0) if self.plan else (
                self.rng.choice(("before", "after")) if self.rng.random() < self.rate else None)
            if where:
                self.injected.append((where, name))
                if where == "before":
                    raise ConnectionLoss("injected: connection lost before the request was sent")
                super()._send(stop, async_fn, *args, **kwargs)
                raise ConnectionLoss("injected: connection lost after ZooKeeper applied the request")
        return super()._send(stop, async_fn, *args, **kwargs)


@dataclass
class Outcome:
    fault: str
    state: str
    seed: int
    recovered: bool
    seconds: float | None          # time to recover
    lost: int                      # acknowledged rows missing from an owner at the end
    duplicated: int                # rows held twice by a replica, or returned twice by a query
    oracle: dict = field(default_factory=dict)   # invariant -> holds
    spark: dict = field(default_factory=dict)
    duckdb: dict = field(default_factory=dict)   # the third checker's verdicts (checkers/duckdb_check.py)
    note: str = ""
    history: str = ""
    skipped: bool = False          # the fault cannot be dealt here (mount refused): no verdict
    disk_faults: int = 0           # steps and INSERT tries the disk failed (Cluster.disk_faults)
    insert_seconds: list = field(default_factory=list)   # each client INSERT's call to answer
    # ZooKeeper itself stopped committing (ZooKeeperEnsemble.wedged) and was restarted, as an
    # operator would: the environment's fault, said in the table; what is then judged is that the
    # runtime recovered once ZooKeeper did (the time counts from that restart)
    zookeeper_restarted: str = ""

    @property
    def agree(self) -> bool:
        """All three checkers give the same verdict on every invariant."""
        return bool(self.spark) and self.oracle == self.spark == self.duckdb


def _wait(cond, timeout: float, step: float = 0.05) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if cond():
                return True
        except Exception:   # Keeper away: the condition is read again
            pass
        time.sleep(step)
    return False


def _start_cluster(hosts: str, folder: Path, seed: int, keeper, attempts: int = 20, disks: dict | None = None):
    """The cell's cluster, in a chroot of its own. The previous cell restarted the members it
    stopped, and an election may still be under way: a start that meets Keeper unavailable is
    tried again in a fresh chroot (a half-registered one would be refused as a leftover root),
    as a ClickHouse server retries attaching a replicated table until Keeper answers."""
    from protocol.keeper.base import KeeperUnavailableError
    from reference.cluster import Cluster
    for attempt in range(attempts):
        chroot = f"{hosts}/faults/{uuid.uuid4().hex[:12]}"
        try:
            setup = ZooKeeperKeeper(hosts)
            try:
                setup.ensure_path(chroot[len(hosts):])
            finally:
                setup.close()
            if disks is not None:   # each replica's data folder a disk of its own
                from harness.tmpfs import Tmpfs
                for d in disks.values():
                    d.unmount()
                disks.clear()
                disks.update({r: Tmpfs(folder / f"data{attempt}" / r) for r in ("r1", "r2", "r3")})
            return Cluster(lambda: keeper(chroot, retry_deadline=1.5), folder / f"data{attempt}",
                           replicas=("r1", "r2", "r3"), seed=seed, down_timeout=5.0)
        except (KeeperUnavailableError, ConnectionLoss, KazooTimeoutError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)


def run_one(ensemble, hosts: str, fault: str, state: str, seed: int, folder: Path, timeout: float = 60.0) -> Outcome:
    """One cell run: a table in its own chroot of the ensemble, `fault` injected with the
    migration in `state`; the history written into `folder`."""
    if fault == "process_kill":
        return run_killed(hosts, state, seed, folder)
    from checkers.oracle import check
    from harness.tmpfs import MountRefused
    from protocol.migration import read_migration
    from reference.runtime import LiveCluster
    from reference.workload import blocks
    losing = fault.startswith("multi_loss")
    rng = random.Random(seed)
    disks: dict | None = {} if fault in DISK_FAULTS else None
    try:
        c = _start_cluster(hosts, folder, seed, LosingKeeper if losing else ZooKeeperKeeper, disks=disks)
    except MountRefused as e:
        for d in (disks or {}).values():
            d.unmount()
        return Outcome(fault, state, seed, False, None, -1, -1, note=f"skipped: {e}", skipped=True)
    note, recovered, seconds, wedge = "", False, None, None
    work = blocks(rng, 10_000, 3, months=2)
    try:
        with LiveCluster(c, refresh_interval=0.3) as live:
            latencies: list[float] = []

            def client_round():
                b, rows = next(work)
                t0 = time.monotonic()
                st = live.insert(rows, b, deadline=INSERT_DEADLINE)
                latencies.append(time.monotonic() - t0)
                if rng.random() < 0.3:
                    live.query(deadline=INSERT_DEADLINE)
                return st
            for _ in range(6):
                client_round()
            with live.lock:
                p = sorted(c.admin.get_children(c.layout.assignments))[0]
                a = c.replicas["r1"].replica_refresh_cache(p)
                src = a.owners[0]
                dst = next(r for r in sorted(c.replicas) if r not in a.owners)
                c.reassign(p, dst, src)
                if state != "clone":   # a running query's pin holds CLEANUP off on the source
                    c.replicas[src].pins[p] = c.replicas[src].pins.get(p, 0) + 1
            if state != "clone":
                _wait(lambda: (client_round() and False) or read_migration(c.admin, c.layout, p)[0]["state"] == "switched",
                      timeout)

            def release_pin():
                if state != "clone" and src in c.replicas:
                    from protocol.query import unpin
                    unpin(c.replicas[src], p)
            if state == "cleanup":
                with live.lock:
                    release_pin()
            fault_end = inject(fault, ensemble, live, c, src, dst, client_round, disks)
            if state == "switched":
                with live.lock:
                    release_pin()

            # Everything the log held when Keeper first answered after the fault: recovered means
            # every replica active again and past it, as well as the threads alive, the migration
            # ended and an INSERT answered. Read through a session of the suite's own, not through
            # the runtime's locks, which a Keeper that creates no session can hold for long.
            head: list[int] = []
            observer = _Observer(c.admin.hosts)

            def recovered_now():
                if not _caught_up(observer.keeper, c, head) or live.threads_alive() != sorted(c.replicas) or (
                        observer.in_flight(c.layout)):
                    client_round()
                    return False
                return set(client_round().values()) == {"ok"}
            recovered = _wait(recovered_now, timeout)
            wedge = None if recovered else ensemble.wedged()
            if wedge:   # not the runtime's to recover from: restart ZooKeeper, then judge the runtime
                _keep_evidence(ensemble, ROOT / "build" / "faults" / f"zk-wedged-{fault}-{state}-{seed}")
                ensemble.restart_members()
                fault_end, head[:] = time.monotonic(), []
                recovered = _wait(recovered_now, timeout)
            seconds = time.monotonic() - fault_end if recovered else None
            if wedge:
                note = f"ZooKeeper wedged ({wedge}), its members restarted"
            if not recovered:
                try:
                    where = (f"in flight {observer.in_flight(c.layout)}, "
                             f"behind {_behind(observer.keeper(), c, head[0]) if head else 'unknown'}, "
                             f"{read_migration(observer.keeper(), c.layout, p)[0]}")
                except Exception as e:  # noqa: BLE001 - Keeper away: the note says so instead
                    where = f"Keeper not read ({type(e).__name__})"
                note = (note + "; " if note else "") + f"threads {live.threads_alive()}, {where}"
            observer.close()
        for r in ("r1", "r2", "r3"):   # a replica left down comes back before the end state is read
            if r not in c.replicas:
                c.add_replica(r)
        _reestablish_expired(c)
        c.settle()
        c.query()
        c.write_history(folder / "history")
        verdict = check(c.history, RF)
        lost, duplicated = _lost_and_duplicated(c.history)
        return Outcome(fault, state, seed, recovered, seconds, lost, duplicated,
                       {k: not v for k, v in verdict.items()}, note=note, history=str(folder / "history"),
                       disk_faults=len(c.disk_faults), insert_seconds=latencies, zookeeper_restarted=wedge or "")
    except Exception as e:   # a run that breaks is a cell that did not recover, with the reason and where
        return Outcome(fault, state, seed, False, None, -1, -1, note=f"{type(e).__name__}: {e} ({_where(e)})")
    finally:
        with contextlib.suppress(Exception):
            c.close()
        for d in (disks or {}).values():
            d.unmount()
        ensemble.start()


class _Observer:
    """The suite's own session on a cell's chroot, for what it reads to judge recovery: opened
    again when it expired, each call bounded (a short start, the keeper's retry deadline)."""

    def __init__(self, hosts: str):
        self.hosts, self._keeper = hosts, None

    def keeper(self) -> ZooKeeperKeeper:
        if self._keeper is None or self._keeper.expired:
            self.close()
            self._keeper = ZooKeeperKeeper(self.hosts, timeout=3.0, retry_deadline=1.5)
        return self._keeper

    def in_flight(self, layout) -> list[str]:
        from protocol.migration import migrations_in_flight
        return migrations_in_flight(self.keeper(), layout)

    def close(self) -> None:
        if self._keeper is not None:
            with contextlib.suppress(Exception):
                self._keeper.close()
            self._keeper = None


def _log_head(keeper, layout) -> int:
    """The number the log's next entry will get (a replica with this log_pointer has pulled all)."""
    from protocol.replica import log_number
    return max((log_number(n) + 1 for n in keeper.get_children(layout.log)), default=0)


def _behind(keeper, c, head: int) -> dict[str, str]:
    """The replicas that have not pulled the log up to `head`: their log_pointer, or why none is
    read (a session expired: not active, and the thread has not re-established it yet)."""
    out = {}
    for r, rep in sorted(dict(c.replicas).items()):
        if rep.keeper.expired:
            out[r] = "session expired"
            continue
        ptr = int(keeper.get(c.layout.log_pointer(r))[0])
        if ptr < head:
            out[r] = f"log_pointer {ptr} < {head}"
    return out


def _caught_up(keeper_of, c, head: list[int]) -> bool:
    """Whether every replica is active and has pulled the log up to `head`, fixed (appended) at
    the first call Keeper answers; False while Keeper is away. `keeper_of()`: the keeper to read
    through (an _Observer's, opened again when it expired)."""
    from protocol.keeper.base import KeeperUnavailableError, SessionExpiredError
    try:
        keeper = keeper_of()
        if not head:
            head.append(_log_head(keeper, c.layout))
        return not _behind(keeper, c, head[0])
    except (KeeperUnavailableError, SessionExpiredError):
        return False


def _reestablish_expired(c, within: float = 60.0) -> None:
    """Before the cell's end state is read: a replica whose session expired after the runtime
    stopped gets a new one, as its restarting thread would have given it; otherwise the final
    settle passes it over (read-only) and its missing rows read as lost (found by the stall rows:
    a session whose expiry the client learnt only as the runtime ended)."""
    from protocol.keeper.base import KeeperUnavailableError
    end = time.monotonic() + within
    for r in sorted(c.replicas):
        while c.replicas[r].keeper.expired:
            try:
                c.reestablish(r)
            except KeeperUnavailableError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.5)


def _where(e: BaseException) -> str:
    """The innermost frames of the project's own code an exception passed: where a cell broke."""
    import traceback
    frames = [f for f in traceback.extract_tb(e.__traceback__) if str(ROOT) in f.filename and ".venv" not in f.filename]
    return " < ".join(f"{Path(f.filename).relative_to(ROOT)}:{f.lineno} {f.name}" for f in reversed(frames[-3:]))


def run_killed(hosts: str, state: str, seed: int, folder: Path, timeout: float = 300.0) -> Outcome:
    """The process_kill cell: a `reference run` on the ensemble killed with SIGKILL in `state`
    (KILL_AT), then `run --attach` on the same root, data and history; the oracle's verdict on the
    one history both wrote."""
    from checkers.oracle import check
    from harness.killed_run import kill_when, start_run
    from history.record import History
    from lab.down_wait import read_history
    folder.mkdir(parents=True, exist_ok=True)
    where = ["--zk", hosts, "--root", f"/faults/{uuid.uuid4().hex[:12]}", "--data", str(folder / "data"),
             "--history", str(folder / "history")]
    try:
        run = start_run([*where, "--seed", str(seed), "--blocks", "30", "--add-replicas", "1", "--rebalance",
                         "--query-rate", "0.3", "--queries", "2"], folder / "run.out")
        if not kill_when(run, folder / "run.out", KILL_AT[state], timeout):
            return Outcome("process_kill", state, seed, False, None, -1, -1,
                           note=f"the run ended (exit {run.returncode}) before {KILL_AT[state]!r}")
        t0 = time.monotonic()
        attach = start_run([*where, "--attach"], folder / "attach.out")
        code = attach.wait(timeout)
        seconds = time.monotonic() - t0
        tail = (folder / "attach.out").read_text()[-300:].strip().replace("\n", " / ")
        if code not in (0, 1):   # 1: the attach ran to its end and its check found a violation (below)
            return Outcome("process_kill", state, seed, False, None, -1, -1, note=f"attach exit {code}: {tail}")
        history = History(tables=read_history(folder / "history"))
        lost, duplicated = _lost_and_duplicated(history)
        verdict = check(history, RF)
        # The attach's progress line when its history resumed: after the killed session expired.
        waited = re.search(r"\[\s*([\d.]+)s\] history resumed", (folder / "attach.out").read_text())
        return Outcome("process_kill", state, seed, True, seconds, lost, duplicated,
                       {k: not v for k, v in verdict.items()}, history=str(folder / "history"),
                       note=f"{float(waited[1]):.1f} s of it waiting for the killed session" if waited else "")
    except Exception as e:   # as run_one's: a cell that breaks did not recover, with the reason
        return Outcome("process_kill", state, seed, False, None, -1, -1, note=f"{type(e).__name__}: {e}")


def run_partitioned(fault: str, state: str, seed: int, folder: Path) -> Outcome:
    """A partition_N cell: a network namespace of its own (`ip netns add`, loopback up), and in it a
    child `python -m lab.faults --cell` that starts its own ensemble and runs the cell (run_one),
    writing the Outcome and the history into `folder`. The namespace is deleted whatever happens;
    a child past PARTITION_CELL_TIMEOUT_S is killed with its process group (its ZooKeepers too).
    Where `ip netns add` is refused the cell is skipped, saying why."""
    import json
    import os
    import signal
    import subprocess
    name = f"faults-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return Outcome(fault, state, seed, False, None, -1, -1, skipped=True,
                       note=f"skipped: ip netns add refused ({made.stderr.strip() or made.returncode}): "
                            "a network partition needs root")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True, capture_output=True)
        with open(folder / "cell.out", "w") as out:
            child = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-m", "lab.faults", "--cell",
                                      f"{fault}:{state}:{seed}", "--cell-folder", str(folder)],
                                     cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = child.wait(PARTITION_CELL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                return Outcome(fault, state, seed, False, None, -1, -1,
                               note=f"the cell's process ran past {PARTITION_CELL_TIMEOUT_S:.0f} s and was killed")
        result = folder / "outcome.json"
        if code != 0 or not result.exists():
            tail = (folder / "cell.out").read_text()[-300:].strip().replace("\n", " / ")
            return Outcome(fault, state, seed, False, None, -1, -1, note=f"the cell's process exited {code}: {tail}")
        return Outcome(**json.loads(result.read_text()))
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def run_cell(cell: str, folder: Path) -> int:
    """The child of run_partitioned, inside the namespace: its own ensemble, one cell, its
    Outcome as JSON in `folder`. No Spark here: the parent judges the history."""
    import json
    from harness.zookeeper import ZooKeeperEnsemble, interrupt_on_ctrl_c_and_kill
    fault, state, seed = cell.split(":")
    interrupt_on_ctrl_c_and_kill()
    with ZooKeeperEnsemble(size=3, log_level="INFO") as ensemble:
        o = run_one(ensemble, ensemble.hosts, fault, state, int(seed), folder)
    (folder / "outcome.json").write_text(json.dumps(o.__dict__))
    return 0


def inject(fault: str, ensemble, live, c, src: str, dst: str, client_round, disks: dict | None = None) -> float:
    """Inject `fault`, with the client going on; returns when the fault ended (monotonic)."""
    def go_on(seconds: float):
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            client_round()
    if fault in ("leader_kill", "follower_kill"):
        leader = ensemble.leader()
        victim = leader if fault == "leader_kill" else next(m for m in ensemble.modes() if m != leader)
        ensemble.stop_member(victim)
        go_on(2.0)
        ensemble.start_member(victim)
    elif fault == "full_outage":
        for m in list(ensemble.modes()):
            ensemble.stop_member(m)
        time.sleep(3.0)   # a client round would only wait for the retry deadline each time
        ensemble.start()
    elif fault == "session_expiry":
        with live.lock:
            k = c.replicas[src].keeper
            k.expire_session()
            _wait(lambda: k.expired, 15)
    elif fault.startswith("multi_loss"):
        where = fault.rsplit("_", 1)[1]
        with live.lock:
            for r in (src, dst):
                c.replicas[r].keeper.plan = [where] * 3   # their next three writes, the migration's among them
    elif fault == "replica_crash":   # the target crashes and restarts
        live.crash(dst)
        go_on(2.0)
        live.restart(dst)
    elif fault == "coordinator_crash":   # the coordinator (the source) crashes and stays down
        live.crash(src)
    elif fault.startswith("stall_"):
        ensemble.pause()
        try:
            go_on(float(fault.split("_")[1]))
        finally:
            ensemble.resume()
    elif fault == "disk_read_only":   # the CLONE target's disk
        disks[dst].read_only()
        go_on(DISK_FAULT_SECONDS)
        disks[dst].writable()
    elif fault == "disk_full":
        filler = disks[dst].fill()
        go_on(DISK_FAULT_SECONDS)
        filler.unlink()
    elif fault.startswith("partition_"):   # only inside the cell's own namespace (run_partitioned)
        import subprocess
        subprocess.run(["ip", "link", "set", "lo", "down"], check=True, capture_output=True)
        try:
            go_on(float(fault.split("_")[1]))
        finally:
            subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True)
    else:
        raise ValueError(f"unknown fault {fault!r}; faults are {', '.join(FAULTS)}")
    return time.monotonic()


def _lost_and_duplicated(h) -> tuple[int, int]:
    t = h.tables
    final = max(x["snapshot_step"] for x in t["parts"])
    held: dict[tuple[str, str], list[int]] = {}
    for x in t["parts"]:
        if x["snapshot_step"] == final:
            held.setdefault((x["replica"], x["partition_id"]), []).append(x["row_id"])
    owners = {a["partition_id"]: a["owners"] for a in t["assignments"] if a["snapshot_step"] == final}
    lost = {x["row_id"] for x in t["inserts"] if x["status"] == "ok"
            and any(x["row_id"] not in held.get((o, x["partition_id"]), ()) for o in owners.get(x["partition_id"], [None]))}
    dup = sum(len(rows) - len(set(rows)) for rows in held.values())
    returned: dict[str, list[int]] = {}
    for x in t["query_rows"]:
        returned.setdefault(x["query_id"], []).append(x["row_id"])
    dup += sum(len(rows) - len(set(rows)) for rows in returned.values())
    return len(lost), dup


def duckdb_verdicts(folder: str) -> dict:
    """invariant -> holds, from DuckDB's SQL (checkers/invariants.py) on a written history."""
    from checkers.duckdb_check import check
    return {k: n == 0 for k, n in check(folder).items()}


def spark_verdicts(spark, folder: str) -> dict:
    """invariant -> holds, from the Spark job's library entry on a written history."""
    from checkers.spark.checks import check
    from checkers.spark.load import load_history
    h = load_history(spark, folder)
    try:
        report, _ = check(spark, h)
    finally:
        h.close()
    return {k: r["holds"] for k, r in report.items()}


def table(outcomes: list[Outcome]) -> list[str]:
    lines = ["| fault x state | runs | recovered | time to recover, s (median, max) | rows lost | rows duplicated | "
             "checkers agree | invariants violated (runs) | INSERTs | INSERT s (median, p99, max) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    cells: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        cells.setdefault((o.fault, o.state), []).append(o)
    for (f, s), runs in cells.items():
        if all(o.skipped for o in runs):
            lines.append(f"| {f} x {s} | 0 | {runs[0].note} |  |  |  |  |  |  |  |")
            continue
        runs = [o for o in runs if not o.skipped]
        times = [o.seconds for o in runs if o.seconds is not None]
        t = f"{statistics.median(times):.1f}, {max(times):.1f}" if times else "-"
        restarted = sum(o.recovered and bool(o.zookeeper_restarted) for o in runs)
        recovered = f"{sum(o.recovered for o in runs)}" + (f" ({restarted} once a wedged ZooKeeper was restarted)"
                                                          if restarted else "")
        lines.append(f"| {f} x {s} | {len(runs)} | {recovered} | {t} | "
                     f"{sum(max(o.lost, 0) for o in runs)} | {sum(max(o.duplicated, 0) for o in runs)} | "
                     f"{sum(o.agree for o in runs)}/{len(runs)} | {_violated(runs)} | {_latency(runs)} |")
    return lines


def _latency(runs: list[Outcome]) -> str:
    """How many client INSERTs the runs made, and their call-to-answer seconds."""
    xs = sorted(x for o in runs for x in o.insert_seconds)
    if not xs:
        return "0 | -"
    p99 = xs[min(len(xs) - 1, int(0.99 * len(xs)))]
    return f"{len(xs)} | {statistics.median(xs):.2f}, {p99:.2f}, {xs[-1]:.2f}"


def _violated(runs: list[Outcome]) -> str:
    """The invariants the oracle found violated, with how many runs: none when every run held."""
    count: dict[str, int] = {}
    for o in runs:
        for name, holds in o.oracle.items():
            if not holds:
                count[name] = count.get(name, 0) + 1
    return ", ".join(f"{n} ({k})" for n, k in sorted(count.items())) or "none"


def passed(outcomes: list[Outcome]) -> bool:
    """Every cell dealt recovered with nothing lost or duplicated and the checkers agreeing; a cell
    this machine cannot deal (skipped, its reason in the table) has no verdict either way."""
    return all(o.recovered and o.lost == 0 and o.duplicated == 0 and o.agree and all(o.oracle.values())
               for o in outcomes if not o.skipped)


def _serving_or_restarted(ensemble, cell: str, say, within: float = 30.0) -> None:
    """Before a cell: the ensemble gives a session within `within` s, or its members' logs are kept
    (build/faults/zk-before-CELL) and every member is restarted, as an operator restarts a wedged
    ZooKeeper; said in a line. The cell before it has already answered for itself."""
    try:
        ZooKeeperKeeper(ensemble.hosts, timeout=within / 2).close()
        return
    except Exception as e:   # noqa: BLE001 - any failure to get a session is the same news
        why = f"{type(e).__name__}: {e}"
    kept = ROOT / "build" / "faults" / f"zk-before-{cell}"
    served, wedged = _keep_evidence(ensemble, kept)
    ensemble.restart_members()
    say(f"  the ensemble gave no session before {cell} ({why}; another process: "
        f"{'a session' if served else 'none either'}" + (f"; ZooKeeper wedged: {wedged}" if wedged else "")
        + f"): its members restarted, their logs, stacks and the diagnosis in {kept}")


def _keep_evidence(ensemble, kept: Path) -> tuple[bool, str | None]:
    """What tells a ZooKeeper wedge from a client-side one, kept in `kept`: the members' logs and
    `srvr` answers, whether their commits have stopped (ZooKeeperEnsemble.wedged), their Java
    stacks (jstack, where the JDK has it), whether another process gets a session (the ensemble
    serves others?), and every thread of this process (one stuck or spinning here?). Returns
    whether another process got a session, and the wedge found, if any."""
    import faulthandler
    import shutil
    import subprocess
    shutil.rmtree(kept, ignore_errors=True)
    for m in ensemble.members:
        with contextlib.suppress(Exception):
            shutil.copytree(m.dir, kept / m.dir.name, ignore=shutil.ignore_patterns("version-2"))
    kept.mkdir(parents=True, exist_ok=True)
    wedged = ensemble.wedged()
    jstack = shutil.which("jstack")
    for m in ensemble.members:
        if jstack and m.running():
            with contextlib.suppress(Exception), open(kept / f"jstack-{m.myid}.txt", "w") as out:
                subprocess.run([jstack, str(m.proc.pid)], stdout=out, stderr=subprocess.STDOUT, timeout=30)
    other = subprocess.run([sys.executable, "-c", "import sys; from protocol.keeper.zookeeper import ZooKeeperKeeper; "
                            "ZooKeeperKeeper(sys.argv[1], timeout=10).close(); print('a session')", ensemble.hosts],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    (kept / "diagnosis.txt").write_text(f"another process: exit {other.returncode} {other.stdout.strip()} "
                                        f"{other.stderr.strip()[-300:]}\nmodes: {ensemble.modes()}\n"
                                        f"srvr: {ensemble.stats()}\nwedged: {wedged}\n")
    with open(kept / "threads.txt", "w") as out:
        faulthandler.dump_traceback(out, all_threads=True)
    return other.returncode == 0, wedged


def _forget_cells(hosts: str) -> None:
    """Delete the cells' chroots (/faults) once a cell is over: its history is on disk, and a data
    tree that grows cell after cell makes every follower's resync after a fault longer (a
    snapshot of all of it), which the ensemble's initLimit bounds. Best effort: a cell that
    left Keeper away is no reason to stop the suite here."""
    with contextlib.suppress(Exception):
        k = ZooKeeperKeeper(hosts, retry_deadline=10.0)
        try:
            if k.exists("/faults") is not None:
                k.delete("/faults", recursive=True)
        finally:
            k.close()


def run_matrix(faults, states, seeds, folder: Path, spark, say=lambda line: print(line, flush=True)) -> list[Outcome]:
    from harness.zookeeper import ZooKeeperEnsemble
    outcomes = []
    with ZooKeeperEnsemble(size=3, log_level="INFO") as ensemble:
        for f in faults:
            for s in states:
                for seed in seeds:
                    t0 = time.monotonic()
                    cell = folder / f"{f}-{s}-{seed}"
                    _serving_or_restarted(ensemble, f"{f}-{s}-{seed}", say)
                    o = (run_partitioned(f, s, seed, cell) if f.startswith("partition_")
                         else run_one(ensemble, ensemble.hosts, f, s, seed, cell))
                    _forget_cells(ensemble.hosts)
                    if o.history:
                        o.spark = spark_verdicts(spark, o.history)
                        o.duckdb = duckdb_verdicts(o.history)
                        if not (o.agree and all(o.oracle.values())):   # kept for whoever looks into it
                            import shutil
                            kept = ROOT / "build" / "faults" / f"{f}-{s}-{seed}"
                            shutil.rmtree(kept, ignore_errors=True)
                            shutil.copytree(o.history, kept)
                            o.note = (o.note + "; " if o.note else "") + f"history kept in {kept}"
                    if not (o.recovered or o.skipped or f.startswith("partition_") or f == "process_kill"):
                        # The cell's own ensemble, as it is now: a wedge that heals before the next
                        # cell's check (_serving_or_restarted) would otherwise leave no logs.
                        kept = ROOT / "build" / "faults" / f"zk-{f}-{s}-{seed}"
                        _, wedged = _keep_evidence(ensemble, kept)
                        o.note = ((o.note + "; " if o.note else "")
                                  + (f"ZooKeeper wedged: {wedged}; " if wedged else "")
                                  + f"the evidence kept in {kept}")
                    if o.skipped:
                        say(f"  {f} x {s} seed {seed}: {o.note}")
                        outcomes.append(o)
                        continue
                    say(f"  {f} x {s} seed {seed}: {'recovered' if o.recovered else 'NOT recovered'}"
                        + (f" in {o.seconds:.1f} s" if o.seconds is not None else "")
                        + f", lost {o.lost}, duplicated {o.duplicated}"
                        + (f", {o.disk_faults} steps the disk failed" if f in DISK_FAULTS else "") + ", checkers "
                        + ("agree" if o.agree else f"DISAGREE (oracle {o.oracle}, spark {o.spark}, duckdb {o.duckdb})")
                        + "".join(f"; {name} VIOLATED" for name, holds in o.oracle.items() if not holds)
                        + (f"; {o.note}" if o.note else "") + f" [{time.monotonic() - t0:.0f} s]")
                    outcomes.append(o)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.faults", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int_at_least(1), default=2, help="seeds per cell")
    ap.add_argument("--faults", type=names(FAULTS, "fault"), default=",".join(FAULTS))
    ap.add_argument("--states", type=names(STATES, "state"), default=",".join(STATES))
    ap.add_argument("--markdown", type=optional_output_file, default=str(ROOT / "BENCHMARKS.md"),
                    help="'' to write nothing")
    ap.add_argument("--report", type=output_file, help="JSON report with a one-line summary (make check's table)")
    # run_partitioned's child, inside its network namespace: not for people
    ap.add_argument("--cell", type=text("a cell, FAULT:STATE:SEED", r"[\w-]+:[\w-]+:\d+"), help=argparse.SUPPRESS)
    ap.add_argument("--cell-folder", type=output_dir, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.cell:
        return run_cell(a.cell, Path(a.cell_folder))
    faults, states = a.faults, a.states
    command = command_line("python -m lab.faults", argv)
    t0 = time.monotonic()

    def cells(spark):
        with tempfile.TemporaryDirectory(prefix="faults-") as d:
            return run_matrix(faults, states, range(1, a.seeds + 1), Path(d), spark)
    try:
        outcomes = with_spark("faults", cells, "the ensemble and the mounts are gone, no table written")
    except Stopped as e:
        return e.code
    lines = table(outcomes)
    print("\n".join(lines))
    if a.report:
        import json
        summary = (f"{len(outcomes)} runs: {sum(o.recovered for o in outcomes)} recovered, "
                   f"{sum(max(o.lost, 0) for o in outcomes)} rows lost, {sum(max(o.duplicated, 0) for o in outcomes)} "
                   f"duplicated, checkers agree on {sum(o.agree for o in outcomes)}")
        Path(a.report).parent.mkdir(parents=True, exist_ok=True)
        Path(a.report).write_text(json.dumps({"command": command, "summary": summary,
                                              "runs": [{**o.__dict__, "agree": o.agree} for o in outcomes]}, indent=1))
    if a.markdown:
        body = "\n".join(["## Fault suite: the live runtime under ZooKeeper, replica and disk faults", "",
                          f"Produced by `{command}` (run by `make faults`) in {time.monotonic() - t0:.0f} s. "
                          "A 3-node loopback ensemble, 3 replicas, RF 2, one migration per run held in the "
                          "state named, inserts and queries running throughout; for the disk rows each replica's "
                          "data on a tmpfs of its own, the CLONE target's read-only or full for "
                          f"{DISK_FAULT_SECONDS:.0f} s. *recovered*: every replica "
                          "thread alive, every replica active (its session not expired) and its log_pointer past "
                          "the log's head when Keeper first answered after the fault, the migration ended, an "
                          "INSERT acknowledged; *time to recover* from "
                          "the fault's end. Rows lost / duplicated from the final state and the queries; "
                          f"*INSERT s*: each client INSERT from its call to its answer (its deadline "
                          f"{INSERT_DEADLINE:g} s bounds its Keeper calls and its waits for a replica's lock); "
                          "*checkers agree*: the oracle, DuckDB and the Spark job give the same verdict on every "
                          "invariant. *partition_N*: the cell in a network namespace of its own (its ensemble "
                          "and runtime inside), the namespace's loopback down for N s: packets dropped, not "
                          "refused, between the replicas and ZooKeeper and between the members. "
                          "*process_kill*: not the live runtime but a `python -m reference run` "
                          "(3 replicas, a fourth added and rebalanced onto, queries between steps) killed with "
                          "SIGKILL when its output first shows the state, then `run --attach`: recovered when "
                          "the attach runs to its end, its time from its start to its end (the rest of the "
                          "rebalance and the wait, 7-10 s, for the killed session to expire included); no "
                          "client INSERT runs through the kill, so no latency. Where ZooKeeper itself stopped "
                          "committing after a stall (every member answering `srvr` with requests outstanding and "
                          "no zxid moving: Debian's 3.8.0), *recovered* says so: its members were restarted, as "
                          "an operator would, and the time to recover counts from that restart.", "", *lines, ""])
        write_section(a.markdown, "faults", body)
    return 0 if passed(outcomes) else 1


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m lab.faults", main))
