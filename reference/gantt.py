"""Gantt charts of migrations: one bar per migration from CLONE start to SWITCH, in a lane per
replica (its target by default, where the CLONE's fetches run), coloured by the other end; the
step its fetches were queued is a tick, the wait from SWITCH to CLEANUP a thin line after the bar.

Input is a list of migrations as dicts {partition, src, dst, start, switch, fetch?, cleanup?}: from the
simulation (makespan.Span, seconds) or a reference run (Cluster.timeline, driver steps).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI or a server
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

LANES = ("dst", "src")


def from_spans(spans) -> list[dict]:
    """The simulation's spans as migrations (SWITCH at the end of the copy, CLEANUP at once)."""
    return [{"partition": s.partition, "src": s.src, "dst": s.dst, "start": s.start, "switch": s.end}
            for s in spans]


def from_timeline(timeline: list[dict]) -> list[dict]:
    """A reference run's Cluster.timeline (steps); migrations not switched yet are left out."""
    return [{"partition": m["partition"], "src": m["src"], "dst": m["dst"], "start": m["clone"],
             "fetch": m.get("fetch"), "switch": m["switch"], "cleanup": m.get("cleanup")}
            for m in timeline if m.get("switch") is not None]


def _rows(bars: list[dict]) -> list[int]:
    """Within a lane, the first free row for each bar (interval partitioning, by start)."""
    ends: list[float] = []
    rows = []
    for b in bars:
        row = next((i for i, e in enumerate(ends) if e <= b["start"]), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = b["switch"]
        rows.append(row)
    return rows


def draw(migrations: list[dict], path: str | Path, title: str, unit: str = "s", lane: str = "dst"):
    """Write the chart to `path` (PNG) and return the figure. One Rectangle with gid "migration"
    per migration; y tick labels are the lanes, one per replica."""
    if lane not in LANES:
        raise ValueError(f"lane must be one of {LANES} (target or source replica), not {lane!r}")
    if not migrations:
        raise ValueError("no migrations to draw (none reached SWITCH)")
    for m in migrations:
        if m["switch"] < m["start"]:
            raise ValueError(f"migration of {m['partition']} switches ({m['switch']}) before it starts ({m['start']})")
    other = "src" if lane == "dst" else "dst"
    lanes = sorted({m[lane] for m in migrations})
    colours = {r: plt.get_cmap("tab20")(i % 20) for i, r in enumerate(sorted({m[other] for m in migrations}))}
    placed = []
    base = 0.0
    ticks = []
    for r in lanes:
        bars = sorted((m for m in migrations if m[lane] == r), key=lambda m: (m["start"], m["partition"]))
        rows = _rows(bars)
        height = max(rows) + 1
        ticks.append(base + height / 2)
        placed += [(m, base + row) for m, row in zip(bars, rows)]
        base += height + 0.6
    fig, ax = plt.subplots(figsize=(11, max(3.0, 0.22 * base + 1.5)))
    for m, y in placed:
        ax.add_patch(Rectangle((m["start"], y + 0.1), m["switch"] - m["start"], 0.8, facecolor=colours[m[other]],
                               edgecolor="black", linewidth=0.3, gid="migration"))
        if m.get("fetch") is not None:
            ax.add_line(Line2D([m["fetch"]], [y + 0.5], marker="|", color="black", markersize=6, gid="fetch"))
        if m.get("cleanup") is not None:
            ax.add_line(Line2D([m["switch"], m["cleanup"]], [y + 0.5, y + 0.5], color="grey", linewidth=1,
                               gid="cleanup-wait"))
    ax.set_xlim(min(m["start"] for m in migrations),
                max(max(m["switch"], m.get("cleanup") or 0) for m in migrations) * 1.02 + 1e-9)
    ax.set_yticks(ticks, lanes)
    ax.set_ylim(0, base)
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit}): bar = CLONE start to SWITCH" +
                  ("; | = CLONE fetch queued" if any(m.get("fetch") is not None for m in migrations) else "") +
                  ("; grey = until CLEANUP" if any(m.get("cleanup") is not None for m in migrations) else ""))
    ax.set_ylabel("target replica" if lane == "dst" else "source replica")
    ax.set_title(title)
    ax.legend(handles=[Patch(color=c, label=r) for r, c in colours.items()], title="source" if lane == "dst" else "target",
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return fig


def migration_bars(fig) -> list:
    """The migration bars of a chart drawn by `draw` (for tests and checks)."""
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == "migration"]
