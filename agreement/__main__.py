"""`python -m agreement`: every aspect of the base protocol on a real ClickHouse and on the
reference, side by side, on one ZooKeeper server started here.

    python -m agreement                      the table on stdout
    python -m agreement --only mutations     one aspect (repeatable)
    python -m agreement --write-readme       also replace the table in agreement/README.md
    python -m agreement repro FILE [--zk H:P] a PR #102244 reproduction file on real replicas
                                             (agreement/pr102244_repro.py; its own exit statuses)

Exit status: 0 every aspect agrees or differs on purpose, 1 one disagrees, 2 bad usage, 3 no
ClickHouse or ZooKeeper can run here. CLICKHOUSE_BIN points at another server build.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from agreement.aspects import ASPECTS, BY_NAME
from agreement.compare import AGREE, DISAGREE, Result, run
from harness.cli_args import Parser, one_of

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "agreement" / "README.md"
BEGIN, END = "<!-- agreement table: made by python -m agreement --write-readme -->", "<!-- end of agreement table -->"


def _cell(text: str, limit: int = 400) -> str:
    text = text if len(text) <= limit else text[:limit] + "..."
    return "<code>" + text.replace("|", "&#124;").replace("\n", "⏎").replace("<", "&lt;") + "</code>"


def table(results: list[Result], version: str) -> str:
    lines = [f"| aspect | real ClickHouse {version}, verbatim | reference | compared | verdict |",
             "|---|---|---|---|---|"]
    for r in results:
        ref_log = r.reference["log"]
        same = r.real["log"] == ref_log
        verdict = {AGREE: "agrees", DISAGREE: f"**disagrees** on {', '.join(r.differing)}"}.get(
            r.verdict, f"differs on purpose ({', '.join(r.differing)}): {r.aspect.differs}")
        note = f" ({r.aspect.note})" if r.aspect.note else ""
        lines.append(f"| {r.aspect.title}{note} | {_cell(r.example) if r.example else '(log empty)'} | "
                     f"{'the same entries' if same else _cell('; '.join(ref_log[-4:]))} | "
                     f"{', '.join(r.aspect.compare)} | {verdict} |")
    return "\n".join(lines)


def write_readme(text: str) -> None:
    body = README.read_text()
    if BEGIN not in body or END not in body:
        raise SystemExit(f"error: {README} has no agreement table markers ({BEGIN!r} ... {END!r})")
    head, rest = body.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["repro"]:   # the one subcommand; the aspects stay the default, as before
        from agreement.pr102244_repro import main as repro_main
        return repro_main(argv[1:])
    ap = Parser(prog="python -m agreement", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", metavar="ASPECT", type=one_of(BY_NAME, "aspect"),
                    help=f"one of {', '.join(BY_NAME)}")
    ap.add_argument("--write-readme", action="store_true", help=f"replace the table in {README.relative_to(ROOT)}")
    a = ap.parse_args(argv)
    from harness.clickhouse import ClickHouseCluster, ClickHouseUnavailable
    from harness.zookeeper import ZooKeeperServer, ZooKeeperUnavailable
    from protocol.keeper.zookeeper import ZooKeeperKeeper
    aspects = [BY_NAME[n] for n in a.only] if a.only else ASPECTS
    try:
        with ZooKeeperServer() as zk, ClickHouseCluster(zk.hosts, ["r1", "r2"], session_timeout_ms=3000) as ch, \
                tempfile.TemporaryDirectory(prefix="agreement-") as folder:
            keeper = ZooKeeperKeeper(zk.hosts)
            results = []
            for aspect in aspects:
                print(f"  {aspect.name} ...", file=sys.stderr, flush=True)
                results.append(run(aspect, ch, keeper, lambda: ZooKeeperKeeper(zk.hosts), Path(folder)))
                print(f"  {aspect.name}: {results[-1].verdict}", file=sys.stderr, flush=True)
            keeper.close()
            version = ch.version()
    except (ClickHouseUnavailable, ZooKeeperUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    text = table(results, version)
    print(text)
    if a.write_readme:
        write_readme(text)
    return 1 if any(r.verdict == DISAGREE for r in results) else 0


if __name__ == "__main__":
    from harness.cli_args import run_main
    # The contract's Ctrl-C (130, one line) and internal errors (3, the traceback in a log).
    sys.exit(run_main("python -m agreement", main))
