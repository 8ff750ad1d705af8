"""The PySpark checker: it passes correct histories (synthetic and from reference runs with
migrations and crashes), catches each injected violation with the invariant named for it, agrees
with the in-process oracle, and names unreadable input."""

import json
import shutil

import pytest

from pyspark_jobs.checks import HistoryError, check, load_history
from pyspark_jobs.spark_check import main
from pyspark_jobs.synth import BLOCK, INJECTIONS, generate

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def correct(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("synthetic") / "history"
    generate(spark, folder, 2000)
    return folder


def failing(report):
    return {name for name, r in report.items() if not r["holds"]}


def test_a_correct_synthetic_history_holds(spark, correct):
    report = check(load_history(spark, str(correct)))
    assert failing(report) == set()
    assert report["OwnersCompleteInv"]["sample"] == []


@pytest.mark.parametrize("injection", sorted(INJECTIONS))
def test_each_injected_violation_is_caught_by_its_invariant(spark, tmp_path, injection):
    generate(spark, tmp_path / "h", 2000, frozenset({injection}))
    report = check(load_history(spark, str(tmp_path / "h")))
    assert INJECTIONS[injection] in failing(report)
    bad = report[INJECTIONS[injection]]
    # exactly what was injected: one row, or the 10 rows of the missing part
    assert bad["violations"] == (BLOCK if injection == "missing_part" else 1) and bad["sample"]


def test_reference_runs_with_migrations_and_crashes_agree_with_the_oracle(spark, tmp_path):
    from pyspark_jobs.workloads import reference_history
    fixed = reference_history(tmp_path / "fixed", seed=2)
    assert fixed["moves"] > 0 and fixed["oracle_violations"] == 0
    assert failing(check(load_history(spark, fixed["history"]))) == set()
    broken = reference_history(tmp_path / "broken", seed=1, bugs=frozenset({"source_stops_at_switch", "cleanup_no_delay"}))
    assert broken["oracle_violations"] > 0
    assert "QueryNoMissingInv" in failing(check(load_history(spark, broken["history"])))


def test_jsonl_histories_are_read_too(spark, tmp_path):
    from pyspark_jobs.workloads import reference_history
    from reference.history import History  # noqa: F401  (the writer of the format)
    run = reference_history(tmp_path / "run", seed=3)
    import pyarrow.parquet as pq
    jl = tmp_path / "jsonl"
    jl.mkdir()
    for f in (tmp_path / "run" / "history").glob("*.parquet"):
        rows = pq.read_table(f).to_pylist()
        (jl / f"{f.stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert failing(check(load_history(spark, str(jl)))) == set()
    assert run["oracle_violations"] == 0


def test_missing_files_and_columns_are_named(spark, correct, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(correct, broken)
    shutil.rmtree(broken / "queries.parquet")
    spark.read.parquet(str(correct / "inserts.parquet")).drop("status").write.parquet(str(broken / "inserts2"))
    shutil.rmtree(broken / "inserts.parquet")
    (broken / "inserts2").rename(broken / "inserts.parquet")
    with pytest.raises(HistoryError) as e:
        load_history(spark, str(broken))
    assert "no queries.parquet" in str(e.value) and "lacks column(s) status" in str(e.value)
    with pytest.raises(HistoryError, match="does not exist"):
        load_history(spark, str(tmp_path / "nowhere"))


def test_command_line_exit_codes_and_report(spark, correct, tmp_path, capsys):
    generate(spark, tmp_path / "bad", 2000, frozenset({"deleted_row"}))
    assert main(["--input", str(correct), "--report", str(tmp_path / "ok.json")]) == 0
    assert json.loads((tmp_path / "ok.json").read_text())["results"][0]["holds"] is True
    assert main(["--input", str(tmp_path / "bad")]) == 1
    assert "OwnersCompleteInv" in capsys.readouterr().out
    assert main(["--input", str(tmp_path / "nowhere")]) == 2
