"""The baseline seed 000 starts from ("today": a Distributed table over manually sharded
ReplicatedMergeTree), beside selective replication, for cost (issue 40): Keeper requests per
INSERT and per SELECT, and the bytes moved to add two nodes to ten.

- Keeper: measured on the reference. A Distributed INSERT reaches one shard's replicated table
  (the Distributed engine itself writes no Keeper node), so its cost is plain replication on a
  shard of two replicas; selective replication's is an INSERT on ten replicas at RF 2.
- Bytes: the RFC's scenario (192 partitions x 50 GB, RF 2, 10 -> 12 replicas). Selective:
  SYSTEM REBALANCE's plan (protocol/rebalance.py), each move one partition's copy. Manual shards:
  5 shards of 2 replicas become 6; ClickHouse has no online resharding, so the rows either go to a
  new cluster by INSERT ... SELECT (everything copied, on every replica of the new shards), or
  those whose shard changes under `sipHash64(key) % shards` are moved, counted here on generated
  keys (the share that stays is 1/6 for 5 -> 6 shards: h mod 5 = h mod 6 for 5 residues of 30).
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from pathlib import Path

PARTITIONS, PARTITION_GB, RF, OLD, NEW = 192, 50, 2, 10, 2


def _shard(key: int, shards: int) -> int:
    """A stable 64-bit hash of the key (the sharding expression's sipHash64 stands in), mod shards."""
    return int.from_bytes(hashlib.blake2b(key.to_bytes(8, "little"), digest_size=8).digest(), "little") % shards


def moved_share(keys: int, old_shards: int, new_shards: int, seed: int = 1) -> float:
    """The share of `keys` random keys whose shard changes from `% old_shards` to `% new_shards`."""
    rng = random.Random(seed)
    sample = [rng.getrandbits(63) for _ in range(keys)]
    return sum(_shard(k, old_shards) != _shard(k, new_shards) for k in sample) / keys


def bench_distributed(quick: bool = False) -> dict:
    from lab.insert_costs import insert_costs
    from protocol.keeper import MemoryEnsemble
    from protocol.rebalance import plan_rebalance
    from reference.scenarios import growth

    with tempfile.TemporaryDirectory() as d:
        shard = insert_costs(MemoryEnsemble().connect, Path(d), 2, "plain")
        selective = insert_costs(MemoryEnsemble().connect, Path(d), OLD, "selective")
    assignments, names = growth(OLD, NEW, PARTITIONS, RF)
    moves = len(plan_rebalance(assignments, names))
    logical_gb = PARTITIONS * PARTITION_GB
    keys = 20_000 if quick else 200_000
    share = moved_share(keys, OLD // RF, (OLD + NEW) // RF)
    return {"shard_insert": shard, "selective_insert": selective, "moves": moves, "keys": keys,
            "moved_share": round(share, 4), "selective_gb": moves * PARTITION_GB,
            "rehash_gb": round(share * logical_gb * RF), "copy_gb": logical_gb * RF, "logical_gb": logical_gb}


def distributed_markdown(r: dict, command: str) -> str:
    s, p = r["selective_insert"], r["shard_insert"]
    rows = [("Distributed over 5 shards x 2 (plain ReplicatedMergeTree per shard)", p),
            ("selective replication, RF 2 of 10", s)]
    lines = ["## Selective replication beside a Distributed table over manual shards", "",
             f"Produced by `{command}`. The baseline seed 000 starts from: 10 replicas as 5 shards of 2 "
             "behind a Distributed table, against one selective table on the 10 at RF 2 "
             "(lab/bench_distributed.py says how each figure is obtained).", "",
             "| layout | INSERT requests, existing partition | its multi entries | writes until settled | "
             "SELECT requests |", "|---|---|---|---|---|"]
    for name, m in rows:
        e = m["existing_partition"]
        lines.append(f"| {name} | {e['insert']['requests']} | {e['insert']['entries_in_multi']} | "
                     f"{e['until_settled']['writes']} | {m['select']['requests']} |")
    lines += ["", f"A new partition costs selective replication its allocation "
              f"({s['new_partition']['insert']['requests']} requests); a Distributed table none (the shard is a "
              f"hash of the row, no Keeper state).", "",
              f"Adding 2 nodes to 10 (the RFC's scenario: {PARTITIONS} partitions x {PARTITION_GB} GB, RF {RF}, "
              f"{r['logical_gb']:,} GB of data, {r['logical_gb'] * RF:,} GB stored):", "",
              "| how | bytes written on the new and remaining nodes | share of the stored data |", "|---|---|---|",
              f"| selective: SYSTEM REBALANCE ({r['moves']} partition copies) | {r['selective_gb']:,} GB | "
              f"{r['selective_gb'] / (r['logical_gb'] * RF):.1%} |",
              f"| manual shards, 5 -> 6, rows whose `hash % shards` changes moved ({r['moved_share']:.1%} of "
              f"{r['keys']:,} keys) | {r['rehash_gb']:,} GB | {r['rehash_gb'] / (r['logical_gb'] * RF):.1%} |",
              f"| manual shards, a new 6-shard cluster filled by INSERT ... SELECT | {r['copy_gb']:,} GB | 100% |",
              "", "Selective replication copies whole partitions to the new replicas online (CLONE, SWITCH, "
              "CLEANUP) and leaves the rest where it is; resharding by hash rewrites most rows, through a "
              "process outside ClickHouse. The price is the allocation's Keeper requests on a partition's "
              "first INSERT and a SELECT that routes by the map (0 Keeper requests either way).", ""]
    return "\n".join(lines)
