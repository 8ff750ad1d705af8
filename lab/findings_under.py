"""Each finding's failing models under another base protocol (issue 36): the ClickHouse version
(`18.16`: BaseProtocol <- V18_16, only the leader selects merges and mutations) or insert_quorum
(`quorum`: InsertQuorum <- QuorumOfRF, the ack waits for RF replicas to hold the block). Every
model of spec/models.json that violates, on SelectiveReplication, is checked again with the
definition replaced; the table says whether the finding still shows there, shows as another
violation, or is closed (the model holds).

    python -m lab.findings_under --under quorum [--only MODEL ...] [--jobs 2] [--record]

--record writes lab/findings_under.json (this run's rows replacing the record's of the same
model and setting) and the table in spec/FINDINGS.md between its markers; tests/lab/
test_findings_under.py holds FINDINGS.md to the record. Under 18.16 the models run without
SYMMETRY: its leader is a CHOOSE over the replicas, which a permutation does not respect. About
15 min for each setting on 2 cores (the full models end by their timeout).
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.cli_args import Parser, positive_float
from harness import check_models
from lab.records import merge_record, replace_marked

ROOT = Path(__file__).resolve().parents[1]
RECORD = Path(__file__).with_name("findings_under.json")
FINDINGS = ROOT / "spec" / "FINDINGS.md"
BEGIN, END = "<!-- findings-under:begin -->", "<!-- findings-under:end -->"
# setting -> (the cfg line that replaces the definition, whether the model keeps its SYMMETRY)
UNDER = {"quorum": ("    InsertQuorum <- QuorumOfRF", True),
         "18.16": ("    BaseProtocol <- V18_16", False)}
NAMES = {"quorum": "insert_quorum = RF", "18.16": "18.16's leader"}


def failing_models() -> list[dict]:
    """The models that violate on the core spec and do not already name a setting of UNDER."""
    out = []
    for m in check_models.load_manifest():
        if m["spec"] != "MCSelectiveReplication.tla" or m["expect"] != "violates":
            continue
        cfg = check_models.spec_file(m["config"]).read_text()
        if not any(line.split("<-")[0] in cfg for line, _ in UNDER.values()):
            out.append(m)
    return out


def judge(model: dict, under: str, timeout_s: float) -> dict:
    """Check the model with the setting's definition replaced; its verdict against the finding's."""
    from harness.tlc.runner import HOLDS, TIMEOUT, run_tlc

    line, keep_symmetry = UNDER[under]
    src = check_models.spec_file(model["config"])
    text = []
    for cfg_line in src.read_text().splitlines():
        if cfg_line.startswith("SYMMETRY") and not keep_symmetry:
            continue
        text.append(cfg_line)
        if cfg_line.startswith("    Bugs ="):   # the last constant gen_cfgs writes before any override
            text.append(line)
    cfg = src.with_name(f"_under_{under.replace('.', '_')}_{model['name']}.cfg")   # TLC reads cfgs beside the spec
    cfg.write_text("\n".join(text) + "\n")
    try:
        res = run_tlc(check_models.spec_file(model["spec"]), cfg, workers=1, check_deadlock=False, timeout_s=timeout_s)
    finally:
        cfg.unlink()
    was = model.get("invariant") or model.get("property")
    if res.outcome == HOLDS:
        verdict = "closed"
    elif res.outcome == TIMEOUT:
        verdict = f"no verdict in {timeout_s:.0f} s"
    elif check_models.judge(model, res) == []:   # the violation the manifest records for it
        verdict = "still shows"
    else:
        verdict = f"other: {res.summary()}"
    return {"model": model["name"], "under": under, "finding": model.get("finding"), "violates": was,
            "verdict": verdict, "distinct_states": res.distinct_states, "depth": res.depth,
            "seconds": round(res.duration_s, 1)}


def table(rows: list[dict]) -> str:
    """The FINDINGS.md table: a model per line, a column per setting run."""
    unders = [u for u in UNDER if any(r["under"] == u for r in rows)]
    by = {(r["model"], r["under"]): r for r in rows}
    finding = {r["model"]: r["finding"] for r in rows}
    # F2 before F10, the broken variants (no finding) last
    models = sorted(finding, key=lambda n: (int(finding[n][1:]) if finding[n] else 999, n))
    head = "| finding | model (violates) | " + " | ".join(NAMES[u] for u in unders) + " |"
    lines = [head, "|" + "---|" * (2 + len(unders))]
    for n in models:
        first = next(by[(n, u)] for u in unders if (n, u) in by)
        cells = []
        for u in unders:
            r = by.get((n, u))
            cells.append("not run" if r is None else
                         r["verdict"] + (f" ({r['distinct_states']:,} states)" if r["verdict"] == "closed" else ""))
        lines.append(f"| {first['finding'] or '(variant)'} | `{n}` ({first['violates']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_findings(rows: list[dict]) -> None:
    replace_marked(FINDINGS, BEGIN, END, table(rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.findings_under", description=__doc__.split("\n\n")[0])
    ap.add_argument("--under", choices=sorted(UNDER), action="append", required=True)
    models = failing_models()
    ap.add_argument("--only", action="append", choices=[m["name"] for m in models], metavar="MODEL")
    ap.add_argument("--jobs", type=int, choices=range(1, 9), default=2, metavar="1-8")
    ap.add_argument("--timeout", type=positive_float, default=900.0, help="seconds per model (default 900)")
    ap.add_argument("--record", action="store_true", help="write lab/findings_under.json and FINDINGS.md's table")
    a = ap.parse_args(argv)
    work = [(m, u) for u in a.under for m in models if not a.only or m["name"] in a.only]
    rows = []
    with ThreadPoolExecutor(a.jobs) as pool:
        for r in pool.map(lambda w: judge(*w, a.timeout), work):
            rows.append(r)
            print(f"{r['model']} under {r['under']}: {r['verdict']}, {r['seconds']} s", flush=True)
    if a.record:
        write_findings(merge_record(RECORD, rows, key=lambda r: (r["model"], r["under"])))
    return 0


if __name__ == "__main__":
    from harness.cli_args import run_main
    sys.exit(run_main("python -m lab.findings_under", main))   # Ctrl-C: 130 and one line, as every command
