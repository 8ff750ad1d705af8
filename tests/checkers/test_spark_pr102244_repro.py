"""The Spark job on the histories of the PR #102244 reproductions (reference/pr102244/repro/) run
on the reference: as the code is, it flags the file's invariant, as the oracle does
(tests/reference/test_pr102244_repro.py); with the fix it finds nothing."""

import contextlib
import io

import pytest

from pyspark_jobs.spark_check import check_folder
from reference.pr102244.repro import REPRO_DIR, load
from reference.pr102244.repro_reference import ReferenceDriver

pytestmark = [pytest.mark.spark]


@pytest.mark.parametrize("finding", ["PR-F1", "PR-F2", "PR-F3", "PR-F6", "PR-F7", "PR-F8", "PR-F9", "PR-F10"])
def test_the_spark_job_flags_the_reproduction_as_the_oracle_does(spark, tmp_path, finding):
    repro = load(REPRO_DIR / f"{finding}.toml")
    verdicts = {}
    for fixed in (False, True):
        out = ReferenceDriver(repro, fixed=fixed, data_dir=tmp_path / str(fixed), say=lambda m: None).run()
        with contextlib.redirect_stdout(io.StringIO()):
            report = check_folder(spark, str(out.history), 3)
        verdicts[fixed] = ({n for n, r in report["invariants"].items() if not r["holds"]}, set(out.broken))
    spark_code, oracle_code = verdicts[False]
    assert repro.invariant in spark_code and repro.invariant in oracle_code
    assert verdicts[True] == (set(), set())
