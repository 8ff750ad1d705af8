"""The pictures (issue 17), each made by its command and read back: a counterexample as a
sequence diagram (SVG) from TLC and from a conformance walk, lanes and action labels found by
parsing the SVG."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_runner import no_traceback, run_cli

SVG = "{http://www.w3.org/2000/svg}"


def read_diagram(path: Path) -> dict:
    """What a sequence diagram shows: lane names, and per step its action label, its lane and
    the lanes its arrows reach with their labels."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    lanes = [g.find(f"{SVG}text").text for g in root.iter(f"{SVG}g") if g.get("class") == "lane"]
    steps = []
    for g in root.iter(f"{SVG}g"):
        if g.get("class") != "step":
            continue
        texts = list(g.iter(f"{SVG}text"))
        steps.append({"action": g.get("data-action"), "lane": g.get("data-lane"),
                      "label": next(t.text for t in texts if t.get("class") == "action"),
                      "to": {t.get("data-to"): t.text for t in texts if t.get("class") == "change"},
                      "own": [t.text for t in texts if t.get("class") == "own"]})
    footer = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "footer"]
    return {"lanes": lanes, "steps": steps, "footer": footer}


@pytest.mark.tlc
def test_tlc_counterexample_as_a_sequence_diagram(tmp_path):
    """MCMigration_cleanup_no_delay: TLC's counterexample (a query, REASSIGN, CLONE, SWITCH, CLEANUP
    too early), drawn by `harness.tlc --svg`."""
    out = tmp_path / "pictures" / "cleanup_no_delay.svg"
    ran = run_cli(["-m", "harness.tlc", "spec/rfc/MCSelectiveReplication.tla", "--config",
                   "spec/rfc/MCMigration_cleanup_no_delay.cfg", "--no-deadlock", "--workers", "1", "--quiet",
                   "--svg", str(out)], tmp_path / "tmp")
    assert ran.code == 1 and no_traceback(ran.err), ran.text
    assert "sequence diagram written to" in ran.err
    d = read_diagram(out)
    assert d["lanes"] == ["client", "r1", "r2", "r3", "Keeper"]
    actions = [s["action"] for s in d["steps"]]
    assert actions == ["ClientStartQuery", "AdminReassign", "ReplicaCloneFetch", "CoordinatorSwitch", "ReplicaCleanup"]
    by = {s["action"]: s for s in d["steps"]}
    assert by["ClientStartQuery"]["lane"] == "client" and by["AdminReassign"]["lane"] == "client"
    assert by["CoordinatorSwitch"]["lane"] == "r1"            # the coordinator: mig[p1].coord, the source
    assert "asg[p1]" in by["CoordinatorSwitch"]["to"]["Keeper"] and "leaving: r1" in by["CoordinatorSwitch"]["to"]["Keeper"]
    assert "mig[p1] st: clone" in by["AdminReassign"]["to"]["Keeper"]
    assert by["CoordinatorSwitch"]["label"] == "4. CoordinatorSwitch"   # TLC names no parameters
    assert d["footer"] == ["after step 5: CleanupSafeInv violated"]


@pytest.mark.tlc
def test_a_model_that_holds_draws_nothing(tmp_path):
    out = tmp_path / "none.svg"
    ran = run_cli(["-m", "harness.tlc", "spec/assignment/MCAssignment.tla", "--workers", "1", "--quiet", "--svg", str(out)],
                  tmp_path / "tmp")
    assert ran.code == 0 and "no counterexample" in ran.err and not out.exists(), ran.text


# The walk of MCRetry_no_dedup the model machine finds: an INSERT written, its ack lost, the
# retry written again (no block id recorded with the switch on).
RETRY_WALK = {"module": "SelectiveReplication", "kind": "model machine", "cfg": "MCRetry_no_dedup.cfg",
              "bugs": ["no_dedup"], "graph": None, "message": "NoDuplicateRowsInv violated",
              "steps": [["ClientSendInsert", [1, "r1"]], ["ReplicaAllocate", ["r1", 1, ["r1", "r2"]]],
                        ["ReplicaWriteInsert", ["r1", 1]], ["ClientTimeout", [1]], ["ClientSendInsert", [1, "r1"]],
                        ["ReplicaWriteInsert", ["r1", 1]]]}


def test_conformance_walk_as_a_sequence_diagram(tmp_path):
    walk = tmp_path / "machine-MCRetry_no_dedup.cfg.json"
    walk.write_text(json.dumps(RETRY_WALK))
    out = tmp_path / "walk.svg"
    ran = run_cli(["-m", "conformance", "replay", str(walk), "--svg", str(out)], tmp_path / "tmp")
    assert ran.code == 1 and no_traceback(ran.err), ran.text
    assert "step 6: NoDuplicateRowsInv violated" in ran.out and "sequence diagram written to" in ran.out
    d = read_diagram(out)
    assert d["lanes"] == ["client", "r1", "r2", "r3", "Keeper"]
    assert [s["label"] for s in d["steps"]] == [
        "1. ClientSendInsert(1, r1)", "2. ReplicaAllocate(r1, 1, (r1, r2))", "3. ReplicaWriteInsert(r1, 1)",
        "4. ClientTimeout(1)", "5. ClientSendInsert(1, r1)", "6. ReplicaWriteInsert(r1, 1)"]
    assert [s["lane"] for s in d["steps"]] == ["client", "r1", "r1", "client", "client", "r1"]
    first, alloc, write = d["steps"][:3]
    assert first["to"] == {"r1": "(request)"}                       # the INSERT sent to r1
    assert alloc["to"]["Keeper"].startswith("asg[p1] owners: +r1 +r2")
    assert write["to"]["Keeper"].startswith("log: +[type=GET p=p1")    # the GET_PART in the log
    assert any(o.startswith("parts: +[p=p1") for o in write["own"])    # and the part on r1's disk
    assert "tries: 2" in d["steps"][4]["own"][0]
    assert d["footer"] == ["failed: NoDuplicateRowsInv violated"]


def test_the_same_trace_draws_the_same_file(tmp_path):
    """Written by hand, not by matplotlib: no date or random id, so a picture can be compared."""
    walk = tmp_path / "w.json"
    walk.write_text(json.dumps(RETRY_WALK))
    for name in ("a.svg", "b.svg"):
        assert run_cli(["-m", "conformance", "replay", str(walk), "--svg", str(tmp_path / name)], tmp_path / "t").code == 1
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


# ---- each replica's partitions before and after REBALANCE (reference/placement_chart.py)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_placement_chart_of_a_rebalance_run(tmp_path):
    """`reference run --add-replicas 2 --rebalance --placement-chart FILE`: a PNG of nontrivial size."""
    out = tmp_path / "charts" / "placement.png"
    ran = run_cli(["-m", "reference", "run", "--replicas", "4", "--months", "2", "--blocks", "20", "--add-replicas", "2",
                   "--rebalance", "--placement-chart", str(out)], tmp_path / "tmp")
    assert ran.code == 0 and no_traceback(ran.err), ran.text
    assert f"placement chart written to {out}" in ran.out and "history check: 0 violations" in ran.out
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000


def test_placement_chart_shows_what_moved(tmp_path):
    """The chart's data and its elements: bars before and after per replica, one cell per copy
    kept, arrived or left (found in the SVG by their ids)."""
    from reference.placement_chart import draw, owners_by_replica
    rows_before = [{"partition_id": p, "replicas": o} for p, o in
                   [("202401-0", ["r1", "r2"]), ("202401-1", ["r1", "r2"]), ("202401-2", ["r1", "r2"]),
                    ("202401-10", ["r1", "r2"])]]
    rows_after = [{"partition_id": p, "replicas": o} for p, o in
                  [("202401-0", ["r3", "r2"]), ("202401-1", ["r1", "r3"]), ("202401-2", ["r1", "r2"]),
                   ("202401-10", ["r1", "r2"])]]
    names = ["r1", "r2", "r3"]
    before, after = owners_by_replica(rows_before, names), owners_by_replica(rows_after, names)
    assert before["r3"] == [] and after["r3"] == ["202401-0", "202401-1"]
    shown = draw(before, after, tmp_path / "p.svg", "test")
    assert shown["partitions"] == ["202401-0", "202401-1", "202401-2", "202401-10"]   # numbers as numbers
    per = shown["per_replica"]
    assert {r: (x["before"], x["after"]) for r, x in per.items()} == {"r1": (4, 3), "r2": (4, 3), "r3": (0, 2)}
    assert per["r3"]["arrived"] == ["202401-0", "202401-1"] and per["r1"]["left"] == ["202401-0"]
    ids = [el.get("id") or "" for el in ET.parse(tmp_path / "p.svg").getroot().iter()]
    count = {kind: sum(i.startswith(kind) for i in ids) for kind in ("kept", "arrived", "left", "before", "after")}
    assert count["arrived"] == 2 and count["left"] == 2 and count["kept"] == 6
    assert count["before"] >= 1 and count["after"] >= 1
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        draw(before, after, tmp_path / "p.jpg", "test")


def test_whose_step_it_is():
    """harness.sequence.actor on PR #102244's names (no Replica prefix): a replica's own step goes
    to the replica whose state changed, a step changing Keeper alone to the coordinator, the
    cleanup thread's trim to Keeper; the changed variables are described per lane."""
    from harness.sequence import KEEPER, Step, actor, changes
    from harness.tlc.values import Fn, ModelValue
    r1, r2, r3 = (ModelValue(n) for n in ("r1", "r2", "r3"))
    reps = ["r1", "r2", "r3"]
    before = {"coord": r1, "ptr": Fn({r1: 0, r2: 0, r3: 0}), "aver": 1, "trimmed": 0,
              "asg": Fn({"owners": frozenset({r1, r2}), "cloning": frozenset()})}

    def who(action: str, **after):
        step = Step(action, None, {**before, **after})
        return actor(step, before, changes(before, step.state, reps)[0], reps)

    assert who("Pull", ptr=Fn({r1: 0, r2: 0, r3: 1})) == "r3"
    assert who("Switch", aver=2, asg=Fn({"owners": frozenset({r1, r3}), "cloning": frozenset()})) == "r1"
    assert who("CleanupClearOldLogs", trimmed=3) == KEEPER
    lanes, _ = changes(before, {**before, "aver": 2, "ptr": Fn({r1: 0, r2: 4, r3: 0}),
                                "asg": Fn({"owners": frozenset({r1, r3}), "cloning": frozenset()})}, reps)
    assert lanes == {"r2": ["ptr: 4"], KEEPER: ["aver: 2", "asg[owners] +r3 -r2"]}
