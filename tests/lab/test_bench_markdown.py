"""`make bench` rewrites its sections of BENCHMARKS.md and nothing else (issue 41: a command wrote
over stored data). A run without --only used to start the file afresh from its header, dropping
every section measured by hand and every note; each section now replaces its own, between its
markers, whatever the run."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.long]   # a bench run (about 30 s): make check's long tests


def test_a_bench_run_replaces_its_section_and_keeps_the_rest(tmp_path):
    md = tmp_path / "B.md"
    md.write_text("# B\n\nhand-written notes\n\n<!-- bench:reference -->\nold\n<!-- /bench:reference -->\n\n"
                  "<!-- bench:tlc -->\ntlc figures\n<!-- /bench:tlc -->\nmore notes\n")
    ran = subprocess.run([sys.executable, "-m", "lab.bench", "--only", "reference", "--quick", "--markdown", str(md),
                          "--report", str(tmp_path / "r.json")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    text = md.read_text()
    assert "hand-written notes" in text and "more notes" in text and "tlc figures" in text
    section = text.split("<!-- bench:reference -->")[1].split("<!-- /bench:reference -->")[0]
    assert "old" not in section and "|" in section   # the section is the run's table now
