"""How long migrations wait on a down replica beyond the down timeout, in racing histories: the
figures DownWaitBoundedProp's grace (checkers/invariants.py DOWN_WAIT_GRACE) is chosen from.

    python -m lab.down_wait [--seeds 0-29] [--profiles leaving,deserting] [--json OUT]

For every profile with a finite down timeout (reference/races.py), each seed at the small size
(lab/mutation_layers.SMALL, as make test and the mutation layers run) and at
lab/teeth.SIZE: the longest wait the history shows (oracle.down_waits: a span between
two snapshots both showing the migration waiting on the same down replica) minus the timeout,
and the snapshot interval it is measured with. Also usable on kept histories (--history DIR).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

from harness.cli_args import Parser, existing_dir, names, output_file, text


def waits_of(tables: dict) -> dict:
    """The history's down_timeout, per role (a Leaver waited on by CLEANUP, a CLONE's coordinator
    waited on by a take-over) its longest wait the snapshots show (oracle.down_waits: a span
    between two snapshots both showing the migration waiting on the same down replica; None:
    none seen) and that minus the timeout, and the longest gap between two snapshots."""
    from checkers.oracle import down_waits
    timeout = (tables.get("run") or [{}])[0].get("down_timeout")
    waits = down_waits(tables)
    steps = sorted({m["snapshot_step"] for m in tables.get("metadata", ())})
    out = {"down_timeout": timeout}
    for role, states in (("leaver", ("switched", "cancelling")), ("coordinator", ("clone",))):
        longest = max((w["snapshot_step"] - w["since"] for w in waits if w["state"] in states), default=None)
        out[f"{role}_wait"] = longest
        out[f"{role}_beyond"] = None if longest is None or timeout is None else longest - timeout
    out["max_gap"] = max((b - a for a, b in zip(steps, steps[1:])), default=None)
    return out


def read_history(folder: Path) -> dict:
    import pyarrow.parquet as pq
    return {f.stem: pq.read_table(f).to_pylist() for f in Path(folder).glob("*.parquet")}


def main(argv: list[str] | None = None) -> int:
    from lab.mutation_layers import SMALL
    from lab.teeth import SIZE
    from reference.races import PROFILES, racing_history
    ap = Parser(prog="python -m lab.down_wait", description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-29", type=text("a range of seeds", r"\d+(-\d+)?"))
    ap.add_argument("--profiles", type=names(PROFILES, "profile"),
                    default=",".join(n for n, p in PROFILES.items() if math.isfinite(p.down_timeout)))
    ap.add_argument("--history", action="append", type=existing_dir, default=[],
                    help="measure these history folders instead")
    ap.add_argument("--json", type=output_file)
    a = ap.parse_args(argv)
    if a.history:
        out = [{"history": str(h), **waits_of(read_history(h))} for h in a.history]
        for r in out:
            print(json.dumps(r), flush=True)
        return 0
    lo, _, hi = a.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    out = []
    for size_name, size in (("small", SMALL), ("teeth", SIZE)):
        for profile in a.profiles:
            for seed in seeds:
                tmp = Path(tempfile.mkdtemp(prefix="downwait-"))
                try:
                    run = racing_history(tmp, profile, seed, **size)
                    r = {"size": size_name, "profile": profile, "seed": seed,
                         "violations": run["oracle_invariants"], **waits_of(read_history(Path(run["history"])))}
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                out.append(r)
                print(json.dumps(r), flush=True)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    for size_name in ("small", "teeth"):
        for profile in a.profiles:
            rs = [r for r in out if r["size"] == size_name and r["profile"] == profile]
            print(f"{size_name} {profile} ({len(rs)} runs, snapshot gap up to {max((r['max_gap'] or 0) for r in rs)}, "
                  f"violations {sorted({v for r in rs for v in r['violations']})}):", flush=True)
            for role in ("leaver", "coordinator"):
                beyond = sorted(r[f"{role}_beyond"] for r in rs if r[f"{role}_beyond"] is not None)
                print(f"  {role}: {len(beyond)} runs show a wait; beyond the timeout, the longest "
                      f"{beyond[-3:][::-1]}", flush=True)
    return 0


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m lab.down_wait", main))
