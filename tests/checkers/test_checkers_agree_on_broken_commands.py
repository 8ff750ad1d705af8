"""The three checkers agree on what a broken command, guard or crash leaves (issue 15's agreement,
carried to the invariants of the history's command, refusal, crash and migration tables): each
test stands a mutant of the reference (lab/mutation_layers.py's) in for the fixed code on a racing
profile whose fixed run holds, and the oracle, DuckDB and the Spark job count the same violations
of the one invariant that mutant breaks. The histories of a run and of a protocol variant are in
test_checkers_agree.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from checker_agreement import WITH_SPARK, checkers_for, read_history, three_agree, two_agree

from checkers.duckdb_check import check as duckdb_check
from checkers.oracle import check
from lab.teeth import SIZE
from protocol.assignment import GuardFailed
from protocol.migration import read_migration
from reference.races import racing_history

pytestmark = pytest.mark.spark


def _refuses_every_reassign(*args, **kwargs):
    # Stands in for admin_reassign's mutant `if dst not in known` -> `if dst in known`: every
    # REASSIGN refused as if its target were unknown, though the spec's guard holds.
    from protocol.migration import MigrationError
    raise MigrationError("unknown replica (a broken guard)")


@pytest.mark.long   # make check (long tests): a Spark job on two racing histories, over make test's budget
def test_a_reassign_refused_though_its_guard_held_is_a_violation_for_all_three(spark, tmp_path, monkeypatch):
    """CommandsFollowGuardsInv: the history records each operator command, its outcome and the
    guard inputs the harness read from Keeper before it. On the fixed protocol every command
    follows its guard (`churn` 0: REASSIGNs and their refusals alike). With every REASSIGN
    refused, nothing moves and every other invariant holds, but the oracle, the Spark job and
    DuckDB each count the refusals whose guard held, and only those. The same history without
    the table (an older one) is not judged on commands."""
    def counts(folder: Path) -> dict:
        return three_agree(spark, folder)
    fixed = racing_history(tmp_path / "fixed", "churn", 0, steps=80, blocks=16)
    commands = pq.read_table(Path(fixed["history"]) / "commands.parquet").to_pylist()
    assert {x["outcome"] for x in commands if x["command"] == "REASSIGN"} >= {"accepted"}
    assert counts(Path(fixed["history"])) == {}
    monkeypatch.setattr("reference.cluster.admin_reassign", _refuses_every_reassign)
    broken = racing_history(tmp_path / "broken", "churn", 0, steps=80, blocks=16)
    folder = Path(broken["history"])
    refused = [x for x in pq.read_table(folder / "commands.parquet").to_pylist() if x["outcome"] == "refused"]
    assert refused and "reassign" not in broken["actions"]
    held = [x for x in refused if x["src_active"] and x["dst_active"] and x["migration_state"] == "none"
            and x["src"] in x["owners"] and x["dst"] not in x["owners"] and x["in_flight"] < x["max_in_flight"]]
    assert held and counts(folder) == {"CommandsFollowGuardsInv": len(held)}
    assert check(read_history(folder), 2)["CommandsFollowGuardsInv"][0].endswith(
        "refused though its guard held: unknown replica (a broken guard)")
    (folder / "commands.parquet").unlink()
    assert counts(folder) == {}


def _reassign_from_the_second_owner(monkeypatch) -> None:
    """admin_reassign's mutant `src = src or a.owners[1]`: a REASSIGN naming no source moves the
    partition from its second owner, not its first (ALTER TABLE ... REASSIGN's default)."""
    from protocol import migration
    from reference import cluster
    reassign = migration.admin_reassign

    def from_second(keeper, layout, partition, dst, src=None, max_concurrent=4):
        if src is None:
            a = migration.read_assignment(keeper, layout, partition)
            src = a.owners[1] if a is not None else None
        return reassign(keeper, layout, partition, dst, src, max_concurrent)
    monkeypatch.setattr(cluster, "admin_reassign", from_second)


def test_a_command_that_wrote_another_migration_than_its_action_is_a_violation_for_the_oracle_and_duckdb(
        tmp_path, monkeypatch):
    """CommandsFollowGuardsInv's effect half: the history reads the migration znode right after
    each command. On the fixed protocol (`racing` 0: REASSIGNs naming no source among them) each
    accepted REASSIGN left a CLONE of its src -> dst and each refusal the migration it found. A
    REASSIGN that takes its default source from the second owner is accepted on a guard that held,
    and every other invariant holds (any owner is a valid source); the oracle and DuckDB count
    the same commands. A refused command's row edited to show a migration written counts once, and
    so does an accepted CANCEL's edited to show its target not leaving."""
    fixed = Path(racing_history(tmp_path / "fixed", "racing", 0, steps=120, blocks=16)["history"])
    rows = pq.read_table(fixed / "commands.parquet").to_pylist()
    assert {x["outcome"] for x in rows} >= {"accepted", "refused"} and two_agree(fixed) == {}
    h = read_history(fixed)
    refused = next(x for x in h.tables["commands"] if x["outcome"] == "refused" and x["migration_state"] == "none")
    refused.update(migration_state_after="clone", migration_src_after=refused["src"],
                   migration_dst_after=refused["dst"])
    # coordinator_cancel's mutant 83: the cancelled target not made the leaver, so no CLEANUP drops it
    cancel = next(x for x in h.tables["commands"] if x["command"] == "CANCEL" and x["outcome"] == "accepted")
    assert cancel["leaving_after"] == cancel["dst"] and cancel["target_after"] is None
    cancel.update(leaving_after=None)
    h.write(tmp_path / "edited")
    assert two_agree(tmp_path / "edited") == {"CommandsFollowGuardsInv": 2}
    assert any(line.endswith(f"was accepted and left leaving None, not {cancel['dst']}")
               for line in check(read_history(tmp_path / "edited"), 2)["CommandsFollowGuardsInv"])
    _reassign_from_the_second_owner(monkeypatch)
    broken = Path(racing_history(tmp_path / "broken", "racing", 0, steps=120, blocks=16)["history"])
    counts = two_agree(broken)
    assert set(counts) == {"CommandsFollowGuardsInv"}, counts
    assert all(" was accepted and left migration_src " in line
               for line in check(read_history(broken), 2)["CommandsFollowGuardsInv"])


@pytest.mark.long   # make check (long tests): a Spark job on two racing histories, over make test's budget
def test_a_command_that_wrote_another_migration_than_its_action_is_a_violation_for_the_spark_job_too(
        spark, tmp_path, monkeypatch):
    fixed = Path(racing_history(tmp_path / "fixed", "racing", 0, steps=120, blocks=16)["history"])
    assert three_agree(spark, fixed) == {}
    _reassign_from_the_second_owner(monkeypatch)
    broken = Path(racing_history(tmp_path / "broken", "racing", 0, steps=120, blocks=16)["history"])
    assert set(three_agree(spark, broken)) == {"CommandsFollowGuardsInv"}


def _crash_spares_the_receivers_queries(monkeypatch) -> None:
    """served_by's mutant `query.at != replica`: a crash fails the open queries started elsewhere
    and spares those the crashed replica received (unless one still has a read routed to it)."""
    from protocol.query import served_by
    monkeypatch.setattr("reference.races.served_by", lambda q, r: not q.done and (
        q.at != r or any(q.routes[p] == r for p in q.pending)))
    assert served_by   # the fixed one, for the record: q.at == r


@pytest.mark.parametrize("with_spark", WITH_SPARK)
def test_a_query_answered_across_its_receivers_crash_is_a_violation_for_all_three(request, tmp_path, monkeypatch,
                                                                                  with_spark):
    """CrashFailsQueriesInv: the history records each crash (table `crashes`) and, for a query a
    crash failed, whose (queries.failed_by) and where its unread partitions were routed
    (queries.pending_at). On the fixed protocol (`overlapping` 0: SELECTs in flight across
    crashes) a crash fails exactly the open queries its replica served, and no query is answered
    complete across its receiver's crash. With a crash sparing its own replica's queries, two are
    (q14 at r1, started at step 13, answered at 346, r1 crashed at 110; q36 at r2), and five queries
    the crashed replica did not serve are failed (q7: r1's crash failed a query received by r3 whose
    last read was routed to r4); every other invariant holds: the checkers count the same queries.
    (Twelve and eleven before F23's fix changed the run's course: SWITCHes come sooner.)
    Without the crashes table (an older history) only the failed ones are judged."""
    agree = checkers_for(request, with_spark)
    fixed = Path(racing_history(tmp_path / "fixed", "overlapping", 0)["history"])
    failed = [q for q in pq.read_table(fixed / "queries.parquet").to_pylist() if q["failed_by"]]
    assert pq.read_table(fixed / "crashes.parquet").num_rows > 0 and failed and agree(fixed) == {}
    _crash_spares_the_receivers_queries(monkeypatch)
    broken = Path(racing_history(tmp_path / "broken", "overlapping", 0)["history"])
    assert agree(broken) == {"CrashFailsQueriesInv": 7}
    lines = check(read_history(broken), 2)["CrashFailsQueriesInv"]
    assert "q14 at r1 was answered complete at step 346, though r1 crashed at step 110 after it started at 13" in lines
    assert ("q7 at r3 failed by r1's crash, which served it neither as its receiver nor as the reader of a partition "
            "it had still to read (r4)") in lines
    (broken / "crashes.parquet").unlink()
    assert agree(broken) == {"CrashFailsQueriesInv": 5}


@pytest.mark.parametrize("with_spark", WITH_SPARK)
def test_a_crash_that_fails_every_open_query_is_a_violation_for_all_three(request, tmp_path, monkeypatch, with_spark):
    """served_by's mutant `not query.done or (...)`: a crash fails every open query, those it did
    not serve too. No query is answered across a crash (CrashFailsQueriesInv's first half holds),
    and a failed query excuses nothing (no other invariant reads it): only the second half, a
    crash failing only the queries it served (the spec's ReplicaCrash), refuses the history."""
    agree = checkers_for(request, with_spark)
    monkeypatch.setattr("reference.races.served_by", lambda q, r: not q.done or (
        q.at == r or any(q.routes[p] == r for p in q.pending)))
    broken = Path(racing_history(tmp_path / "broken", "overlapping", 0)["history"])
    found = agree(broken)
    assert set(found) == {"CrashFailsQueriesInv"} and found["CrashFailsQueriesInv"] > 0
    assert all(" failed by " in line for line in check(read_history(broken), 2)["CrashFailsQueriesInv"])


def _cancel_ignored(keeper, layout, partition, target=None, bugs=frozenset()):
    # Stands in for coordinator_cancel's mutant `{**mig, "XXstateXX": "cancelling"}`: its guards
    # and its write as the fixed one's, the state under a wrong key, so the CLONE goes on to SWITCH.
    from protocol.assignment import Assignment, read_assignment
    from protocol.migration import GuardFailed, _require_live_coordinator, _write
    mig, version = read_migration(keeper, layout, partition)
    if not mig or mig["state"] != "clone" or mig["src"] is None:
        raise GuardFailed("CoordinatorCancel", f"{partition} is not a CLONE to cancel: {mig}")
    _require_live_coordinator(keeper, layout, "CoordinatorCancel", partition, mig)
    a = read_assignment(keeper, layout, partition)
    new = Assignment(a.owners, target=None, leaving=mig["dst"])
    _write(keeper, layout, partition, a, new, {**mig, "XXstateXX": "cancelling"}, version)
    return new


@pytest.mark.long   # make check (long tests): a Spark job on two racing histories, over make test's budget
def test_a_cancel_acknowledged_and_ignored_is_a_violation_for_all_three(spark, tmp_path, monkeypatch):
    """CancelHonouredInv: on the fixed protocol (`cancelling` 0: CANCELs aimed at every state) each
    accepted CANCEL's migration is cancelling or cancelled at every later snapshot, for the
    oracle, the Spark job and DuckDB alike. With the CANCEL's state written under a wrong key, the
    CANCEL is accepted and the migration stays in CLONE: all three count the same snapshots
    showing it clone, switched or done after the CANCEL."""
    def counts(folder: Path) -> dict:
        return three_agree(spark, folder)
    fixed = racing_history(tmp_path / "fixed", "cancelling", 0, **SIZE)
    accepted = [x for x in pq.read_table(Path(fixed["history"]) / "commands.parquet").to_pylist()
                if x["command"] == "CANCEL" and x["outcome"] == "accepted"]
    assert accepted and counts(Path(fixed["history"])) == {}
    monkeypatch.setattr("reference.cluster.coordinator_cancel", _cancel_ignored)
    broken = Path(racing_history(tmp_path / "broken", "cancelling", 0, **SIZE)["history"])
    ignored = counts(broken)
    assert ignored.get("CancelHonouredInv")
    states = {line.split(" is ")[1].split(" at ")[0] for line in check(read_history(broken), 2)["CancelHonouredInv"]}
    assert "clone" in states and states <= {"clone", "switched", "done"}


def _refuses_cleanup_for_down_leaver(rep, partition, bugs=frozenset()):
    # Stands in for replica_cleanup_for_down_leaver's mutant `mig["state"] in ("switched",
    # "cancelling")`: every CLEANUP on a down leaver's behalf refused, so the migration waits for
    # the leaver to come back (the end's restarts end it: MigrationsEndProp holds).
    from protocol.assignment import GuardFailed
    raise GuardFailed("ReplicaCleanupForDownLeaver", "refused (a broken guard)")


def _refuses_take_over(keeper, layout, partition, replica):
    # Stands in for replica_take_over_migration's mutant `mig["state"] != "CLONE"`: no take-over,
    # so a CLONE whose coordinator is down waits for it to come back.
    from protocol.assignment import GuardFailed
    raise GuardFailed("ReplicaTakeOverMigration", "refused (a broken guard)")


@pytest.mark.long   # make check (long tests): a Spark job on two racing histories, over make test's budget
def test_a_migration_waiting_on_a_down_replica_too_long_is_a_violation_for_all_three(spark, tmp_path, monkeypatch):
    """DownWaitBoundedProp: on the fixed protocol (`deserting` 0: a leaver down past the down
    timeout, its CLEANUP done on its behalf) no migration is seen waiting on a down replica
    longer than down_timeout + DOWN_WAIT_GRACE, for the oracle, the Spark job and DuckDB alike.
    With CLEANUP on a down leaver's behalf refused and no take-over of a CLONE whose coordinator
    is down (`leaving` 10), such migrations wait until the end's restarts, and every other
    invariant holds: all three count the same overdue snapshots, a cancelled target's and a
    CLONE coordinator's. The same history without run.down_timeout (an infinite timeout, an
    older history) is not judged."""
    from checkers.oracle import down_waits

    def counts(folder: Path) -> dict:
        return three_agree(spark, folder)
    fixed = Path(racing_history(tmp_path / "fixed", "deserting", 0, steps=80, blocks=16)["history"])
    assert down_waits(read_history(fixed).tables) and counts(fixed) == {}
    monkeypatch.setattr("reference.cluster.replica_cleanup_for_down_leaver", _refuses_cleanup_for_down_leaver)
    monkeypatch.setattr("reference.cluster.replica_take_over_migration", _refuses_take_over)
    broken = Path(racing_history(tmp_path / "broken", "leaving", 10, steps=80, blocks=16)["history"])
    assert counts(broken) == {"DownWaitBoundedProp": 3}
    overdue = check(read_history(broken), 2)["DownWaitBoundedProp"]
    assert {line.split(" is ")[1].split(", down at")[0].split(", waiting on ")[1].split(" r")[0] for line in overdue} \
        == {"its leaver", "its coordinator"}
    pq.write_table(pq.read_table(broken / "run.parquet").drop(["down_timeout"]), broken / "run.parquet")
    assert check(read_history(broken), 2)["DownWaitBoundedProp"] == []
    assert duckdb_check(broken)["DownWaitBoundedProp"] == 0


@pytest.mark.long   # make check (long tests): a Spark job on two racing histories, over make test's budget
def test_an_insert_refused_with_its_write_path_open_is_a_violation_for_all_three(spark, tmp_path, monkeypatch):
    """InsertRefusalsFollowGuardsInv: on the fixed protocol (`expiring` 2: owners' sessions expire
    under forwarded INSERTs, so tries are refused) every refusal had its write path closed before
    or after it, for the oracle, the Spark job and DuckDB alike. With no failover to another owner
    when the chosen one is read-only (as route_insert's mutant 67, `others = None`), tries are
    refused while another owner stays writable with a current map: all three count the same
    refusals, and nothing else fails (the client's retries land the rows)."""
    import pyarrow.parquet as pq

    from history.semantics import write_path_open
    fixed = Path(racing_history(tmp_path / "fixed", "expiring", 2, steps=80, blocks=16)["history"])
    refused = pq.read_table(fixed / "insert_refusals.parquet").to_pylist()
    assert refused and not any(write_path_open(r, 2) for r in refused)
    assert three_agree(spark, fixed) == {}
    monkeypatch.setattr("protocol.insert._unavailable_before_commit", lambda e: False)
    broken = Path(racing_history(tmp_path / "broken", "expiring", 2, steps=80, blocks=16)["history"])
    counts = three_agree(spark, broken)
    assert set(counts) == {"InsertRefusalsFollowGuardsInv"}, counts
    off = check(read_history(broken), 2)["InsertRefusalsFollowGuardsInv"]
    assert all("ReplicaReadOnly" in line and "read-only" in line for line in off), off


def _refuse_half_the_allocations(monkeypatch) -> None:
    """Every first INSERT into an odd user bucket's partition refused, whatever the active replicas
    (the others allocated as usual, so the history has owners and acknowledged rows to judge)."""
    from protocol import insert
    allocate = insert.replica_allocate

    def refusing(keeper, layout, replica, partition, *a, **kw):
        if int(partition.rsplit("-", 1)[1]) % 2:
            raise GuardFailed("ReplicaChooseOwners", "refused whatever the active replicas")
        return allocate(keeper, layout, replica, partition, *a, **kw)
    monkeypatch.setattr(insert, "replica_allocate", refusing)


def test_an_allocation_refused_with_replicas_enough_is_a_violation_for_the_oracle_and_duckdb(tmp_path, monkeypatch):
    """InsertRefusalsFollowGuardsInv on a partition not assigned yet: on the fixed protocol (`thin`
    1: most replicas down at times while new partitions keep appearing) a first INSERT is refused
    only with fewer than replication_factor replicas active or a read-only receiver. With every
    allocation refused (as route_insert's mutant 18, which names no allocating replica, so
    ReplicaChooseOwners finds it not active; here half of them), the oracle and DuckDB count the
    same refusals, each with enough replicas active, and nothing else fails. (The Spark job on
    both, and on the mutant's own history, every allocation refused: the long test below.)"""
    from history.semantics import allocation_open
    fixed = Path(racing_history(tmp_path / "fixed", "thin", 1, steps=80, blocks=16)["history"])
    unassigned = [r for r in pq.read_table(fixed / "insert_refusals.parquet").to_pylist()
                  if r["keeper_version_before"] is None]
    assert unassigned and not any(allocation_open(r, 2) for r in unassigned)
    assert check(read_history(fixed), 2)["InsertRefusalsFollowGuardsInv"] == [] == [0] * duckdb_check(fixed)[
        "InsertRefusalsFollowGuardsInv"]
    _refuse_half_the_allocations(monkeypatch)
    broken = Path(racing_history(tmp_path / "broken", "thin", 1, steps=80, blocks=16)["history"])
    oracle = {n: len(v) for n, v in check(read_history(broken), 2).items() if v}
    assert set(oracle) == {"InsertRefusalsFollowGuardsInv"} and oracle == {
        n: v for n, v in duckdb_check(broken).items() if v}
    assert all("replicas were active to allocate" in line
               for line in check(read_history(broken), 2)["InsertRefusalsFollowGuardsInv"])


@pytest.mark.long   # make check (long tests): a Spark job on two racing histories, over make test's budget
def test_an_allocation_refused_with_replicas_enough_is_a_violation_for_the_spark_job_too(spark, tmp_path, monkeypatch):
    fixed = Path(racing_history(tmp_path / "fixed", "thin", 1, steps=80, blocks=16)["history"])
    assert three_agree(spark, fixed) == {}
    _refuse_half_the_allocations(monkeypatch)
    broken = Path(racing_history(tmp_path / "broken", "thin", 1, steps=80, blocks=16)["history"])
    assert set(three_agree(spark, broken)) == {"InsertRefusalsFollowGuardsInv"}
    # Every allocation refused: no partition is ever assigned and nothing acknowledged. The job
    # judges such a history all the same, by its refusals (it refuses it as bad input only when
    # it shows neither refusals nor logged errors).
    monkeypatch.setattr("protocol.insert.replica_allocate", lambda *a, **kw: (_ for _ in ()).throw(
        GuardFailed("ReplicaChooseOwners", "refused whatever the active replicas")))
    nothing = Path(racing_history(tmp_path / "nothing", "thin", 1, steps=80, blocks=16)["history"])
    assert pq.read_table(nothing / "assignments.parquet").num_rows == 0
    assert set(three_agree(spark, nothing)) == {"InsertRefusalsFollowGuardsInv"}


def _only_migration_outcome_trips(agree, tmp_path, monkeypatch, profile: str, mutant: tuple, says: str) -> None:
    """`profile` seed 0 holds on the fixed protocol; with `mutant` (target, stand-in) patched in,
    the checkers agree that MigrationOutcomeInv alone fails, each of its lines saying `says`."""
    fixed = racing_history(tmp_path / "fixed", profile, 0, **SIZE)
    assert agree(Path(fixed["history"])) == {}
    monkeypatch.setattr(*mutant)
    broken = Path(racing_history(tmp_path / "broken", profile, 0, **SIZE)["history"])
    found = agree(broken)
    assert set(found) == {"MigrationOutcomeInv"}, found
    lines = check(read_history(broken), 2)["MigrationOutcomeInv"]
    assert all(says in line for line in lines), lines


def _cleanup_ends_as_cancelled(leaver, partition, bugs=frozenset()):
    # Stands in for replica_cleanup's mutant `"done" if ... and False else "cancelled"`: the fixed
    # CLEANUP, then the migration's end rewritten as cancelled, whatever it was.
    import json

    from protocol.migration import replica_cleanup
    replica_cleanup(leaver, partition, bugs)
    mig, version = read_migration(leaver.keeper, leaver.layout, partition)
    leaver.keeper.set(leaver.layout.migration(partition), json.dumps({**mig, "state": "cancelled"}).encode(), version)


@pytest.mark.parametrize("with_spark", WITH_SPARK)
def test_a_switched_migration_recorded_as_cancelled_is_a_violation_for_all_three(request, tmp_path, monkeypatch,
                                                                                  with_spark):
    """MigrationOutcomeInv: on the fixed protocol a migration's state agrees with its partition's
    owners at every snapshot, for the oracle, the Spark job and DuckDB alike. With CLEANUP
    recording every end as cancelled, a switched migration reads cancelled with its target an
    owner: all three count the same snapshots, and no other invariant notices."""
    _only_migration_outcome_trips(checkers_for(request, with_spark), tmp_path, monkeypatch, "racing",
                                  ("reference.cluster.replica_cleanup", _cleanup_ends_as_cancelled),
                                  "is cancelled, yet its target")


def _down_leaver_end_lost(rep, partition, bugs=frozenset()):
    # Stands in for replica_cleanup_for_down_leaver's mutant `{**mig, "XXstateXX": ...}`: the fixed
    # CLEANUP on the leaver's behalf (`leaving` cleared), its end then written back as the state it
    # had, as if under another key, so the migration stays switched (or cancelling) with no one leaving.
    import json

    from protocol.migration import replica_cleanup_for_down_leaver
    before, _ = read_migration(rep.keeper, rep.layout, partition)
    out = replica_cleanup_for_down_leaver(rep, partition, bugs)
    mig, version = read_migration(rep.keeper, rep.layout, partition)
    rep.keeper.set(rep.layout.migration(partition), json.dumps({**mig, "state": before["state"]}).encode(), version)
    return out


@pytest.mark.parametrize("with_spark", WITH_SPARK)
def test_a_down_leavers_cleanup_whose_end_is_lost_is_a_violation_for_all_three(request, tmp_path, monkeypatch,
                                                                               with_spark):
    """MigrationOutcomeInv's leaving clause: the assignment's leaving replica is the source while a
    migration is switched. On `deserting` 0 (leavers down past the down timeout, their CLEANUPs
    done on their behalf) the fixed protocol holds. With the end of such a CLEANUP lost, the
    migration stays switched with `leaving` cleared: no row is lost, no owner is wrong and the
    leaver ends the migration itself when it comes back, so nothing but this clause notices
    (before it, replica_cleanup_for_down_leaver's mutants 76/77 broke no invariant)."""
    _only_migration_outcome_trips(checkers_for(request, with_spark), tmp_path, monkeypatch, "deserting",
                                  ("reference.cluster.replica_cleanup_for_down_leaver", _down_leaver_end_lost),
                                  "yet its assignment's leaving replica is none, not")


@pytest.mark.parametrize("with_spark", WITH_SPARK)
def test_a_switched_migration_waiting_on_its_down_sources_only_copy_is_excused_by_all_three(request, tmp_path,
                                                                                            with_spark):
    """DownWaitBoundedProp's F23 clause (the spec's MigrationsEndOrWaitOnOnlyCopyProp): on the fixed
    protocol (`leaving` 4) r3, the switched source of 202403-1, goes down holding acknowledged rows
    no running replica has yet, and CLEANUP on its behalf waits past down_timeout + grace for an
    owner to hold them: the checkers excuse it. With those rows given to the target r4 at the
    overdue snapshots, nothing excuses the wait, and all count the same overdue snapshots."""
    from checkers.oracle import down_wait_limit, down_waits, only_copies_down
    agree = checkers_for(request, with_spark)
    folder = Path(racing_history(tmp_path / "fixed", "leaving", 4, **SIZE)["history"])
    t = read_history(folder).tables
    over = [w for w in down_waits(t) if w["snapshot_step"] - w["since"] > down_wait_limit(t)]
    assert over and {w["state"] for w in over} == {"switched"}, over
    assert only_copies_down(t, over) == {(w["partition_id"], w["snapshot_step"]) for w in over}
    assert agree(folder) == {}
    parts = pq.read_table(folder / "parts.parquet").to_pylist()
    added = []
    for w in over:
        p, s = w["partition_id"], w["snapshot_step"]
        have = {x["row_id"] for x in parts if x["snapshot_step"] == s and x["partition_id"] == p}
        name = next(x["part_name"] for x in parts if x["snapshot_step"] == s and x["partition_id"] == p
                    and x["replica"] == w["dst"])
        added += [{"snapshot_step": s, "replica": w["dst"], "partition_id": p, "part_name": name, "row_id": x["row_id"]}
                  for x in t["inserts"] if x["status"] == "ok" and x["partition_id"] == p
                  and x["ack_step"] <= s and x["row_id"] not in have]
    assert added
    schema = pq.read_schema(folder / "parts.parquet")
    pq.write_table(pa.Table.from_pylist(parts + added, schema=schema), folder / "parts.parquet")
    assert agree(folder) == {"DownWaitBoundedProp": len(over)}
