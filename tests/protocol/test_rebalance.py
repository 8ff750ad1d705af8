import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from rebalance_oracle import min_moves

from protocol.assignment import Assignment, read_assignment
from protocol.layout import Layout
from protocol.migration import migrations_rows
from protocol.placement import Placement
from protocol.rebalance import (RebalanceError, apply_moves, bands, is_balanced, lower_bound, plan_rebalance,
                                system_rebalance, targets)
from protocol.registration import create_table_znodes, register_replica
from protocol.scheduler import Schedule


def apply(assignments, moves):
    out = {p: set(o) for p, o in assignments.items()}
    for p, src, dst in moves:
        assert src in out[p] and dst not in out[p], (p, src, dst)
        out[p] = (out[p] - {src}) | {dst}
    return out


def loads_of(assignments, replicas):
    return {r: sum(r in o for o in assignments.values()) for r in replicas}


def test_rfc_example_two_new_nodes_join_ten():
    """10 replicas, 96 partitions at RF 2 (192 ownerships) evenly spread; 2 replicas join."""
    old = [f"replica{i}" for i in range(1, 11)]
    pairs = itertools.cycle(list(itertools.combinations(old, 2)))
    assignments = {f"2024{m:02d}-{b}": next(pairs) for m in range(1, 7) for b in range(16)}
    replicas = old + ["replica11", "replica12"]
    moves = plan_rebalance(assignments, replicas)
    after = loads_of(apply(assignments, moves), replicas)
    assert set(after.values()) == {16}                   # 192 / 12 each
    assert len(moves) == 32                              # the minimum: the two new replicas' deficit
    assert {dst for _, _, dst in moves} == {"replica11", "replica12"}


def test_random_clusters_end_balanced_with_the_fewest_moves():
    rng = random.Random(7)
    for _ in range(30):
        replicas = [f"r{i}" for i in range(rng.randint(3, 9))]
        rf = rng.randint(1, 3)
        assignments = {f"{p}": tuple(rng.sample(replicas, rf)) for p in range(rng.randint(1, 40))}
        loads = loads_of(assignments, replicas)
        want = targets(loads)
        moves = plan_rebalance(assignments, replicas)
        after = loads_of(apply(assignments, moves), replicas)
        assert max(after.values()) - min(after.values()) <= 1
        assert len(moves) == sum(max(0, loads[r] - want[r]) for r in replicas)


def test_balanced_cluster_needs_no_moves():
    assert plan_rebalance({"1": ("a", "b"), "2": ("c", "a"), "3": ("b", "c")}, ["a", "b", "c"]) == []


def test_infeasible_and_bad_input_are_named():
    with pytest.raises(RebalanceError, match="not in the replica list"):
        plan_rebalance({"1": ("a", "z")}, ["a", "b"])
    with pytest.raises(RebalanceError, match="no plan"):
        # 'c' would need a partition it does not own, but the only movable partition is busy
        plan_rebalance({"1": ("a", "b"), "2": ("a", "b")}, ["a", "b", "c"], busy={"1", "2"})


LAYOUT = Layout("/t")


def test_system_rebalance_starts_moves_up_to_the_limit(connect):
    admin = connect()
    create_table_znodes(admin, LAYOUT, 2)
    for r in ("r1", "r2", "r3", "r4"):
        register_replica(connect(), LAYOUT, r)
    for p in range(6):
        admin.create(LAYOUT.assignment(f"202401-{p}"), Assignment(("r1", "r2")).encode())
    started = system_rebalance(admin, LAYOUT, ["r1", "r2", "r3", "r4"], max_concurrent=2)
    assert len(started) == 2 and len(migrations_rows(admin, LAYOUT)) == 2
    for p, _, dst in started:
        assert read_assignment(admin, LAYOUT, p).target == dst
    assert len(system_rebalance(admin, LAYOUT, ["r1", "r2", "r3", "r4"], max_concurrent=2)) == 0  # limit reached


def test_rebalance_counts_a_clone_in_flight_as_switched(connect):
    """FINDINGS F13: p1 is in CLONE from r1 to r3. Counted by today's owners r3 holds nothing and
    REBALANCE would send p2 to r3 too; counted as if the CLONE had switched, loads are 1, 2, 1
    and nothing moves."""
    from protocol.migration import admin_reassign
    admin = connect()
    create_table_znodes(admin, LAYOUT, 2)
    for r in ("r1", "r2", "r3"):
        register_replica(connect(), LAYOUT, r)
    for p in ("202401-0", "202401-1"):
        admin.create(LAYOUT.assignment(p), Assignment(("r1", "r2")).encode())
    admin_reassign(admin, LAYOUT, "202401-0", "r3", "r1")
    assert system_rebalance(admin, LAYOUT, ["r1", "r2", "r3"], max_concurrent=2) == []
    assert read_assignment(admin, LAYOUT, "202401-1").target is None


# --- the planner against its lower bound and an exact min-cost flow ---------------------------


@st.composite
def clusters(draw, busy=True, domains=False, capacities=False, max_partitions=24):
    """(assignments, replicas, busy, placement): owners in distinct domains when domains are drawn."""
    n = draw(st.integers(2, 7))
    replicas = [f"r{i}" for i in range(n)]
    dom = {r: "abcd"[draw(st.integers(0, min(3, n - 1)))] for r in replicas} if domains else None
    groups = sorted({dom[r] for r in replicas}) if dom else replicas
    rf = draw(st.integers(1, min(3, len(groups))))
    assignments = {}
    for i in range(draw(st.integers(0, max_partitions))):
        if dom:
            chosen = draw(st.permutations(groups))[:rf]
            assignments[f"p{i:02d}"] = tuple(sorted(draw(st.sampled_from([r for r in replicas if dom[r] == d]))
                                                    for d in chosen))
        else:
            assignments[f"p{i:02d}"] = tuple(sorted(draw(st.permutations(replicas))[:rf]))
    moving = draw(st.sets(st.sampled_from(sorted(assignments)))) if busy and assignments else set()
    caps = {r: draw(st.integers(1, 4)) for r in replicas} if capacities else None
    return assignments, replicas, moving, Placement(domains=dom, capacities=caps)


def check_plan(assignments, replicas, busy, placement, moves):
    """The plan is legal step by step, moves nothing busy, and ends balanced."""
    after = apply_moves(assignments, moves, placement)  # raises on a move onto an owner or into a domain twice
    assert not {p for p, _, _ in moves} & set(busy)
    assert is_balanced(loads_of(after, replicas), bands(assignments, replicas, placement))
    if placement.domains:
        for owners in after.values():
            assert len({placement.domains[o] for o in owners}) == len(owners)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(busy=False))
def test_with_every_partition_movable_the_plan_has_exactly_lower_bound_moves(case):
    """The pigeonhole argument of rebalance.py: a direct improving move always exists, so the
    plan is as short as the bound. Equal capacities only: with unequal ones a replica over its
    share may hold fewer partitions than one under it, all of them owned there too (r4: 3 of
    band 1-2, r2: the same 3 of band 4-4 needs two moves, not one; Hypothesis found it), and the
    next test holds the plan to the exact min-cost flow instead."""
    assignments, replicas, busy, placement = case
    moves = plan_rebalance(assignments, replicas, busy, placement)
    check_plan(assignments, replicas, busy, placement, moves)
    assert len(moves) == lower_bound(loads_of(assignments, replicas), bands(assignments, replicas, placement))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(busy=True, domains=True, capacities=True), st.booleans(), st.booleans())
def test_plan_is_as_short_as_the_min_cost_flow_or_refused_when_it_has_none(case, use_domains, use_capacities):
    assignments, replicas, busy, placement = case
    placement = Placement(domains=placement.domains if use_domains else None,
                          capacities=placement.capacities if use_capacities else None)
    best = min_moves(assignments, replicas, busy, placement)
    if best is None:
        with pytest.raises(RebalanceError, match="no plan"):
            plan_rebalance(assignments, replicas, busy, placement)
        return
    moves = plan_rebalance(assignments, replicas, busy, placement)
    check_plan(assignments, replicas, busy, placement, moves)
    assert len(moves) == best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=12))
def test_lower_bound_is_the_sorted_formula_for_equal_shares(loads_list):
    replicas = [f"r{i}" for i in range(len(loads_list))]
    loads = dict(zip(replicas, loads_list))
    n = sum(loads_list)
    b, e = divmod(n, len(replicas))
    ordered = sorted(loads_list, reverse=True)
    formula = sum(max(0, x - (b + 1 if i < e else b)) for i, x in enumerate(ordered))
    band = {r: (b, b + (1 if e else 0)) for r in replicas}
    assert lower_bound(loads, band) == formula


def naive_greedy(assignments, replicas, busy):
    """The 25-line greedy: most loaded to least loaded, the first partition it may take; None when stuck."""
    owners = {p: set(o) for p, o in assignments.items()}
    moves = []
    while True:
        loads = loads_of(owners, replicas)
        src = max(replicas, key=loads.get)  # ties: the first by name
        dst = min(replicas, key=loads.get)
        if loads[src] - loads[dst] <= 1:
            return moves
        p = next((p for p in sorted(owners) if src in owners[p] and dst not in owners[p] and p not in busy), None)
        if p is None:
            return None
        owners[p] = (owners[p] - {src}) | {dst}
        moves.append((p, src, dst))


def test_stuck_greedy_needs_an_augmenting_swap_and_the_plan_takes_it():
    """c and d hold 3, b none, band [2, 2]: LB = 2. The greedy moves p1 from c to b; then d's only
    movable partition, p1, is on b already: stuck. Re-routing (c gives p3 instead, d gives p1)
    reaches the bound: the augmenting path d -> b -> c undoes c's first choice."""
    assignments = {"p0": ("a", "d"), "p1": ("c", "d"), "p2": ("c", "d"), "p3": ("a", "c")}
    busy = {"p0", "p2"}
    replicas = ["a", "b", "c", "d"]
    assert naive_greedy(assignments, replicas, busy) is None
    moves = plan_rebalance(assignments, replicas, busy)
    check_plan(assignments, replicas, busy, Placement(), moves)
    assert len(moves) == 2 == lower_bound(loads_of(assignments, replicas), bands(assignments, replicas))
    assert sorted(moves) == [("p1", "d", "b"), ("p3", "c", "b")]


def test_most_loaded_replica_whose_partitions_the_under_loaded_one_owns_needs_a_detour():
    """b holds 3 (p0, p2 migrating), d holds 1 and owns p3, b's only movable partition: no direct
    move exists and the bound (1) is not reachable; the fewest moves (2, by the min-cost flow)
    go through a: b gives p3 to a, a gives p1 to d. Without busy partitions this cannot happen:
    b holding more than d means b holds a partition d does not."""
    assignments = {"p0": ("a", "b"), "p1": ("a", "c"), "p2": ("b", "c"), "p3": ("b", "d")}
    busy = {"p0", "p2"}
    replicas = ["a", "b", "c", "d"]
    assert naive_greedy(assignments, replicas, busy) is None
    assert lower_bound(loads_of(assignments, replicas), bands(assignments, replicas)) == 1
    assert min_moves(assignments, replicas, busy) == 2
    moves = plan_rebalance(assignments, replicas, busy)
    check_plan(assignments, replicas, busy, Placement(), moves)
    assert moves == [("p3", "b", "a"), ("p1", "a", "d")]


def test_first_move_goes_from_a_most_loaded_to_a_least_loaded_replica():
    """The spec's AdminRebalance: a started move is from a most loaded replica to a least loaded one."""
    rng = random.Random(3)
    for _ in range(50):
        replicas = [f"r{i}" for i in range(rng.randint(3, 8))]
        assignments = {f"p{i}": tuple(rng.sample(replicas, 2)) for i in range(rng.randint(1, 40))}
        moves = plan_rebalance(assignments, replicas)
        loads = loads_of(assignments, replicas)
        for p, src, dst in moves:
            assert loads[src] == max(loads.values()) and loads[dst] == min(loads.values())
            assert loads[src] > loads[dst] + 1
            loads[src] -= 1
            loads[dst] += 1


def test_plan_spreads_moves_over_distinct_partitions():
    """Two moves of one partition cannot run at once; the planner picks another partition when it can."""
    old = [f"r{i}" for i in range(1, 11)]
    pairs = itertools.cycle(list(itertools.combinations(old, 2)))
    assignments = {f"p{i:03d}": next(pairs) for i in range(192)}
    moves = plan_rebalance(assignments, old + ["r11", "r12"])
    assert len({p for p, _, _ in moves}) == len(moves)


def test_placement_gaps_are_named():
    with pytest.raises(RebalanceError, match="domains are configured but replica 'b' has none"):
        plan_rebalance({"1": ("a",)}, ["a", "b"], placement=Placement(domains={"a": "z1"}))
    with pytest.raises(RebalanceError, match="capacity of replica 'a' must be a positive"):
        plan_rebalance({"1": ("a",)}, ["a", "b"], placement=Placement(capacities={"a": 0, "b": 1}))
    with pytest.raises(RebalanceError, match="needs more domains"):
        plan_rebalance({"1": ("a", "b")}, ["a", "b"], placement=Placement(domains={"a": "z1", "b": "z1"}))


# --- SYSTEM REBALANCE with the least-busy schedule ----------------------------------------------


def test_least_busy_schedule_spreads_starts_over_sources_and_targets(connect):
    """r1, r2 hold 8 partitions each, r3, r4 none: the landed rule starts 4 in plan order; least
    busy with 1 per source and 1 per target starts one r1 -> and one r2 -> move, to different targets."""
    admin = connect()
    create_table_znodes(admin, LAYOUT, 2)
    names = ["r1", "r2", "r3", "r4"]
    for r in names:
        register_replica(connect(), LAYOUT, r)
    for p in range(8):
        admin.create(LAYOUT.assignment(f"202401-{p}"), Assignment(("r1", "r2")).encode())
    started = system_rebalance(admin, LAYOUT, names, schedule=Schedule.least_busy(per_table=8, per_source=1, per_target=1))
    assert sorted((src, dst) for _, src, dst in started) in ([("r1", "r3"), ("r2", "r4")], [("r1", "r4"), ("r2", "r3")])
    more = system_rebalance(admin, LAYOUT, names, schedule=Schedule.least_busy(per_table=8, per_source=1, per_target=1))
    assert more == []  # both sources and both targets are copying


def test_default_rebalance_starts_two_clones_per_source_under_the_tables_cap(connect):
    """r1 holds 12 partitions alone (RF 1) and r2..r5 none: the default schedule starts 2 CLONEs
    from r1 (its per-source limit), not the 4 the landed rule started; a table cap of 1 wins."""
    admin = connect()
    create_table_znodes(admin, LAYOUT, 1)
    names = ["r1", "r2", "r3", "r4", "r5"]
    for r in names:
        register_replica(connect(), LAYOUT, r)
    for p in range(12):
        admin.create(LAYOUT.assignment(f"202401-{p}"), Assignment(("r1",)).encode())
    started = system_rebalance(admin, LAYOUT, names)
    assert len(started) == 2 and {src for _, src, _ in started} == {"r1"}
    assert len({dst for _, _, dst in started}) == 2   # least busy targets: two different ones
    assert system_rebalance(admin, LAYOUT, names) == []   # r1 sends its two
    for p, _, _ in started:
        admin.delete(LAYOUT.migration(p))
        admin.set(LAYOUT.assignment(p), Assignment(("r1",)).encode())
    assert len(system_rebalance(admin, LAYOUT, names, max_concurrent=1)) == 1


def test_least_busy_rebalance_keeps_every_invariant_with_queries_and_inserts(tmp_path):
    """The default start rule only changes which AdminReassign comes when; the history check of
    the end-to-end run holds with up to 16 in flight (the table's cap), queries and inserts
    during the rebalance."""
    import random as _random

    from checkers.oracle import violations
    from protocol.keeper import MemoryEnsemble
    from reference.cluster import Cluster
    from reference.workload import blocks
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=[f"r{i}" for i in range(1, 11)], seed=5,
                fault_rate=0.05, schedule=Schedule(), max_concurrent=16)
    try:
        rng = _random.Random(5)
        c.load(blocks(rng, 20, 20, months=3))
        c.settle()
        late = blocks(rng, 10, 5, months=3, first_row_id=10_000)

        def during():
            if c.rng.random() < 0.1:
                c.query(interleave=2)
            if c.rng.random() < 0.05 and (nxt := next(late, None)):
                c.insert(nxt[1], nxt[0])

        moves = c.grow_and_rebalance(["r11", "r12"], during)
        c.settle()
        for at in sorted(c.replicas):
            c.query(at=at)
        # The move count depends on which partitions the late inserts create mid-rebalance
        # (each is assigned least loaded, often onto r11/r12), so the test holds the outcome
        # instead: every partition's owners balanced over the twelve replicas.
        owners = {p: read_assignment(c.admin, c.layout, p).owners for p in c.admin.get_children(c.layout.assignments)}
        after = loads_of(owners, sorted(c.replicas))
        assert max(after.values()) - min(after.values()) <= 1, after
        assert max(sum(1 for m in c.timeline if m["clone"] <= t < m["switch"]) for t in range(c.step)) > 4
        c.snapshot()
        assert violations(c.history, 2) == []
    finally:
        c.close()
