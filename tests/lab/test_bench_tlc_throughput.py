"""lab.bench_tlc_throughput: the same spec on both sides counts the same states (a small model that
TLC exhausts within the time, so its last progress report is its total), and the command line
refuses a model or a commit that does not exist."""

import subprocess
import sys
from pathlib import Path

import pytest

from lab.bench_tlc_throughput import compare, markdown

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.tlc
def test_a_spec_against_itself_counts_the_same_states():
    (row,) = compare("HEAD", ["MCFilteredLog"], seconds=30, pairs=1, log=lambda s: None)
    assert row["before"] == row["after"] and row["ratio_distinct"] == 1.0
    assert row["after"]["distinct"] > 100   # the model's whole search, not a first report of a few states
    assert "| `MCFilteredLog` |" in markdown([row], "HEAD", 30, 1)


@pytest.mark.parametrize("args, culprit", [(["--before", "HEAD", "--model", "MCNoSuchModel"], "MCNoSuchModel"),
                                           (["--before", "no-such-commit"], "no-such-commit")])
def test_bad_input_is_refused_in_one_line(args, culprit):
    p = subprocess.run([sys.executable, "-m", "lab.bench_tlc_throughput", *args], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and culprit in p.stderr, p.stderr
