"""Each replica's partitions before and after REBALANCE (or REASSIGN), from a reference run: how
many each replica owns, before and after (bars), and which partitions came and went (a grid,
partitions by replicas: kept, arrived, left). PNG or SVG by the file's suffix (matplotlib).

Input: two snapshots of the assignment as {replica: [partition, ...]} (`owners_by_replica`, read
from Keeper's selective/assignments the way system.selective_assignments shows it).
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI or a server
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

KEPT, ARRIVED, LEFT = "#9aa5b1", "#2e9d4a", "#d0453b"
SUFFIXES = (".png", ".svg")


def owners_by_replica(assignment_rows: list[dict], replicas: list[str]) -> dict[str, list[str]]:
    """system.selective_assignments rows -> each replica's partitions (a replica owning none is kept)."""
    out: dict[str, list[str]] = {r: [] for r in replicas}
    for row in assignment_rows:
        for r in row["replicas"]:
            out.setdefault(r, []).append(row["partition_id"])
    return {r: sorted(ps) for r, ps in sorted(out.items())}


def _order(name: str) -> tuple:
    """Numbers as numbers: r2 before r10, 202401-2 before 202401-10."""
    return tuple((0, int(x), "") if x.isdigit() else (1, 0, x) for x in re.split(r"(\d+)", name) if x)


def draw(before: dict[str, list[str]], after: dict[str, list[str]], path: str | Path, title: str) -> dict:
    """Write the chart; return what it shows: per replica the counts before and after and the
    partitions that arrived and left."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ValueError(f"{path}: a chart is written as {' or '.join(SUFFIXES)}, by the file's suffix")
    replicas = sorted(set(before) | set(after), key=_order)
    partitions = sorted({p for ps in [*before.values(), *after.values()] for p in ps}, key=_order)
    b = {r: set(before.get(r, [])) for r in replicas}
    a = {r: set(after.get(r, [])) for r in replicas}
    shown = {r: {"before": len(b[r]), "after": len(a[r]), "arrived": sorted(a[r] - b[r]), "left": sorted(b[r] - a[r])}
             for r in replicas}
    fig, (bars, grid) = plt.subplots(2, 1, figsize=(max(6.0, 0.7 * len(replicas) + 3), 3 + 0.16 * len(partitions) + 2.5),
                                     gridspec_kw={"height_ratios": [2.5, max(2.0, 0.16 * len(partitions))]})
    xs = range(len(replicas))
    bars.bar([x - 0.2 for x in xs], [shown[r]["before"] for r in replicas], 0.4, color="#7f9cc9", label="before",
             gid="before")
    bars.bar([x + 0.2 for x in xs], [shown[r]["after"] for r in replicas], 0.4, color="#1f4e9c", label="after",
             gid="after")
    bars.set_xticks(list(xs), replicas)
    bars.set_ylabel("partitions owned")
    bars.legend(loc="upper right", fontsize=8)
    bars.set_title(title, fontsize=10)
    for x, r in enumerate(replicas):
        for p in partitions:
            y = partitions.index(p)
            colour = KEPT if p in a[r] and p in b[r] else ARRIVED if p in a[r] else LEFT if p in b[r] else None
            if colour:
                grid.add_patch(plt.Rectangle((x - 0.4, y - 0.4), 0.8, 0.8, color=colour,
                                             gid={KEPT: "kept", ARRIVED: "arrived", LEFT: "left"}[colour]))
    grid.set_xlim(-0.6, len(replicas) - 0.4)
    grid.set_ylim(len(partitions) - 0.5, -0.5)
    grid.set_xticks(list(xs), replicas)
    grid.set_yticks(range(len(partitions)), partitions, fontsize=max(4, min(8, 400 // max(1, len(partitions)))))
    grid.set_ylabel("partition")
    grid.legend(handles=[Patch(color=KEPT, label="kept"), Patch(color=ARRIVED, label="arrived (CLONE -> SWITCH)"),
                         Patch(color=LEFT, label="left (CLEANUP)")], loc="upper left", bbox_to_anchor=(1.0, 1.0),
                fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return {"replicas": replicas, "partitions": partitions, "per_replica": shown}
