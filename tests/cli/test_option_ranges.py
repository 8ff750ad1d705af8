"""Numbers no run can mean are refused before anything starts (issue 41): every numeric option of
these commands took a bare int or float before, so 0 seeds, -1 seconds or 0 replicas went on into
the run. Each must now exit 2 with argparse's one line naming the option."""

from __future__ import annotations

import pytest
from cli_runner import no_traceback, run_cli

BAD = [
    (["-m", "harness.clickhouse", "--replicas", "0"], "--replicas"),
    (["-m", "lab.faults", "--seeds", "0"], "--seeds"),
    (["-m", "lab.findings_under", "--under", "quorum", "--timeout", "0"], "--timeout"),
    (["-m", "lab.teeth", "--seeds", "0"], "--seeds"),
    (["-m", "lab.load_sweep", "--seconds", "-1"], "--seconds"),
    (["-m", "lab.trace_teeth", "--jobs", "0"], "--jobs"),
    (["-m", "lab.bench_tlc_throughput", "--pairs", "0"], "--pairs"),
    (["-m", "lab.bench_spark_session", "--histories", "0"], "--histories"),
    (["-m", "lab.mutation_layers", "--sample", "-1"], "--sample"),
    (["-m", "lab.mutation_layers", "--racing-seconds", "0"], "--racing-seconds"),
    (["pyspark_jobs/spark_check.py", "--executor-timeout", "0", "history"], "--executor-timeout"),
    (["pyspark_jobs/spark_check.py", "--partitions", "0", "history"], "--partitions"),
]


@pytest.mark.parametrize("argv, option", [pytest.param(a, o, id=" ".join(a[1:3] + a[3:5])) for a, o in BAD])
def test_a_number_out_of_range_is_refused_naming_the_option(argv, option, tmp_path):
    ran = run_cli(argv, tmp_path / "tmp", timeout=60)
    assert ran.code == 2, ran.text
    assert no_traceback(ran.err) and option in ran.err.strip().splitlines()[-1], ran.err
    assert list((tmp_path / "tmp").iterdir()) == []   # nothing written
