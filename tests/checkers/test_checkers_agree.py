"""The two checkers agree (issue 15): the in-process oracle (checkers/oracle.py) and the Spark job
(pyspark_jobs/, its library entry) give the same verdict on every invariant, on the history shape
they once disagreed on and on fault-suite histories (lab/faults.py); DuckDB (checkers/duckdb_check.py)
with them on racing runs, fixed and with a protocol variant on. What a mutant of a command, a guard
or a crash leaves is in test_checkers_agree_on_broken_commands.py (a file of its own, so that the
long tests' two workers share the Spark job's runs)."""

from __future__ import annotations

import contextlib
import io
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from checker_agreement import WITH_SPARK, checkers_for, read_history, three_agree

from checkers.duckdb_check import check as duckdb_check
from checkers.oracle import INVARIANTS, check
from history.record import History
from lab.faults import (
    Outcome,
    duckdb_verdicts,
    run_one,
    run_partitioned,
    spark_verdicts,
)
from lab.teeth import SIZE
from protocol.keeper import MemoryEnsemble
from protocol.migration import read_migration
from pyspark_jobs.spark_check import check_folder
from reference.cluster import Cluster
from reference.races import racing_history
from reference.workload import blocks

pytestmark = pytest.mark.spark


def _verdicts(c: Cluster) -> dict:
    return {name: not problems for name, problems in check(c.history, 2).items()}


def _switched(tmp_path, pinned: bool = False) -> tuple[Cluster, str, str]:
    """A cluster with one partition's REASSIGN run to SWITCH, its source still keeping it (before
    CLEANUP; `pinned`: a running query's pin holds the CLEANUP off). (cluster, partition, source)."""
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=8)
    c.load(blocks(random.Random(8), 8, 3, months=1))
    c.settle()
    p = c.admin.get_children(c.layout.assignments)[0]
    a = c.replicas["r1"].replica_refresh_cache(p)
    src, dst = a.owners[0], next(r for r in sorted(c.replicas) if r not in a.owners)
    c.reassign(p, dst, src)
    if pinned:
        c.replicas[src].pins[p] = 1
    while read_migration(c.admin, c.layout, p)[0]["state"] != "switched":
        c.background_step()
    return c, p, src


def test_a_run_ending_between_switch_and_cleanup_holds_for_both(spark, tmp_path):
    """The history the checkers disagreed on: the run ends after SWITCH and before CLEANUP, so
    the source, `leaving`, still keeps the partition. The spec allows it (NoForeignPartsInv's
    Leaver); the oracle used to report "r1 keeps 202401-11 without owning it", Spark did not."""
    c, p, src = _switched(tmp_path, pinned=True)
    try:
        c.query()
        c.write_history(tmp_path / "history")
        final = c.history.tables["assignments"]
        assert any(x["partition_id"] == p and x["leaving_replica"] == src for x in final)
        assert c.replicas[src].has_rows_of(p)   # the shape: the leaver still keeps it
        oracle = _verdicts(c)
        assert oracle == {name: True for name in INVARIANTS}
        assert spark_verdicts(spark, str(tmp_path / "history")) == oracle
        # ... and the oracle still sees a replica that keeps it without owning or leaving it, when
        # neither the assignment nor the migration (the spec's Leaver) names it leaving (Spark's
        # side of that: tests/checkers/test_spark_check.py's injected violations).
        for x in c.history.tables["assignments"]:
            if x["partition_id"] == p:
                x["leaving_replica"] = None
        c.history.tables["migrations"] = [m for m in c.history.tables["migrations"] if m["partition_id"] != p]
        assert {n for n, holds in _verdicts(c).items() if not holds} == {"NoForeignPartsInv"}
    finally:
        c.close()


def _three_counts(spark, h: History, folder: Path) -> tuple[int, int, int]:
    """NoForeignPartsInv's count from the oracle, the Spark job and DuckDB, on `h` written to `folder`."""
    h.write(folder)
    with contextlib.redirect_stdout(io.StringIO()):
        report = check_folder(spark, str(folder), 3)["invariants"]["NoForeignPartsInv"]
    return len(check(h, 2)["NoForeignPartsInv"]), report["violations"], duckdb_check(folder)["NoForeignPartsInv"]


@pytest.mark.long   # make check (long tests): a Spark job on a racing history; make test measured 21m08s on 2026-11-25
def test_no_foreign_parts_is_judged_at_every_snapshot_alike(spark, tmp_path):
    """NoForeignPartsInv is the spec's at each snapshot, not only the last: a snapshot taken
    between SWITCH and CLEANUP, where the source still keeps the partition, holds for all three
    checkers whether the assignment names the source `leaving` or only the migration says it is
    switched (the spec's Leaver, which covers source_stops_at_switch's empty `leaving`); with
    neither, all three report that snapshot, and its step, though the settled end holds."""
    c, p, src = _switched(tmp_path)
    try:
        c.snapshot()
        between = c.step
        assert c.replicas[src].has_rows_of(p)   # the leaver keeps it until CLEANUP
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "done"
        c.snapshot()
        c.history.finish(2, "memory", (), 8, c.step)
        h = c.history
        assert _three_counts(spark, h, tmp_path / "as-run") == (0, 0, 0)
        row = next(x for x in h.tables["assignments"] if x["snapshot_step"] == between and x["partition_id"] == p)
        assert row["leaving_replica"] == src
        row["leaving_replica"] = None   # source_stops_at_switch's assignment: the migration still says switched
        assert _three_counts(spark, h, tmp_path / "leaver-by-migration") == (0, 0, 0)
        h.tables["migrations"] = [m for m in h.tables["migrations"] if m["snapshot_step"] != between]
        assert _three_counts(spark, h, tmp_path / "no-leaver") == (1, 1, 1)
        assert check(h, 2)["NoForeignPartsInv"] == [
            f"{src} keeps {p} at step {between} without owning, cloning into or leaving it"]
    finally:
        c.close()


def _agree(o: Outcome, spark) -> None:
    assert o.history, o.note
    o.spark = spark_verdicts(spark, o.history)
    o.duckdb = duckdb_verdicts(o.history)
    assert set(o.oracle) == set(INVARIANTS)
    assert o.spark == o.oracle, {k: (o.oracle[k], o.spark.get(k)) for k in o.oracle if o.oracle[k] != o.spark.get(k)}
    assert o.duckdb == o.oracle, {k: (o.oracle[k], o.duckdb.get(k)) for k in o.oracle if o.oracle[k] != o.duckdb.get(k)}
    assert o.agree
    assert o.recovered and o.lost == 0 and o.duplicated == 0, o.note
    assert all(o.oracle.values()), o.oracle


@pytest.mark.long   # make check-thorough (long tests), as the fault suite it samples (make faults)
@pytest.mark.zookeeper
def test_a_fault_suite_cell_is_checked_by_both(zk_ensemble, spark, tmp_path):
    """The small version of the fault suite: a session expiry with the migration between SWITCH
    and CLEANUP, inserts and queries running."""
    _agree(run_one(zk_ensemble, zk_ensemble.hosts, "session_expiry", "switched", 1, tmp_path), spark)


@pytest.mark.faults
@pytest.mark.parametrize("fault", ["leader_kill", "full_outage", "multi_loss_before", "multi_loss_after",
                                   "replica_crash", "coordinator_crash"])
@pytest.mark.parametrize("state", ["clone", "switched", "cleanup"])
def test_fault_suite_histories_are_checked_by_both(zk_ensemble, spark, tmp_path, fault, state):
    _agree(run_one(zk_ensemble, zk_ensemble.hosts, fault, state, 2, tmp_path), spark)


@pytest.mark.faults
def test_a_network_partition_cell_recovers_and_is_checked_by_both(spark, tmp_path):
    """partition_5 (lab/faults.py run_partitioned): the cell in a network namespace of its own, its
    loopback down for 5 s with the migration switched: every replica thread recovers, nothing is
    lost, and the oracle and the Spark job agree on the history the child process wrote."""
    o = run_partitioned("partition_5", "switched", 1, tmp_path)
    if o.skipped:
        pytest.skip(o.note)
    _agree(o, spark)


@pytest.mark.long
@pytest.mark.parametrize("profile, seed, switch, invariant", [
    ("dropping", 2, None, None), ("dropping", 2, "clone_ignores_skipped_entries", "DropsAppliedInv"),
    ("altering", 0, None, None), ("altering", 0, "filter_skips_global", "GlobalEntriesAppliedInv")],
    ids=["dropping", "dropping-F8", "altering", "altering-skips-global"])
def test_drops_and_alters_get_the_same_verdict_from_all_three(spark, tmp_path, profile, seed, switch, invariant):
    """Rows a DROP PARTITION removed are owed to nobody after it, and every replica's metadata
    version is judged against the table's, by the oracle, the Spark job and DuckDB alike: the
    same count per invariant, on the fixed protocol (all zero) and with the switch (only its
    invariant)."""
    run = racing_history(tmp_path, profile, seed, frozenset({switch}) if switch else frozenset(), **SIZE)
    h = History()
    for f in Path(run["history"]).glob("*.parquet"):
        h.tables[f.stem] = pq.read_table(f).to_pylist()
    assert h.tables["drops" if profile == "dropping" else "metadata"]
    oracle = {name: len(problems) for name, problems in check(h, 2).items()}
    with contextlib.redirect_stdout(io.StringIO()):
        spark_counts = {n: r["violations"] for n, r in check_folder(spark, run["history"], 3)["invariants"].items()}
    assert spark_counts == oracle == duckdb_check(run["history"])
    assert {n for n, v in oracle.items() if v} == ({invariant} if invariant else set())


@pytest.mark.long
def test_without_the_drops_table_all_three_owe_the_dropped_rows_and_agree(spark, tmp_path, monkeypatch):
    """The excuse is what the drops table says, no more: `dropping` seed 2 without it shows the
    dropped rows as lost to owners and to the queries that started after the drops, with the
    same verdicts from the oracle, DuckDB and the Spark job (and the same query misses), whether
    Spark decides the query invariants from its masks or (too many queries for masks) by joins."""
    from checkers.spark import facts
    run = racing_history(tmp_path, "dropping", 2, **SIZE)
    (Path(run["history"]) / "drops.parquet").unlink()
    h = History()
    for f in Path(run["history"]).glob("*.parquet"):
        h.tables[f.stem] = pq.read_table(f).to_pylist()
    oracle = {name: len(problems) for name, problems in check(h, 2).items()}
    assert oracle["OwnersCompleteInv"] and oracle["QueryNoMissingInv"] and not oracle["DropsAppliedInv"]

    def spark_counts():
        with contextlib.redirect_stdout(io.StringIO()):
            return {n: r["violations"] for n, r in check_folder(spark, run["history"], 3)["invariants"].items()}
    # the oracle words OwnersCompleteInv per owner and partition, Spark and DuckDB per missing copy:
    # the verdicts agree everywhere, the counts where the units are the same
    by_masks, by_duckdb = spark_counts(), duckdb_check(run["history"])
    assert by_masks == by_duckdb
    assert {n for n, v in by_masks.items() if v} == {n for n, v in oracle.items() if v}
    assert by_masks["QueryNoMissingInv"] == oracle["QueryNoMissingInv"]
    monkeypatch.setattr(facts, "MAX_QUERY_WORDS", 0)
    assert spark_counts() == by_masks


def _broken_switch(*args, **kwargs):
    # Stands in for a broken coordinator (a mutant's SWITCH): it raises every time.
    raise RuntimeError("broken switch")


@pytest.mark.parametrize("with_spark", WITH_SPARK)
def test_migrations_left_in_flight_at_a_settled_end_get_the_same_verdict_from_all_three(request, tmp_path, monkeypatch,
                                                                                         with_spark):
    """MigrationsEndProp, the spec's liveness property judged on a finite history's settled end:
    with SWITCH raising every time, `churn`'s CLONEs are still in flight when the run has settled.
    The oracle, DuckDB and the Spark job count the same migrations and report nothing else. The
    same history without run.settled_step (an older history, or a run cut wherever it was) is
    judged by none of them: its migrations may still be on their way."""
    monkeypatch.setattr("reference.cluster.coordinator_switch", _broken_switch)
    run = racing_history(tmp_path, "churn", 0, steps=80, blocks=16)
    folder = Path(run["history"])

    agree = checkers_for(request, with_spark)

    def verdicts():
        return agree(folder)
    stuck = verdicts()
    assert set(stuck) == {"MigrationsEndProp", "NoLogicalErrorsInv"}   # each raise of SWITCH is a LOGICAL_ERROR
    assert stuck["MigrationsEndProp"] == run["actions"]["reassign"] and stuck["NoLogicalErrorsInv"] == run["errors"]
    pq.write_table(pq.read_table(folder / "run.parquet").drop(["settled_step"]), folder / "run.parquet")
    assert verdicts() == {"NoLogicalErrorsInv": run["errors"]}


def test_a_logical_error_is_a_violation_for_all_three(spark, tmp_path):
    """NoLogicalErrorsInv, ClickHouse's LOGICAL_ERROR rule: a fixed-protocol history holds for the
    oracle, the Spark job and DuckDB; the same history with one row in its `errors` table (an
    operator's REASSIGN that raised, as a mutant calling _write with an argument missing does) is
    refused by all three through that check alone, and DuckDB's command line exits 1."""
    from checkers.duckdb_check import main as duckdb_main
    run = racing_history(tmp_path / "run", "churn", 0, steps=80, blocks=16)
    clean = Path(run["history"])

    def counts(folder: Path) -> dict:
        return three_agree(spark, folder)
    assert run["errors"] == 0 and counts(clean) == {}
    h = read_history(clean)
    h.error(17, "", "reassign", TypeError("_write() missing 1 required positional argument: 'version'"))
    h.write(tmp_path / "raised")
    assert counts(tmp_path / "raised") == {"NoLogicalErrorsInv": 1}
    assert check(h, 2)["NoLogicalErrorsInv"] == [
        "admin reassign raised TypeError at step 17: _write() missing 1 required positional argument: 'version'"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert duckdb_main([str(tmp_path / "raised")]) == 1 and duckdb_main([str(clean)]) == 0
    # Every INSERT raised (a mutant of route_insert): nothing acknowledged. The Spark job refuses
    # such a history as bad input ("nothing to prove") unless the servers logged LOGICAL_ERRORs,
    # which are then the violation it reports, as the oracle and DuckDB do.
    for row in h.tables["inserts"]:
        row["status"] = "unknown"
    h.write(tmp_path / "nothing_acknowledged")
    assert counts(tmp_path / "nothing_acknowledged") == {"NoLogicalErrorsInv": 1}


@pytest.mark.long   # make check (long tests): a Spark job on two racing histories, over make test's budget
def test_a_clone_target_without_the_mutation_its_keepers_queued_is_a_violation_for_all_three(spark, tmp_path):
    """MutationsAppliedInv at every snapshot: on the fixed protocol (`mutating` 1: MUTATE_PARTs
    written and pulled, not executed, when the partition moves) the CLONE re-queues them from the
    keepers' queues, and no keeper holds old data without a mutation pending, for the oracle, the
    Spark job and DuckDB alike. With F8 (clone_ignores_skipped_entries) the target fetches the
    unmutated parts and nothing brings the mutation: all three count the same parts, and nothing
    else fails (the rows are all there; their values are old)."""
    from checkers.oracle import mutations_not_applied
    fixed = Path(racing_history(tmp_path / "fixed", "mutating", 1, steps=80, blocks=16)["history"])
    assert pq.read_table(fixed / "log_mutations.parquet").num_rows > 0
    assert three_agree(spark, fixed) == {}
    broken = Path(racing_history(tmp_path / "broken", "mutating", 1, frozenset({"clone_ignores_skipped_entries"}),
                                 steps=80, blocks=16)["history"])
    assert set(three_agree(spark, broken)) == {"MutationsAppliedInv"}
    assert all("with none pending" in line for line in mutations_not_applied(read_history(broken).tables))
    # without the replicas' log pointers (an older history) nothing is judged
    pq.write_table(pq.read_table(broken / "metadata.parquet").drop(["log_pointer"]), broken / "metadata.parquet")
    assert three_agree(spark, broken) == {}


@pytest.mark.parametrize("coordinator, seed, flagged", [("partition_snapshot", 2, False), ("snapshot_replica", 0, True),
                                                        ("union", 2, True)])
def test_parallel_replicas_histories_get_the_same_verdict_from_all_three(spark, tmp_path, coordinator, seed, flagged):
    """The `parallel` profile's SELECTs spread over three of four replicas (F24, PR-F11): with the
    fix every checker holds; ClickHouse master's coordinator (PR #102244's path) and 2023's union
    miss acknowledged rows, QueryNoMissingInv and nothing else, alike in all three."""
    run = racing_history(tmp_path, "parallel", seed, coordinator=coordinator, **SIZE)
    assert run["actions"].get("parallel query", 0) > 10
    found = three_agree(spark, Path(run["history"]))
    assert set(found) == ({"QueryNoMissingInv"} if flagged else set()), found


@pytest.mark.parametrize("version, fixes, crash_at, flagged", [
    ("current", "all", "SOURCE_DROP", set()),
    ("v21_8", "all", "SOURCE_DROP", {"NoForeignPartsInv", "QueryNoDuplicateInv"}),
    ("current", "queries", None, {"NoForeignPartsInv", "QueryNoDuplicateInv"})])
def test_part_move_histories_get_the_same_verdict_from_all_three(spark, tmp_path, version, fixes, crash_at, flagged):
    """Part moves between shards (reference/part_move_races.py, issue 39): today's orchestrator
    with the fixes holds through a crash after SOURCE_DROP's entry; 21.8's, after the same crash,
    leaves the part on a lagging source replica past DONE and a query reads it twice (F31); today's
    code without mutations_respect_pins keeps a mutated row on the source (F28). Alike in all three."""
    from protocol.part_moves import FIXES
    from reference.part_move_races import part_move_history
    chosen = FIXES if fixes == "all" else ("sync_waits_for_queries", "delays_wait_for_queries")
    run = part_move_history(tmp_path, 0, version, chosen, crash_at=crash_at, max_crashes=1 if crash_at else 0)
    assert run["settled"] and run["queries"] >= 10
    found = three_agree(spark, Path(run["history"]))
    assert set(found) == flagged, found


def test_a_run_that_ends_with_every_partition_dropped_is_judged_on_its_last_snapshot(spark, tmp_path):
    """`dropping` seed 1 on 3 replicas and 2 buckets (4 partitions) ends with all four dropped, so
    its last snapshot holds no part. The oracle and DuckDB took the last snapshot *with* a part for
    the end state, one taken before the last drops, and reported DropsAppliedInv on 54 rows the
    replicas had since dropped; the Spark job (the last of `assignments`) held. Found by trace
    validation: the run's Keeper trace was accepted by the spec with DropsAppliedInv holding all
    along (`python -m traces reference --profile dropping`)."""
    from reference.profiles import profile_of
    from reference.races import race, racing_cluster
    profile = profile_of("dropping")
    c = racing_cluster(MemoryEnsemble().connect, tmp_path / "data", profile, 1, replicas=3, buckets=2)
    try:
        counts = race(c, profile, 1, blocks=16, rows=10, months=2)
        c.write_history(tmp_path / "history", settled="settle raised" not in counts)
    finally:
        c.close()
    h = History()
    for f in (tmp_path / "history").glob("*.parquet"):
        h.tables[f.stem] = pq.read_table(f).to_pylist()
    last = max(a["snapshot_step"] for a in h.tables["assignments"])
    assert h.tables["drops"] and not [x for x in h.tables["parts"] if x["snapshot_step"] == last]
    assert max(x["snapshot_step"] for x in h.tables["parts"]) < max(x["drop_step"] for x in h.tables["drops"])
    oracle = {name: len(problems) for name, problems in check(h, 2).items()}
    with contextlib.redirect_stdout(io.StringIO()):
        found = check_folder(spark, str(tmp_path / "history"), 3)["invariants"]
        spark_counts = {n: r["violations"] for n, r in found.items()}
    assert spark_counts == oracle == duckdb_check(str(tmp_path / "history"))
    assert not {n for n, v in oracle.items() if v}, oracle
