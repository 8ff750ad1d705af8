"""checkers.duckdb_check's command line on bad input: one line naming the problem, exit 2,
never a traceback nor the exit 1 that would say "violation found"."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("make", [lambda d: d / "missing", lambda d: d])
def test_a_folder_without_a_history_is_bad_input(tmp_path, make):
    folder = make(tmp_path)   # no such folder; an empty one
    p = subprocess.run([sys.executable, "-m", "checkers.duckdb_check", str(folder)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    # the same one form, refused while its arguments are parsed (no such folder) or when read (empty)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("python -m checkers.duckdb_check: bad input: "), p.stderr
    assert str(folder) in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
