"""Run an aspect on both systems and compare what it names, field by field."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from agreement.aspects import Aspect
from agreement.clickhouse_side import ClickHouseSide
from agreement.reference_side import ReferenceSide
from agreement.tree import Tree
from harness.clickhouse import ClickHouseCluster
from protocol.keeper import Keeper

AGREE, ON_PURPOSE, DISAGREE = "agree", "differs on purpose", "DISAGREES"


def masked(text: str) -> str:
    """An entry's text with what is not compared masked: the time, the hash of a block id, and
    what REPLACE_RANGE says of the other table (its name, its parts' names and checksums)."""
    text = re.sub(r"create_time: .*\n", "create_time: *\n", text)
    text = re.sub(r"(from_table|source_parts|part_checksums): .*\n", r"\1: *\n", text)
    return re.sub(r"(block_id: [^_\n]+)_[^\n]*", r"\1_*", text)


def fields(tree: Tree, rows: dict[str, list[str]]) -> dict:
    return {
        "log": tree.log,
        "log_without_alter": [e for e in tree.log if not e.startswith("ALTER_METADATA")],
        "text": [masked(t) for t in tree.raw_log],
        "blocks": tree.blocks,
        "block_numbers": tree.block_numbers,
        "mutations": tree.mutations,
        "parts": {r: x.parts for r, x in tree.replicas.items()},
        "pointers": {r: x.log_pointer for r, x in tree.replicas.items()},
        "lost": {r: x.is_lost for r, x in tree.replicas.items()},
        "trimmed": tree.log_numbers[:1],
        "rows": rows,
    }


@dataclass
class Result:
    aspect: Aspect
    real: dict
    reference: dict
    differing: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)   # the real log's entries, verbatim

    @property
    def example(self) -> str:
        return self.texts[-1] if self.texts else ""

    @property
    def verdict(self) -> str:
        if not self.differing:
            return AGREE
        return ON_PURPOSE if self.aspect.differs else DISAGREE


def run(aspect: Aspect, cluster: ClickHouseCluster, keeper: Keeper, connect, folder: Path) -> Result:
    """The aspect's scenario on fresh tables of both systems (every ClickHouse replica up first)."""
    for r in cluster.names:
        if cluster.pid(r) is None:
            cluster.start(r)
    tag = uuid.uuid4().hex[:8]
    real = ClickHouseSide(cluster, keeper, f"t_{tag}", f"/clickhouse/tables/real_{tag}", aspect.settings)
    real.create()
    ref = ReferenceSide(connect, folder / tag, f"/clickhouse/tables/ref_{tag}", aspect.settings, tuple(cluster.names))
    try:
        for step in aspect.steps:
            real.apply(step)
            ref.apply(step)
        up = sorted(real.up)
        a = fields(real.tree(), {r: real.rows(r) for r in up})
        b = fields(ref.tree(), {r: ref.rows(r) for r in up})
    finally:
        ref.close()
    differing = [f for f in aspect.compare if a[f] != b[f]]
    return Result(aspect, a, b, differing, real.tree().raw_log)
