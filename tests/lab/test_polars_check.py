"""lab.polars_check counts what checkers.duckdb_check counts, invariant by invariant, on the
histories the bench times (synthetic, each injected violation) and on reference runs with
migrations, drops and a broken variant; and its command line refuses bad input in one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from checkers.duckdb_check import check as duckdb_check
from lab.polars_check import ROW_INVARIANTS
from lab.polars_check import check as polars_check
from lab.synth import INJECTIONS, generate

REPO = Path(__file__).resolve().parents[2]


def both(folder) -> tuple[dict, dict]:
    return polars_check(folder), duckdb_check(folder, only=ROW_INVARIANTS)


@pytest.mark.spark
@pytest.mark.parametrize("inject", [frozenset(), *(frozenset({i}) for i in sorted(INJECTIONS)),
                                    frozenset(INJECTIONS)], ids=lambda s: "+".join(sorted(s)) or "correct")
def test_synthetic_histories_count_alike(spark, tmp_path, inject):
    generate(spark, tmp_path / "h", 2000, inject)
    polars, duck = both(tmp_path / "h")
    assert polars == duck
    assert any(polars.values()) == bool(inject)
    if len(inject) == 1:   # all at once, they overlap (the dropped partition holds the other rows injected)
        (i,) = inject
        assert polars[INJECTIONS[i]] > 0


@pytest.mark.slow
def test_reference_runs_count_alike(tmp_path):
    from lab.spark_runs import reference_history
    fixed = reference_history(tmp_path / "fixed", seed=2)
    broken = reference_history(tmp_path / "broken", seed=2,
                               bugs=frozenset({"source_stops_at_switch", "cleanup_no_delay"}))
    assert fixed["moves"] > 0 and broken["oracle_violations"] > 0
    polars, duck = both(fixed["history"])
    assert polars == duck and not any(polars.values())
    polars, duck = both(broken["history"])
    assert polars == duck and polars["QueryNoMissingInv"] > 0


@pytest.mark.parametrize("make", [lambda d: d / "missing", lambda d: d])
def test_a_folder_without_a_history_is_bad_input(tmp_path, make):
    folder = make(tmp_path)
    p = run("lab.polars_check", folder)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("python -m lab.polars_check: bad input: "), p.stderr
    assert str(folder) in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""


def write_history(folder: Path) -> None:
    """A one-row history whose one owner holds the row twice: NoDuplicateRowsInv, and nothing else."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from history.schema import arrow_schema
    rows = {"run": [{"run_id": "t", "replication_factor": 1, "backend": "t", "bugs": [], "seed": 0, "final_step": 1}],
            "inserts": [{"insert_id": "b/p", "block_id": "b", "partition_id": "p", "row_id": 1, "status": "ok",
                         "sent_step": 0, "ack_step": 1}],
            "queries": [], "query_rows": [],
            "parts": [{"snapshot_step": 1, "replica": "r1", "partition_id": "p", "part_name": n, "row_id": 1}
                      for n in ("p_0_0_0", "p_1_1_0")],
            "assignments": [{"snapshot_step": 1, "partition_id": "p", "owners": ["r1"], "leaving_replica": None}]}
    for name, table_rows in rows.items():
        pq.write_table(pa.Table.from_pylist(table_rows, schema=arrow_schema(name)), folder / f"{name}.parquet")


def run(module: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_the_command_line_reports_counts_and_exit_1_on_a_violation(tmp_path):
    write_history(tmp_path)
    p = run("lab.polars_check", tmp_path)
    assert p.returncode == 1, p.stderr
    counts = json.loads(p.stdout)["violations"]
    assert counts == duckdb_check(tmp_path, only=ROW_INVARIANTS)
    assert {n for n, k in counts.items() if k} == {"NoDuplicateRowsInv"}


def test_duckdb_counts_only_the_invariants_named(tmp_path):
    """The bench times DuckDB on Polars' subset with --only (lab/bench_spark.py)."""
    write_history(tmp_path)
    p = run("checkers.duckdb_check", tmp_path, "--only", "NoDuplicateRowsInv", "--only", "OwnersCompleteInv")
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["violations"] == {"OwnersCompleteInv": 0, "NoDuplicateRowsInv": 1}
    p = run("checkers.duckdb_check", tmp_path, "--only", "NoSuchInv")
    assert p.returncode == 2 and "NoSuchInv" in p.stderr and p.stdout == ""
