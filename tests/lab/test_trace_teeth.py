"""lab/trace_teeth.py's record (trace validation's teeth, issue 36) and the tables traces/README.md
shows: every RFC switch has its row, and every switch PR102244Whole.tla reads has its row on the
PR design's run; every fixed run they were compared with was accepted; PR-F1, PR-F2 and PR-F4's
switches are rejected at the step they change; the README's tables are the record's rendering
(python -m lab.trace_teeth [--design pr102244] --record writes both)."""

import json

from lab import trace_teeth
from protocol.bugs import DESIGNS


def _record():
    return json.loads(trace_teeth.RECORD.read_text())


def _design(rows, design):
    return [r for r in rows if r.get("design", "rfc") == design]


def test_every_rfc_switch_has_a_verdict_on_its_teeth_run():
    rows = _design(_record(), "rfc")
    assert {r["switch"] for r in rows if r["switch"]} == set(DESIGNS["rfc"])
    for r in rows:
        if r["switch"]:
            assert (r["profile"], r["seed"]) == trace_teeth.run_of(r["switch"]), r
            assert r["verdict"] in ("accepted", "rejected"), r


def test_every_switch_the_pr_trace_spec_reads_has_a_verdict_on_the_pr_designs_run():
    rows = _design(_record(), "pr102244")
    switches = trace_teeth.pr_description_switches()
    assert len(switches) == 7 and {r["switch"] for r in rows if r["switch"]} == set(switches)
    for r in rows:
        if r["switch"]:
            assert (r["profile"], r["seed"]) == trace_teeth.pr_run_of(r["switch"]), r
    kinds = {r["switch"]: r["kind"] for r in rows if r["verdict"] == "rejected"}
    # the three findings whose switches change what the design writes on a rebalance
    assert kinds == {"snapshot_source_parts": "clone", "source_stops_at_switch": "drop",
                     "complete_without_rescan": "complete"}, kinds


def test_the_fixed_run_beside_each_switch_was_accepted():
    for design in DESIGNS:
        rows = _design(_record(), design)
        fixed = {(r["profile"], r["seed"]): r for r in rows if r["switch"] is None}
        for r in rows:
            if r["switch"]:
                assert fixed[r["profile"], r["seed"]]["verdict"] == "accepted", (r, fixed[r["profile"], r["seed"]])


def test_a_rejected_switch_names_the_event_no_action_explains():
    for r in _record():
        if r["verdict"] == "rejected":
            assert r["kind"] and r["detail"] and 0 < r["at"] <= r["events"], r


def test_the_readme_tables_are_the_records_rendering():
    text = trace_teeth.README.read_text()
    shown = text.split(trace_teeth.BEGIN)[1].split(trace_teeth.END)[0].strip()
    assert shown == trace_teeth.table(_record()).strip()
    pr = text.split(trace_teeth.PR_BEGIN)[1].split(trace_teeth.PR_END)[0].strip()
    assert pr.startswith(trace_teeth.table(_record(), "pr102244").strip())
    not_run = DESIGNS["pr102244"] - set(trace_teeth.pr_description_switches())
    assert all(f"| `{s}` | not run |" in pr for s in not_run) and len(not_run) == 7
