"""The fault suite's answer to a ZooKeeper that gives no session (issue 38's stall_5 x clone
wedge, cause open): before a cell, an ensemble that gives none within the limit has its
evidence kept (members' logs, whether another process gets a session, this process's threads)
and its members restarted, so the suite goes on and whoever looks has what tells a server-side
wedge from a client-side one."""

from __future__ import annotations

import pytest

import lab.faults as faults
from protocol.keeper.zookeeper import ZooKeeperKeeper

pytestmark = pytest.mark.faults   # make faults: a stalled ensemble's probes take about 30 s


def test_an_ensemble_that_gives_no_session_is_restarted_and_its_evidence_kept(zk_ensemble, tmp_path, monkeypatch):
    monkeypatch.setattr(faults, "ROOT", tmp_path)   # build/faults/... under the test's folder
    said = []
    zk_ensemble.pause()   # every member stopped (SIGSTOP): connections open, nothing answered
    faults._serving_or_restarted(zk_ensemble, "stall_5-clone-1", said.append, within=2.0)
    kept = tmp_path / "build" / "faults" / "zk-before-stall_5-clone-1"
    assert len(said) == 1 and "gave no session" in said[0] and "none either" in said[0], said
    diagnosis = (kept / "diagnosis.txt").read_text()
    assert diagnosis.startswith("another process: exit ") and not diagnosis.startswith("another process: exit 0 ")
    assert "\nmodes: " in diagnosis and "\nsrvr: " in diagnosis, diagnosis
    assert "\nwedged: None\n" in diagnosis   # stopped is not wedged: no member answers `srvr` at all
    assert "_serving_or_restarted" in (kept / "threads.txt").read_text()   # this thread's stack, where it stood
    assert sorted(p.name for p in kept.iterdir() if p.is_dir()) == sorted(m.dir.name for m in zk_ensemble.members)
    # Restarted: a session again, and a running ensemble is left alone (nothing said, nothing kept).
    ZooKeeperKeeper(zk_ensemble.hosts, timeout=10).close()
    assert zk_ensemble.wedged(watch=0.5) is None   # serving, nothing outstanding
    faults._serving_or_restarted(zk_ensemble, "stall_5-clone-2", said.append, within=2.0)
    assert len(said) == 1 and not (tmp_path / "build" / "faults" / "zk-before-stall_5-clone-2").exists()
