"""`make bench`, section tlc: the full model's figures, as `check_models --record` measured them.

Exhausting the full model takes many minutes, so `make bench` does not run it again: it writes
the state counts, depths and times the last recorded run left in spec/models.json (the run that
`make check` compares its distinct-state count with), and the command that records them anew.
"""

from __future__ import annotations

from harness import check_models

# The models of the full protocol: the exhaustive one, the broken variants it must catch, and
# the two-partition model that is still only simulated.
FULL_MODELS = ("MCFullOnePartition", "MCFullOnePartition_insert_without_assignment_check",
               "MCFullOnePartition_switch_without_catchup", "MCFull", "MCFull_serve_before_map_loaded")


def bench_tlc() -> dict:
    by_name = {m["name"]: m for m in check_models.load_manifest()}
    return {"models": [by_name[n] for n in FULL_MODELS if n in by_name]}


def _how(m: dict) -> str:
    if m.get("simulate"):
        return f"simulation, depth {m['simulate']['depth']}, {m['simulate']['seconds']} s"
    return "exhaustive (BFS)"


def _result(m: dict) -> str:
    if "recorded_seconds" not in m:
        return "not recorded yet"
    if m.get("simulate"):
        verdict = "no violation" if m["expect"] == "holds" else f"violates {m['invariant']}"
        return f"{verdict}; {m.get('states_generated', 0):,} states generated"
    if m["expect"] == "holds":
        return f"holds; {m['distinct_states']:,} distinct states, depth {m['depth']}"
    return f"violates {m['invariant']}; trace of {m['trace_length']} states"


def tlc_markdown(r: dict) -> str:
    rows = ["| model | how | result | time |", "|---|---|---|---|"]
    for m in r["models"]:
        rows.append(f"| `{m['name']}` | {_how(m)} | {_result(m)} | {m.get('recorded_seconds', '-')} s |")
    attempts = [f"- `{m['name']}`: {m['exhaustive_attempt']}" for m in r["models"] if m.get("exhaustive_attempt")]
    notes = [f"- `{m['name']}`: {m['recorded_note']}" for m in r["models"] if m.get("recorded_note")]
    names = " ".join(f"--only {m['name']}" for m in r["models"])
    return "\n".join([
        "## TLC: the full model",
        "",
        "Recorded by `python -m harness.check_models " + names + " --record` (2 workers; the machine's",
        "2 cores are shared, so times vary up to 3x); `make check-thorough` reruns them (one worker each, two",
        "at a time) and fails if a distinct-state count drifts. `make bench` copies the recorded figures",
        "from `spec/models.json`.",
        "",
        *rows,
        "",
        *(["How some figures were recorded:", "", *notes, ""] if notes else []),
        *(["Exhaustive attempts that did not finish:", "", *attempts, ""] if attempts else []),
    ])
