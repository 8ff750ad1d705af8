"""A small in-process oracle over a History: the checks of the PySpark job (pyspark_jobs/), for
runs small enough to hold in memory. The command line prints its verdict; the tests use it as a
second, independent implementation of the checks the Spark job makes at scale."""

from __future__ import annotations

from collections import Counter

from .history import History


def violations(history: History, rf: int) -> list[str]:
    """Failures of R2/R3 and of the final state, in plain words; [] when the run was exact."""
    t = history.tables
    problems = []
    ok = {}    # row_id -> (partition, ack_step)
    maybe = set()
    for x in t["inserts"]:
        if x["status"] == "ok":
            ok[x["row_id"]] = (x["partition_id"], x["ack_step"])
        elif x["status"] == "unknown":
            maybe.add(x["row_id"])
    rows_of = {}
    lag: dict[str, set[int]] = {}   # rows a query is not owed by replication lag (reference/lag.py)
    for x in t.get("query_lag", ()):
        lag.setdefault(x["query_id"], set()).add(x["row_id"])
    for x in t["query_rows"]:
        rows_of.setdefault(x["query_id"], Counter())[x["row_id"]] += 1
    for q in t["queries"]:
        if q["status"] != "complete":
            continue
        got = rows_of.get(q["query_id"], Counter())
        problems += [f"{q['query_id']} read row {r} {n} times" for r, n in got.items() if n > 1]
        problems += [f"{q['query_id']} returned row {r}, never inserted" for r in got if r not in ok and r not in maybe]
        for r, (p, ack) in ok.items():
            wanted = q["partitions_requested"] is None or p in q["partitions_requested"]
            if ack < q["start_step"] and wanted and r not in got and r not in lag.get(q["query_id"], ()):
                problems.append(f"{q['query_id']} missed row {r} of {p}, acknowledged at {ack}")
    final = max(x["snapshot_step"] for x in t["parts"])
    held = {}
    for x in t["parts"]:
        if x["snapshot_step"] == final:
            held.setdefault((x["replica"], x["partition_id"]), Counter())[x["row_id"]] += 1
    owners = {a["partition_id"]: a["owners"] for a in t["assignments"] if a["snapshot_step"] == final}
    for p, os_ in owners.items():
        if len(os_) != rf:
            problems.append(f"{p} has owners {os_}, not {rf}")
        want = {r for r, (pp, _) in ok.items() if pp == p}
        for o in os_:
            have = held.get((o, p), Counter())
            if any(n > 1 for n in have.values()) or not want <= set(have) or set(have) - want - maybe:
                problems.append(f"{o} holds {p} wrongly: {len(want - set(have))} missing, "
                                f"{sum(n - 1 for n in have.values())} duplicated")
    problems += [f"{r} keeps {p} without owning it" for (r, p) in held if r not in owners.get(p, ())]
    unknown: dict[str, set[int]] = {}
    for x in t["inserts"]:
        if x["status"] == "unknown":
            unknown.setdefault(x["insert_id"], set()).add(x["row_id"])
    for insert_id, ids in sorted(unknown.items()):
        p = insert_id.rsplit("/", 1)[1]
        for o in owners.get(p, ()):
            present = ids & set(held.get((o, p), ()))
            if present and present != ids:
                problems.append(f"insert {insert_id} of unknown outcome is partly on {o}: {len(present)} of {len(ids)} rows")
    return problems
