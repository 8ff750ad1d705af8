"""One root, one table (issue 15): a second `reference run` on a --zk/--root in use is refused
with one line naming the root and its live replicas (exit 3); a run on a root an earlier run left
says so (exit 2) and `--fresh` clears it, refused while replicas are live. On a real ZooKeeper."""

from __future__ import annotations

import pytest

from protocol.keeper.zookeeper import ZooKeeperKeeper
from protocol.layout import Layout
from protocol.registration import RUN_LOCK, claim_root
from reference.__main__ import main
from reference.cluster import Cluster

pytestmark = pytest.mark.zookeeper

ROOT = "/clickhouse/tables/01/events"


def _run(zk, *extra):
    return main(["run", "--zk", zk, "--root", ROOT, "--replicas", "2", "--blocks", "3", "--queries", "1",
                 "--show", *extra])


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    # one line under the exit-code contract (harness/cli_args.py), no traceback
    assert len(err) == 1 and err[0].startswith("python -m reference: "), err
    return err[0]


def test_a_second_run_on_a_root_in_use_is_refused_naming_the_live_replicas(zk_chroot, tmp_path, capsys):
    holder = ZooKeeperKeeper(zk_chroot)
    claim_root(holder, Layout(ROOT), "the first run")
    c = Cluster(lambda: ZooKeeperKeeper(zk_chroot), tmp_path, replicas=("r1", "r2"), root=ROOT)
    try:
        before = sorted(c.admin.get_children(ROOT))
        assert _run(zk_chroot) == 3
        line = _error_line(capsys)
        assert ROOT in line and "live replicas r1, r2" in line
        assert _run(zk_chroot, "--fresh") == 3     # --fresh never clears a live table
        assert "live replicas r1, r2" in _error_line(capsys)
        assert sorted(c.admin.get_children(ROOT)) == before
        assert c.admin.get(f"{ROOT}/{RUN_LOCK}")[0] == b"the first run"
    finally:
        c.close()
        holder.close()


def test_a_run_on_a_leftover_root_says_so_and_fresh_clears_it(zk_chroot, tmp_path, capsys):
    assert _run(zk_chroot) == 0
    capsys.readouterr()
    k = ZooKeeperKeeper(zk_chroot)
    try:
        k.create(f"{ROOT}/log/left-behind", b"x")
        assert k.exists(f"{ROOT}/{RUN_LOCK}") is None      # the run's hold ended with it
        assert _run(zk_chroot) == 2
        line = _error_line(capsys)
        assert ROOT in line and "--fresh" in line
        assert k.exists(f"{ROOT}/log/left-behind") is not None   # refused: nothing changed
        assert _run(zk_chroot, "--fresh") == 0
        assert k.exists(f"{ROOT}/log/left-behind") is None
    finally:
        k.close()
