"""lab/trace_teeth.py's record (trace validation's teeth, issue 36) and the table traces/README.md
shows: every RFC switch has its row, every fixed run it was compared with was accepted, and the
README's table is the record's rendering (python -m lab.trace_teeth --record writes both)."""

import json

from lab import trace_teeth
from protocol.bugs import DESIGNS


def _record():
    return json.loads(trace_teeth.RECORD.read_text())


def test_every_rfc_switch_has_a_verdict_on_its_teeth_run():
    rows = _record()
    assert {r["switch"] for r in rows if r["switch"]} == set(DESIGNS["rfc"])
    for r in rows:
        if r["switch"]:
            assert (r["profile"], r["seed"]) == trace_teeth.run_of(r["switch"]), r
            assert r["verdict"] in ("accepted", "rejected"), r


def test_the_fixed_run_beside_each_switch_was_accepted():
    rows = _record()
    fixed = {(r["profile"], r["seed"]): r for r in rows if r["switch"] is None}
    for r in rows:
        if r["switch"]:
            assert fixed[r["profile"], r["seed"]]["verdict"] == "accepted", (r, fixed[r["profile"], r["seed"]])


def test_a_rejected_switch_names_the_event_no_action_explains():
    for r in _record():
        if r["verdict"] == "rejected":
            assert r["kind"] and r["detail"] and 0 < r["at"] <= r["events"], r


def test_the_readme_table_is_the_records_rendering():
    text = trace_teeth.README.read_text()
    shown = text.split(trace_teeth.BEGIN)[1].split(trace_teeth.END)[0].strip()
    assert shown == trace_teeth.table(_record()).strip()
