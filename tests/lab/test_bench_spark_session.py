"""lab/bench_spark_session.py: the histories its sessions check are spark-check's racing runs,
fixed and broken alike (the sessions themselves are Spark's, measured by hand: BENCHMARKS.md)."""

from pathlib import Path

from history.folder import find_tables
from lab.bench_spark_session import SETTINGS, make_histories
from lab.spark_runs import racing_cases


def test_the_histories_are_spark_checks_racing_runs_fixed_and_broken(tmp_path):
    made = make_histories(tmp_path, 3)
    assert len(made) == 3
    for h in made:  # a history folder the Spark job reads (find_tables refuses any other shape)
        assert sum(src.rows for src in find_tables(h).values() if src.table.large) > 0
    names = [Path(h).parent.name for h in made]
    teeth, fixed = racing_cases("small")
    assert names[0] == f"{fixed[0][0]}-{fixed[0][1]}-fixed"
    assert names[1:] == [f"{t.profile}-{t.seed}-{t.switch}" for t in teeth[:2]]


def test_the_settings_compared_include_the_short_job_jvm_and_the_one_spark_check_uses():
    from checkers.spark.session import LONG_JOB_JVM, SHORT_JOB_JVM
    assert {SHORT_JOB_JVM, LONG_JOB_JVM} <= {jvm for jvm, _ in SETTINGS}
