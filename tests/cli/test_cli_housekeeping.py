"""What a command leaves behind and how it stops (issue 17): no temporary folder unless --keep,
Ctrl-C one line and exit 130, defaults in every --help, `python -m harness.zookeeper` serving a
shell until SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import ROOT, interrupt, no_traceback, run_cli


def test_a_run_leaves_no_temporary_folder(tmp_path):
    ran = run_cli(["-m", "reference", "run", "--blocks", "2"], tmp_path / "tmp")
    assert ran.code == 0, ran.text
    assert "history check: 0 violations" in ran.out
    assert list((tmp_path / "tmp").iterdir()) == []


def test_keep_keeps_the_parts_folder_and_names_it(tmp_path):
    ran = run_cli(["-m", "reference", "run", "--blocks", "2", "--keep"], tmp_path / "tmp")
    assert ran.code == 0, ran.text
    kept = re.search(r"replicas' parts kept in (\S+)", ran.out)
    assert kept, ran.out
    folder = kept.group(1)
    assert os.path.dirname(folder) == str(tmp_path / "tmp") and any(os.scandir(folder))


@pytest.mark.parametrize("argv", [["reference", "run"], ["reference", "gantt"], ["reference", "tables"],
                                  ["harness.tlc"], ["harness.check_models"], ["conformance"], ["harness.zookeeper"]])
def test_help_shows_defaults_and_the_exit_status(argv, tmp_path):
    ran = run_cli(["-m", *argv, "--help"], tmp_path / "tmp")
    assert ran.code == 0 and ran.out.startswith("usage:"), ran.text
    # every option with a default says it (e.g. `--blocks BLOCKS  INSERT blocks (default: 20)`)
    if argv != ["harness.zookeeper"]:  # it has no option but --help
        assert "default: " in ran.out, ran.out
    assert "exit status: 0 holds, 1 a violation was found, 2 bad input" in " ".join(ran.out.split())


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """SIGINT in the middle of the inserts: the temporary folder goes too."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    def progress_line(p):   # a progress line: the run is under way
        assert p.stdout.readline().startswith("[")

    ran = interrupt(["-m", "reference", "run", "--blocks", "100000", "--rows", "1"], progress_line,
                    {"TMPDIR": str(tmp)})
    assert ran.code == 130, ran.err
    assert no_traceback(ran.err) and ran.err.strip() == "python -m reference: interrupted: stopped by Ctrl-C"
    assert list(tmp.iterdir()) == []


@pytest.mark.zookeeper
def test_zookeeper_for_the_shell_prints_its_address_and_stops_on_sigterm(tmp_path):
    from kazoo.client import KazooClient

    from harness.zookeeper import four_letter
    p = subprocess.Popen([sys.executable, "-m", "harness.zookeeper"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        first = p.stdout.readline().strip()
        m = re.fullmatch(r"--zk (127\.0\.0\.1:(\d+))", first)
        assert m, first + p.stderr.read() if p.poll() is not None else first
        client = KazooClient(hosts=m.group(1), timeout=10)
        client.start(timeout=15)
        assert "zookeeper" in client.get_children("/")
        client.stop()
        client.close()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 0 and "stopped ZooKeeper" in out and no_traceback(err), err
    assert four_letter(int(m.group(2)), "ruok") == ""  # nothing serves there any more
    assert list(tmp_path.iterdir()) == []  # its dataDir went with it


@pytest.mark.tlc
def test_ctrl_c_with_two_jobs_ends_both_tlc_runs_and_exits_130():
    """check_models --jobs 2: the main thread gets the Ctrl-C, the TLC runs (sessions of their own)
    must end with it, not run the list to its end."""
    running: list[int] = []

    def tlc_children(p) -> list[int]:
        """The TLC JVMs the check started: its children whose command line runs tlc2.TLC."""
        pids = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and b"tlc2.TLC" in (proc / "cmdline").read_bytes() \
                        and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == p.pid:
                    pids.append(int(proc.name))
            except OSError:   # gone meanwhile
                pass
        return pids

    def both_in_flight(p):   # two models that each run for a minute or more
        deadline = time.monotonic() + 60
        while len(tlc_children(p)) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        running.extend(tlc_children(p))
        assert len(running) == 2, "both TLC runs should be in flight"
        time.sleep(3)

    ran = interrupt(["-m", "harness.check_models", "--only", "MCMigration", "--only", "MCLiveness", "--jobs", "2",
                     "--workers", "1"], both_in_flight)
    assert ran.code == 130, ran.err
    assert ran.err.strip().splitlines()[-1] == "python -m harness.check_models: interrupted: stopped by Ctrl-C", ran.err
    time.sleep(1)
    assert [pid for pid in running if Path(f"/proc/{pid}").exists()] == [], "a TLC run outlived the Ctrl-C"
