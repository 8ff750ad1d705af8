"""lab/bench_distributed.py's figures are what they say (counts, not timings): the share of rows
whose shard changes from % 5 to % 6 is 5/6 (h mod 5 = h mod 6 for 5 residues of 30), a
Distributed INSERT costs one shard's plain replication, and SYSTEM REBALANCE's plan for the RFC's
scenario is its 64 moves."""

from lab.bench_distributed import bench_distributed, distributed_markdown, moved_share


def test_hash_resharding_moves_five_sixths_and_adding_a_shard_of_one_moves_nothing():
    assert abs(moved_share(60_000, 5, 6) - 5 / 6) < 0.01
    assert moved_share(1_000, 1, 1) == 0.0
    assert abs(moved_share(60_000, 2, 4) - 1 / 2) < 0.01   # doubling moves half


def test_the_section_compares_the_same_inserts_and_the_rfc_scenarios_moves():
    r = bench_distributed(quick=True)
    assert r["moves"] == 64 and r["selective_gb"] == 3_200 and r["copy_gb"] == 19_200
    assert r["selective_gb"] < r["rehash_gb"] < r["copy_gb"]
    shard, selective = r["shard_insert"]["existing_partition"], r["selective_insert"]["existing_partition"]
    assert shard["insert"]["requests"] == selective["insert"]["requests"]   # routing costs the INSERT nothing
    assert shard["until_settled"]["writes"] < selective["until_settled"]["writes"]   # a shard has 2 replicas to pull the entry, the table 10
    assert r["shard_insert"]["select"]["requests"] == r["selective_insert"]["select"]["requests"] == 0
    text = distributed_markdown(r, "python -m lab.bench --only distributed --quick")
    assert "| selective: SYSTEM REBALANCE (64 partition copies) | 3,200 GB | 16.7% |" in text
