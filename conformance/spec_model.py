"""spec/rfc/SelectiveReplication.tla's constants and invariants in Python, over states shaped as TLC
prints them (harness.tlc.values: Fn, frozenset, tuple, ModelValue).

The replay (conformance/explore.py) evaluates these invariants on the reference's abstract
state. They are checked against TLC itself (tests/conformance/test_explore.py): on every state
of a holding model's graph they hold, and on a broken variant's graph the shortest way to a
state that breaks one is as long as TLC's counterexample.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from itertools import chain

from checkers.oracle import outcome_contradiction
from conformance.stategraph import spec_file, wrapper_of
from harness.tlc.values import Fn, ModelValue, parse_value

NONE = "none"     # the spec's None
ABSENT = -1       # the spec's Absent (no assignment version)
INVARIANTS = ("TypeOKInv", "ReplicationFactorInv", "AckedCommittedInv", "NoAckedBlockLostInv",
              "OwnersCompleteInv", "NoDuplicateRowsInv", "GlobalEntriesAppliedInv", "NoForeignPartsInv",
              "QueryNoMissingInv", "QueryNoDuplicateInv", "CleanupSafeInv", "MigrationLimitInv",
              "MutationsAppliedInv", "DropsAppliedInv", "MigrationOutcomeInv")


class ModelError(ValueError):
    """A cfg that is not a model of SelectiveReplication this module can read."""


@dataclass(frozen=True)
class Model:
    """The constants of one cfg of spec/SelectiveReplication.tla."""
    cfg: str
    replicas: tuple[ModelValue, ...]
    partitions: tuple[ModelValue, ...]
    rf: int
    insert_partition: dict          # insert id (int) -> partition
    init_owners: dict               # partition -> frozenset of replicas
    init_blocks: frozenset
    queries: tuple[str, ...]
    bounds: dict                    # MaxTries, MaxMerges, ... as named in the spec
    block_during_clone: bool
    bugs: frozenset[str]
    cleanup: dict = None            # MinLogsToKeep, MaxLogsToKeep, DedupWindow: the cleanup thread's settings
    # OperatorDrops <- DropKeepsACopy (MCSelectiveReplication.tla): SYSTEM DROP REPLICA only of a
    # replica whose every block has a copy on another replica that stays
    drops_keep_a_copy: bool = False

    def cleanup_settings(self):
        from protocol.cleanup_thread import CleanupSettings
        c = self.cleanup or {}
        # ClickHouse keeps at least one log entry, and so does the reference: load_model refuses a
        # model that keeps none (MaxLogsToKeep = 0), and the models that trim use 1.
        return CleanupSettings(min_logs_to_keep=c.get("MinLogsToKeep", 100), max_logs_to_keep=c.get("MaxLogsToKeep", 100),
                               dedup_window=c.get("DedupWindow", 100))

    @property
    def inserts(self) -> tuple[int, ...]:
        return tuple(sorted(self.insert_partition))

    def same_constants(self, other: "Model") -> bool:
        """Equal but for the switches (a broken variant and the fixed model it is made from)."""
        return replace(self, cfg=other.cfg, bugs=other.bugs) == other


def _definitions() -> dict[str, str]:
    """`Name == value` lines of MCSelectiveReplication.tla whose right side is a plain value."""
    out = {}
    for line in spec_file("MCSelectiveReplication.tla").read_text().splitlines():
        m = re.match(r"^(\w+) == (.+)$", line.strip())
        if m:
            out[m[1]] = m[2]
    return out


# Placement beyond the RFC (fault domains, capacities: issue 16) is checked by TLC and the
# reference's placement tests; here only the RFC's counting, which is also the reference's default
# (every replica its own domain, every capacity 1), is accepted.
RFC_PLACEMENT = {"Domain": "SelfDomains", "Capacity": "UnitCapacity"}


def load_model(cfg: str) -> Model:
    if wrapper_of(cfg) != "MCSelectiveReplication.tla":
        raise ModelError(f"{cfg} is not a model of SelectiveReplication")
    defs = _definitions()
    values = {}
    for line in spec_file(cfg).read_text().splitlines():
        m = re.match(r"^\s+(\w+) (<-|=) (.+)$", line)
        if not m or re.fullmatch(r"[rp]\d+ = .*", f"{m[1]} {m[2]} {m[3]}"):
            continue
        if m[1] == "OperatorDrops":
            if (m[2], m[3]) != ("<-", "DropKeepsACopy"):
                raise ModelError(f"{cfg}: OperatorDrops other than DropKeepsACopy is not driven through the reference")
            values[m[1]] = True
            continue
        if m[1] in RFC_PLACEMENT:
            if (m[2], m[3]) == ("<-", RFC_PLACEMENT[m[1]]):
                continue
            raise ModelError(f"{cfg}: {m[1]} other than {RFC_PLACEMENT[m[1]]} is not driven through the reference yet")
        text = defs[m[3]] if m[2] == "<-" else m[3]
        try:
            values[m[1]] = parse_value(text)
        except ValueError as e:
            raise ModelError(f"{cfg}: constant {m[1]} = {text!r} is not a plain value: {e}") from None
    need = ("Replicas", "Partitions", "RF", "InsertPartition", "InitOwners", "InitBlocks", "Queries", "Bugs")
    missing = [n for n in need if n not in values]
    if missing:
        raise ModelError(f"{cfg} does not set {missing}")

    def as_map(v):  # a TLA+ function over 1..n prints as a sequence
        return dict(enumerate(v, 1)) if isinstance(v, tuple) else dict(v)
    bounds = {k: v for k, v in values.items() if k.startswith("Max")}
    cleanup = {k: values[k] for k in ("MinLogsToKeep", "MaxLogsToKeep", "DedupWindow") if k in values}
    if cleanup.get("MaxLogsToKeep") == 0:
        # The spec then trims an entry as soon as every fresh replica has pulled it and marks a
        # replica behind it lost at once; the reference's cleanup thread keeps at least one entry
        # (cleanup_settings), so a trace that trims the last entry is one it cannot follow (F33's
        # MCLostReplicaMigration pair: "nearest differs in lost", the thorough profile 2026-12-01).
        raise ModelError(f"{cfg}: MaxLogsToKeep = 0 is not driven through the reference yet (it keeps one entry)")
    return Model(cfg, tuple(sorted(values["Replicas"])), tuple(sorted(values["Partitions"])), values["RF"],
                 as_map(values["InsertPartition"]), as_map(values["InitOwners"]), values["InitBlocks"],
                 tuple(sorted(values["Queries"])), bounds, bool(values.get("BlockDuringClone", False)),
                 frozenset(values["Bugs"]), cleanup, drops_keep_a_copy=values.get("OperatorDrops", False))


# --- the spec's helpers --------------------------------------------------------------------------

def seq_or_fn(d: dict):
    """A TLA+ function as TLC prints it: a sequence when its domain is 1..n."""
    if not d:
        return ()
    if all(isinstance(k, int) for k in d) and sorted(d) == list(range(1, len(d) + 1)):
        return tuple(d[k] for k in range(1, len(d) + 1))
    return Fn(d)


def at(f, key):
    """f[key] for a function printed as a sequence or as (k :> v @@ ...)."""
    return f[key - 1] if isinstance(f, tuple) else f[key]


def keepers(a) -> frozenset:
    return a["owners"] | (frozenset({a["target"], a["leaving"]}) - {NONE})


def ids(blocks) -> set:
    return {b[0] for b in blocks}


def twice(blocks) -> bool:
    seen = set()
    for i, _ in blocks:
        if i in seen:
            return True
        seen.add(i)
    return False


class View:
    """Derived quantities of one state (the spec's LET-free helpers), computed once."""

    def __init__(self, s: dict, m: Model):
        self.s, self.m = s, m
        self.log = s["log"]
        self.first_idx, self.last_idx = {}, {}
        for k, e in enumerate(self.log, 1):
            if e["type"] == "GET":
                for i in ids(e["part"]["b"]):
                    self.first_idx.setdefault(i, k)
                    self.last_idx[i] = k

    def drop_point(self, p, upto: int) -> int:
        return max((k for k, e in enumerate(self.log[:upto], 1) if e["type"] == "DROP" and e["p"] == p), default=0)

    def live(self, i) -> bool:
        return self.last_idx.get(i, 0) > self.drop_point(self.m.insert_partition[i], len(self.log))

    def live_acked(self) -> set:
        return {i for i in self.s["inv_acked"] if self.live(i)}

    def has_block(self, r, i) -> bool:
        return any(i in ids(x["b"]) for x in at(self.s["parts"], r))

    def in_flight_to(self, r, i) -> bool:
        f = self.s["parts"]
        disks = f if isinstance(f, tuple) else [f[k] for k in f]
        if not any(i in ids(x["b"]) for ps in disks for x in ps):
            return False   # no replica has the block: on its way nowhere (InFlightTo's first conjunct)
        return at(self.s["ptr"], r) < self.last_idx.get(i, 0) or any(
            e["type"] in ("GET", "MERGE", "MUTATE") and i in ids(e["part"]["b"]) for e in at(self.s["queue"], r))

    def mutations_owed(self, r, x) -> int:
        return max((e["part"]["mv"] for e in self.log[:at(self.s["ptr"], r)]
                    if e["type"] == "MUTATE" and e["p"] == x["p"] and e["part"]["b"] & x["b"]), default=0)

    def leaver(self, p):
        mig = at(self.s["mig"], p)
        return mig["src"] if mig["st"] == "switched" else mig["dst"]


def invariants(s: dict, m: Model) -> dict[str, bool]:
    """Every invariant of the spec, by name, on state s."""
    v = View(s, m)
    asg, mig, parts, queue, qry = s["asg"], s["mig"], s["parts"], s["queue"], s["qry"]
    R, P = m.replicas, m.partitions
    acked = v.live_acked()
    done = [at(qry, q) for q in m.queries if at(qry, q)["st"] == "done"]
    in_flight = [p for p in P if at(mig, p)["st"] in ("clone", "switched", "cancelling")]

    gone = s.get("gone", frozenset())

    def rf_ok(p):
        a, st = at(asg, p), at(mig, p)["st"]
        return a["version"] == ABSENT or (
            m.rf - len(gone) <= len(a["owners"]) <= m.rf and not keepers(a) & gone
            and (a["target"] != NONE) == (st == "clone")
            and (a["leaving"] != NONE) == (st == "cancelling" or st == "switched"
                                           and "source_stops_at_switch" not in m.bugs))

    def keeper(r, x):
        return r in keepers(at(asg, x["p"]))

    def foreign_ok(r, x):
        return (keeper(r, x) or at(mig, x["p"])["st"] in ("switched", "cancelling") and r == v.leaver(x["p"])
                or r not in s["active"])

    def pending(r, kind, p):
        return any(e["type"] == kind and e["p"] == p for e in at(queue, r))

    def mutated_part_queued(r, x):   # MutatedPartQueued
        return any(e["type"] == "GET" and e["part"]["p"] == x["p"] and x["b"] <= e["part"]["b"]
                   and e["part"]["mv"] >= v.mutations_owed(r, x) for e in at(queue, r))

    def outcome_ok(p):   # MigrationOutcomeInv, the history checker's rule with the spec's gone
        x = at(mig, p)
        a = at(asg, p)
        return outcome_contradiction(x["st"], None if x["src"] == NONE else x["src"], x["dst"], a["owners"], gone,
                                     leaving=None if a["leaving"] == NONE else a["leaving"],
                                     stops_at_switch="source_stops_at_switch" in m.bugs) is None

    def alters_ok(r):
        passed = sum(e["type"] == "ALTER" for e in v.log[:at(s["ptr"], r)])
        return at(s["meta"], r)["alters"] + sum(e["type"] == "ALTER" for e in at(queue, r)) == passed

    return {
        "TypeOKInv": s["active"] <= frozenset(R) and not gone & s["active"] and all(0 <= at(s["ptr"], r) <= len(v.log) for r in R),
        "ReplicationFactorInv": all(rf_ok(p) for p in P),
        "AckedCommittedInv": all(v.last_idx.get(i, 0) > 0 for i in s["inv_acked"]),
        "NoAckedBlockLostInv": all(any(v.has_block(r, i) for r in R) for i in acked),
        "OwnersCompleteInv": all(v.has_block(o, i) or v.in_flight_to(o, i)
                                 for i in acked for o in at(asg, m.insert_partition[i])["owners"]),
        "NoDuplicateRowsInv": all(not twice(list(chain.from_iterable(x["b"] for x in at(parts, r) if x["p"] == p)))
                                  for r in R for p in P),
        "GlobalEntriesAppliedInv": all(alters_ok(r) for r in R),
        "NoForeignPartsInv": all(foreign_ok(r, x) for r in R for x in at(parts, r)),
        "QueryNoMissingInv": all(not q["lost"] for q in done),
        "QueryNoDuplicateInv": all(not q["dup"] for q in done),
        "CleanupSafeInv": not s["inv_read_cleaned"],
        "MigrationLimitInv": len(in_flight) <= m.bounds.get("MaxConcurrentMigrations", len(P)),
        "MutationsAppliedInv": all(not keeper(r, x) or x["mv"] >= v.mutations_owed(r, x) or pending(r, "MUTATE", x["p"])
                                   or mutated_part_queued(r, x) for r in R for x in at(parts, r)),
        "MigrationOutcomeInv": all(outcome_ok(p) for p in P),
        "DropsAppliedInv": all(not keeper(r, x) or all(b[1] > v.drop_point(x["p"], at(s["ptr"], r)) for b in x["b"])
                               or pending(r, "DROP", x["p"]) for r in R for x in at(parts, r)),
    }
