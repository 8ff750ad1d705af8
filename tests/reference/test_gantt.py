"""Gantt charts of migrations, from the simulation and from a reference run: one bar per
migration, a lane per replica, written as a PNG."""

import pytest

from protocol.keeper import MemoryEnsemble
from protocol.rebalance import plan_rebalance
from protocol.scheduler import Schedule
from reference import gantt
from reference.__main__ import main
from reference.cluster import Cluster
from reference.makespan import GB, Bandwidth, simulate
from reference.scenarios import growth
from reference.workload import blocks

PNG = b"\x89PNG\r\n\x1a\n"


def lanes(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_yticklabels()]


def test_simulated_rebalance_draws_one_bar_per_migration_in_its_targets_lane(tmp_path):
    assignments, replicas = growth()
    plan = plan_rebalance(assignments, replicas)
    r = simulate(plan, lambda p: 50 * GB, Bandwidth(GB, 10 * GB), Schedule.least_busy())
    fig = gantt.draw(gantt.from_spans(r.spans), tmp_path / "sim.png", "RFC scenario")
    assert (tmp_path / "sim.png").read_bytes().startswith(PNG)
    bars = gantt.migration_bars(fig)
    assert len(bars) == len(plan) == 64
    assert lanes(fig) == ["r11", "r12"]
    # Bars span CLONE start to SWITCH: their extent is the simulated times.
    drawn = sorted((b.get_x(), b.get_x() + b.get_width()) for b in bars)
    simulated = sorted((s.start, s.end) for s in r.spans)
    assert [t for pair in drawn for t in pair] == pytest.approx([t for pair in simulated for t in pair])
    by_source = gantt.draw(gantt.from_spans(r.spans), tmp_path / "src.png", "by source", lane="src")
    assert lanes(by_source) == [f"r{i:02d}" for i in range(1, 11)]


def test_reference_run_records_clone_switch_and_cleanup_and_draws_them(tmp_path):
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=[f"r{i}" for i in range(1, 5)], seed=2,
                schedule=Schedule.least_busy(per_table=4))
    try:
        import random
        c.load(blocks(random.Random(2), 12, 5, months=2))
        c.settle()
        moves = c.grow_and_rebalance(["r5"])
        c.settle()
    finally:
        c.close()
    assert moves and len(c.timeline) == len(moves)
    for m in c.timeline:
        assert m["clone"] < m["fetch"] < m["switch"] < m["cleanup"], m
    fig = gantt.draw(gantt.from_timeline(c.timeline), tmp_path / "run.png", "run", unit="steps")
    assert (tmp_path / "run.png").read_bytes().startswith(PNG)
    assert len(gantt.migration_bars(fig)) == len(moves)
    assert lanes(fig) == sorted({dst for _, _, dst in moves})
    waits = [line for line in fig.axes[0].lines if line.get_gid() == "cleanup-wait"]
    assert len(waits) == len(moves)


def test_gantt_command_writes_the_png(tmp_path, capsys):
    out = tmp_path / "g.png"
    assert main(["gantt", "--rule", "table_limit", "--ingest", "2.5", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(PNG)
    assert "makespan 958 s, lower bound 640 s" in capsys.readouterr().out


def test_bad_chart_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="no migrations to draw"):
        gantt.draw([], tmp_path / "x.png", "empty")
    with pytest.raises(ValueError, match="lane must be one of"):
        gantt.draw([{"partition": "p", "src": "a", "dst": "b", "start": 0, "switch": 1}], tmp_path / "x.png", "t", lane="x")
    with pytest.raises(ValueError, match="switches \\(1\\) before it starts \\(2\\)"):
        gantt.draw([{"partition": "p", "src": "a", "dst": "b", "start": 2, "switch": 1}], tmp_path / "x.png", "t")
