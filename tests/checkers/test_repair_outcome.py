"""RepairOutcomeProp on a history (checkers/invariants.py; the spec's step property summed up to
each snapshot): a partition's owners number replication_factor less its owners SYSTEM DROP
REPLICA removed so far (table replica_drops) plus its repairs' SWITCHes so far (table repairs).
The oracle and DuckDB count the same violations (the Spark job too: test_checkers_agree*.py's
three-way comparisons include it, and the long test here)."""

from __future__ import annotations

import contextlib
import io
import random
from pathlib import Path

import pytest

from checkers.duckdb_check import check as duckdb_check
from checkers.oracle import check
from history.record import History
from protocol.keeper import MemoryEnsemble
from reference.cluster import Cluster
from reference.workload import blocks

RF = 2


def _lost_and_repaired(tmp_path: Path, bugs=frozenset()) -> History:
    """Four replicas, r1 lost for good (crash, SYSTEM DROP REPLICA) and repaired: every repair run
    to its end when fixed; one round of repairs with repair_moves_coordinator, whose SWITCHes
    leave each partition short (a second round would move it again, for ever). Snapshots before
    the loss, after it and at the end."""
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=("r1", "r2", "r3", "r4"), seed=3, bugs=bugs)
    try:
        c.load(blocks(random.Random(3), 8, 3, months=2))
        c.settle()
        c.snapshot()
        c.crash_replica("r1")
        c.drop_replica("r1")
        c.snapshot()
        if bugs:
            c.repair()
            c.settle()
        else:
            c.repair_all()
        c.write_history(tmp_path / "history", settled=True)
        return c.history
    finally:
        c.close()


def _counts(h: History, folder: Path) -> tuple[int, int]:
    """RepairOutcomeProp's violations by the oracle and by DuckDB, on `h` written to `folder`."""
    h.write(folder)
    name = "RepairOutcomeProp"
    return len(check(h, RF)[name]), duckdb_check(folder, only=(name,))[name]


def test_a_loss_repaired_holds_and_its_records_are_what_the_count_reads(tmp_path):
    h = _lost_and_repaired(tmp_path)
    drops, repairs = h.tables["replica_drops"], h.tables["repairs"]
    assert drops and {x["replica"] for x in drops} == {"r1"}
    assert sorted(x["partition_id"] for x in repairs) == sorted(x["partition_id"] for x in drops)
    assert {n: v for n, v in check(h, RF).items() if v} == {}
    assert {n: v for n, v in duckdb_check(tmp_path / "history").items() if v} == {}
    # Without the repairs recorded, every snapshot after a repair's SWITCH has an owner too many;
    # without the drops, every snapshot after the drop and before its repair one too few.
    repaired = {x["partition_id"]: x["step"] for x in repairs}
    after_repair = sum(1 for a in h.tables["assignments"]
                       if a["partition_id"] in repaired and a["snapshot_step"] >= repaired[a["partition_id"]])
    h.tables["repairs"] = []
    assert _counts(h, tmp_path / "no-repairs") == (after_repair, after_repair)
    h.tables["repairs"], h.tables["replica_drops"] = repairs, []
    dropped_at = drops[0]["step"]
    short = sum(1 for a in h.tables["assignments"] if a["partition_id"] in repaired
                and dropped_at < a["snapshot_step"] < repaired[a["partition_id"]])
    assert short and _counts(h, tmp_path / "no-drops") == (short + after_repair, short + after_repair)


def test_a_drop_at_the_snapshots_own_step_may_come_before_or_after_it(tmp_path):
    h = _lost_and_repaired(tmp_path)
    steps = sorted({a["snapshot_step"] for a in h.tables["assignments"]})
    dropped_at = h.tables["replica_drops"][0]["step"]
    assert dropped_at < steps[1]   # the snapshot after the drop ticked the clock
    for x in h.tables["replica_drops"]:
        x["step"] = steps[1]       # as if taken at that snapshot's step (no tick): it may follow the drop
    assert _counts(h, tmp_path / "same-step") == (0, 0)
    for x in h.tables["replica_drops"]:
        x["step"] = steps[0]       # ... or precede it: the snapshot before the loss, at the drop's step
    assert _counts(h, tmp_path / "same-step-before") == (0, 0)


def _hand_built(snapshots: list[tuple[int, list[str]]], drops=(), repairs=()) -> History:
    """One partition p1 at RF 2: its owners at each snapshot; drops (step, replica), repairs (step, dst)."""
    h = History()
    h.tables["inserts"] = [{"insert_id": "b/p1", "block_id": "b", "partition_id": "p1", "row_id": 1,
                            "status": "ok", "sent_step": 1, "ack_step": 2}]
    for step, owners in snapshots:
        h.tables["assignments"].append({"snapshot_step": step, "partition_id": "p1", "owners": owners,
                                        "clone_target": None, "leaving_replica": None})
        h.tables["parts"] += [{"snapshot_step": step, "replica": o, "partition_id": "p1", "part_name": "p1_0_0_0",
                               "row_id": 1} for o in owners]
    h.tables["replica_drops"] = [{"step": s, "replica": r, "partition_id": "p1"} for s, r in drops]
    h.tables["repairs"] = [{"step": s, "partition_id": "p1", "dst": d} for s, d in repairs]
    h.finish(RF, "memory", (), 0, max(s for s, _ in snapshots))
    return h


@pytest.mark.parametrize("snapshots, drops, repairs, violations", [
    # r1 dropped at 5, repaired by r3 at 8: two owners, one, two
    ([(3, ["r1", "r2"]), (6, ["r2"]), (9, ["r2", "r3"])], [(5, "r1")], [(8, "r3")], 0),
    # the repair's SWITCH moved its coordinator r2 away: one owner after a drop and a repair
    ([(3, ["r1", "r2"]), (6, ["r2"]), (9, ["r3"])], [(5, "r1")], [(8, "r3")], 1),
    # short with nothing dropped (a partition the dropped replica never owned)
    ([(3, ["r1", "r2"]), (6, ["r2"])], [], [], 1),
    # an owner more than RF with nothing repaired (PR-F3's over-replication)
    ([(3, ["r1", "r2", "r3"])], [], [], 1),
])
def test_hand_built_histories(tmp_path, snapshots, drops, repairs, violations):
    assert _counts(_hand_built(snapshots, drops, repairs), tmp_path / "h") == (violations, violations)


def test_a_repair_that_moves_its_coordinator_is_a_violation_for_the_oracle_and_duckdb(tmp_path):
    h = _lost_and_repaired(tmp_path, frozenset({"repair_moves_coordinator"}))
    repaired = {x["partition_id"]: x["step"] for x in h.tables["repairs"]}
    assert repaired
    # every snapshot after a repair's SWITCH shows its partition an owner short
    after = sum(1 for a in h.tables["assignments"]
                if a["partition_id"] in repaired and a["snapshot_step"] >= repaired[a["partition_id"]])
    assert _counts(h, tmp_path / "h2") == (after, after)


@pytest.mark.long   # a Spark job: make check's long tests
@pytest.mark.spark
def test_the_spark_job_counts_what_the_oracle_and_duckdb_count(spark, tmp_path):
    from pyspark_jobs.spark_check import check_folder
    for bugs in (frozenset(), frozenset({"repair_moves_coordinator"})):
        folder = tmp_path / ("broken" if bugs else "fixed")
        h = _lost_and_repaired(folder, bugs)
        with contextlib.redirect_stdout(io.StringIO()):
            report = check_folder(spark, str(folder / "history"), 3)["invariants"]
        assert report["RepairOutcomeProp"]["violations"] == len(check(h, RF)["RepairOutcomeProp"]) == \
            duckdb_check(folder / "history")["RepairOutcomeProp"]
        assert report["RepairOutcomeProp"]["holds"] == (not bugs)
