"""TLC's throughput on the spec of two commits, side by side: states generated and distinct states
found in the first minute of a model's breadth-first search, one worker, the two specs in turn.

    python -m lab.bench_tlc_throughput --before 2d45843 [--model MCFull] [--seconds 60] [--pairs 2]

A rewrite of the spec's operators (issue 42) must show up here and leave the state counts alone
(`make check-spec` compares those with spec/models.json). The two specs run in turn, never
together, and each pair alternates its order, so a machine busy for a while slows both alike; the
figure that compares is the ratio of the two within one run. The `before` spec is the commit's
SelectiveReplication.tla and MCSelectiveReplication.tla, checked against today's cfg (the cfg must
name constants both define).

Why the first minute and not a whole search: the full models take tens of minutes to exhaust
(`MCFullOnePartition`) or never finish (`MCFull`), and a breadth-first search's rate changes with
its depth; the same minute of the same search is the fair comparison. The count is TLC's own
progress report, printed once a minute: the one `--seconds` after its first.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.cli_args import Parser, int_at_least, one_of, text
from harness.tlc.runner import run_tlc

ROOT = Path(__file__).resolve().parents[1]
RFC = ROOT / "spec" / "rfc"
MODULES = ("SelectiveReplication.tla", "MCSelectiveReplication.tla")
_PROGRESS = re.compile(r"([\d,]+) states generated .*?([\d,]+) distinct states found")


def spec_at(rev: str, into: Path) -> Path:
    """The two modules as they were at `rev`, in `into`; returns the MC module's path."""
    for name in MODULES:
        text = subprocess.run(["git", "show", f"{rev}:spec/rfc/{name}"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout
        (into / name).write_text(text)
    return into / MODULES[1]


def first_minute(mc: Path, cfg: Path, seconds: int) -> dict:
    """States generated and distinct at TLC's last progress report within `seconds`, one worker."""
    last: list[str] = []
    # TLC reports once as the search starts and then once a minute: the report `seconds` after
    # the first one falls a few seconds past `seconds` of the process's life.
    r = run_tlc(mc, cfg, workers=1, check_deadlock=False, timeout_s=seconds + 15, progress=last.append)
    reports = [m for m in (_PROGRESS.search(t) for t in last) if m]
    if not reports:
        raise RuntimeError(f"TLC printed no progress on {cfg.name} in {seconds} s ({r.outcome}; log {r.log_path})")
    generated, distinct = (int(g.replace(",", "")) for g in reports[-1].groups())
    return {"generated": generated, "distinct": distinct, "outcome": r.outcome}


def compare(before: str, models: list[str], seconds: int, pairs: int, log=print) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="tlc-before-") as d:
        old = spec_at(before, Path(d))
        for model in models:
            cfg = RFC / f"{model}.cfg"
            runs = {"before": [], "after": []}
            for i in range(pairs):
                order = [("before", old), ("after", RFC / MODULES[1])]
                for label, mc in (order if i % 2 == 0 else order[::-1]):
                    # the cfg beside the module: TLC resolves it against the spec's folder
                    local = mc.parent / cfg.name
                    if local != cfg:
                        local.write_text(cfg.read_text())
                    runs[label].append(first_minute(mc, local, seconds))
                    log(f"{model} {label}: {runs[label][-1]}")
            row = {"model": model}
            for label, rs in runs.items():
                row[label] = {k: statistics.median(r[k] for r in rs) for k in ("generated", "distinct")}
            row["ratio_generated"] = round(row["after"]["generated"] / row["before"]["generated"], 2)
            row["ratio_distinct"] = round(row["after"]["distinct"] / row["before"]["distinct"], 2)
            rows.append(row)
    return rows


def markdown(rows: list[dict], before: str, seconds: int, pairs: int) -> str:
    lines = [f"| model | states generated, {before} | this checkout | ratio | distinct states, {before} | this checkout | ratio |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        b, a = r["before"], r["after"]
        lines.append(f"| `{r['model']}` | {b['generated']:,.0f} | {a['generated']:,.0f} | **{r['ratio_generated']}** | "
                     f"{b['distinct']:,.0f} | {a['distinct']:,.0f} | **{r['ratio_distinct']}** |")
    return (f"TLC's first {seconds} s of each model's search, one worker, median of {pairs} runs of each spec in "
            "turn:\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.bench_tlc_throughput", description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, type=text("a git revision", r"[\w./~^@{}-]+"),
                    help="the commit whose spec to compare with the checkout's")
    ap.add_argument("--model", action="append", type=one_of((p.stem for p in RFC.glob("MC*.cfg")), "model of spec/rfc"),
                    help="a cfg of spec/rfc by its name (repeatable; default MCFull)")
    ap.add_argument("--seconds", type=int_at_least(1), default=60)
    ap.add_argument("--pairs", type=int_at_least(1), default=2)
    a = ap.parse_args(argv)
    models = a.model or ["MCFull"]
    try:
        subprocess.run(["git", "rev-parse", "--verify", f"{a.before}^{{commit}}"], cwd=ROOT, check=True,
                       capture_output=True)
    except subprocess.CalledProcessError:
        print(f"bench_tlc_throughput: no such commit: {a.before}", file=sys.stderr)
        return 2
    rows = compare(a.before, models, a.seconds, a.pairs, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(markdown(rows, a.before, a.seconds, a.pairs))
    return 0


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m lab.bench_tlc_throughput", main))
