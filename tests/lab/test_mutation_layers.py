"""lab/mutation_layers.py's Spark step: a history the job cannot read is set apart, not a
failure of the whole batch (a mutant can leave snapshots that do not fit together)."""

import shutil

import pyarrow.parquet as pq
import pytest

from lab.mutation_layers import spark_verdicts
from reference.races import racing_history


@pytest.mark.spark
@pytest.mark.long   # a minute of Spark for the mutation run's plumbing: `make check`
def test_a_history_the_spark_job_cannot_read_is_set_apart_and_the_rest_judged(tmp_path):
    good = racing_history(tmp_path / "good", "racing", 0, steps=60, blocks=12)["history"]
    bad = str(tmp_path / "bad")
    shutil.copytree(good, bad)
    # the assignments' snapshots end before the parts' do: the job's bad input (exit 2)
    t = pq.read_table(f"{bad}/assignments.parquet")
    last = max(t.column("snapshot_step").to_pylist())
    pq.write_table(t.filter([s < last for s in t.column("snapshot_step").to_pylist()]), f"{bad}/assignments.parquet")
    out = {}
    for part in spark_verdicts([bad, good], batch=50):
        out.update(part)
    assert out[good] == (True, [])
    holds, failing = out[bad]
    assert not holds and failing[0].startswith("bad input: parts.parquet: "), failing
    assert "after the last assignment snapshot" in failing[0], failing
