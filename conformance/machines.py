"""Hypothesis state machines generated from the transition list (conformance/transitions.py):
one rule per spec action, with the action's name, its parameters drawn from the model's
constants, and its guard as a precondition; one invariant per spec invariant, same name.

Assignment (spec/assignment/Assignment.tla): the precondition is "the reference accepts some instance here"
(each instance tried and taken back), and the rule takes one of those. With the model's state
graph loaded, every step must be an edge of it (state, action, next state), and the instances
the reference accepts must be exactly the spec's out-edges: guards agree in both directions.

Whole protocol (spec/rfc/SelectiveReplication.tla): the precondition is the spec's guard read through
the reference's state (conformance/protocol_system.py `enabled`), and the rule takes one enabled
instance. Should the reference still refuse it (GuardFailed), that is counted and reported, and
the refused step must leave Keeper, every disk and every map as they were. The spec's invariants
are evaluated on the reference's state after each step.

Whole protocol under one TLC model's constants (model_machine): the precondition as for
Assignment; each step must be an edge of the graph of the same constants with no switch on, and
the cfg's invariants must hold after it (conformance/walk.py WalkChecks).

PR #102244's design under one of its models' constants (pr_machine): the precondition as for
Assignment, over conformance/pr_system.py (PRSystem for PR102244.tla, PRWholeSystem for
PR102244Whole.tla's first INSERT); every invariant of the spec evaluated on the reference after each step.

Profiles (`CONFORMANCE_PROFILE`): ci, dev, thorough.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections import Counter

from hypothesis import HealthCheck, note, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conformance.assignment_system import AssignmentSystem
from conformance.protocol_system import (DROPS_NOT_RETRIES, INSERT_PARTITION, REFUSED, REPAIR_BOUNDS,
                                         RETRIES_NOT_DROPS, ProtocolSystem, enabled)
from conformance.stategraph import state_key
from conformance.transitions import of_module
from conformance.windows import DIRECTED, Walk, window_of

settings.register_profile("ci", max_examples=60, stateful_step_count=40, deadline=None, derandomize=True,
                          suppress_health_check=list(HealthCheck), print_blob=False)
settings.register_profile("dev", max_examples=200, stateful_step_count=50, deadline=None,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("thorough", max_examples=1000, stateful_step_count=80, deadline=None,
                          suppress_health_check=list(HealthCheck))


def changing_instances(system, here) -> dict:
    """action -> the argument tuples whose step changes the state `here` (a step that changes
    nothing is a stutter); the system is left as it was. Each list is sorted: a walk's seed then
    picks the same instances in every process (instances() may come from sets, whose order of
    strings changes with PYTHONHASHSEED)."""
    snap = system.snapshot()
    out: dict = {}
    for action, args in system.instances():
        got = system.attempt(snap, action, args)
        if got is not None and got != here:
            out.setdefault(action, []).append(args)
    system.restore(snap)
    return {a: sorted(v, key=repr) for a, v in out.items()}


def profile() -> settings:
    name = os.environ.get("CONFORMANCE_PROFILE", "dev")
    if name not in ("ci", "dev", "thorough"):
        raise ValueError(f"CONFORMANCE_PROFILE must be ci, dev or thorough, not {name!r}")
    return settings.get_profile(name)


class ConformanceFailure(AssertionError):
    """The reference did something the spec does not allow, or broke a spec invariant."""


# --- Assignment ------------------------------------------------------------------------------
ASSIGNMENT_INVARIANTS = ("TypeOKInv", "AssignmentChangesOnlyByCASInv", "ReplicationFactorInv", "RoutedToOwnersInv")


def assignment_machine(bugs=frozenset(), graph=None, counts: Counter | None = None):
    """`graph`: the TLC state graph of the model with the same constants and switches (or None)."""
    counts = Counter() if counts is None else counts
    index = None
    if graph is not None:  # state -> node, node -> {(action, params)} of its out-edges
        index = {state_key(d["state"]): n for n, d in graph.nodes(data=True)}
        outs = {}
        for u, v, k in graph.edges(keys=True):
            a = graph.edges[u, v, k]["action"]
            outs.setdefault(u, set()).add((a, AssignmentSystem.infer_params(a, graph.nodes[u]["state"],
                                                                            graph.nodes[v]["state"]), v))

    class AssignmentMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.system = AssignmentSystem(bugs=bugs)
            self._accepted = {}

        def teardown(self):
            self.system.close()

        def accepted(self, action):
            if action not in self._accepted:
                self._accepted[action] = self.system.accepted(action)
            return self._accepted[action]

        def take(self, action, choice):
            options = self.accepted(action)
            params = options[choice % len(options)]
            note(f"{action}{params}")
            before = self.system.abstract()
            if index is not None:
                node = index.get(state_key(before))
                if node is None:
                    raise ConformanceFailure(f"the reference reached a state outside the spec's graph: {before}")
                spec = {(a, p) for a, p, _ in outs.get(node, ())}
                ref = {(a, p) for a in AssignmentSystem.ACTIONS for p in self.accepted(a)}
                if spec != ref:
                    raise ConformanceFailure(f"guards disagree here: spec only {sorted(spec - ref)}, "
                                             f"reference only {sorted(ref - spec)}")
            self.system.step(action, params)
            self._accepted = {}
            counts[action] += 1
            if index is not None:
                after = index.get(state_key(self.system.abstract()))
                if not any(a == action and p == params and v == after for a, p, v in outs.get(node, ())):
                    raise ConformanceFailure(f"{action}{params} is not an edge of the spec's graph")

    for t in of_module("Assignment"):
        def make(name):
            def step(self, choice):
                self.take(name, choice)
            _name(step, name)
            return precondition(lambda self: bool(self.accepted(name)))(rule(choice=st.integers(0, 255))(step))
        setattr(AssignmentMachine, t.name, make(t.name))

    for name in ASSIGNMENT_INVARIANTS:
        def make_inv(name):
            def check(self):
                holds = AssignmentSystem.invariants(self.system.abstract(), self.system.rf)[name]
                if not holds:
                    raise ConformanceFailure(f"{name} violated")
            _name(check, name)
            return invariant()(check)
        setattr(AssignmentMachine, name, make_inv(name))
    return AssignmentMachine


def _name(fn, name: str) -> None:
    """Rules and invariants carry the spec's names (Hypothesis prints them in failing runs)."""
    fn.__name__ = fn.__qualname__ = name


# --- the whole protocol ------------------------------------------------------------------------
PROTOCOL_INVARIANTS = ("ReplicationFactorInv", "AckedCommittedInv", "NoAckedBlockLostInv", "OwnersCompleteInv",
                       "QueryNoMissingInv", "QueryNoDuplicateInv", "NoDuplicateRowsInv", "CleanupSafeInv",
                       "NoForeignPartsInv", "MutationsAppliedInv", "DropsAppliedInv", "GlobalEntriesAppliedInv", "MigrationLimitInv",
                       "MigrationOutcomeInv",
                       # an action property, judged on each step the machine takes (ProtocolSystem.step)
                       "RepairOutcomeProp")


# The actions the protocol machine drives: its ProtocolSystem's steps. SYSTEM DROP REPLICA and
# the repair (DropReplica, RepairStart: F20) only in the machine built with repair=True, which
# drops one crashed replica for good amid the whole workload (the repair models, driven by the
# model machines and the replays, conformance/spec_system.py, have no merges, mutations or moves).
ALL_PROTOCOL_ACTIONS = [t.name for t in of_module("SelectiveReplication") if t.name in ProtocolSystem.PARAMS]
REPAIR_ACTIONS = [t.name for t in of_module("SelectiveReplication") if t.name in ProtocolSystem.REPAIR_PARAMS]
SWARM_ACTIONS = ["ReplicaRefreshCache", "ReplicaPullLog", "ReplicaExecuteEntry", "ReplicaCrash", "ClientTimeout",
                 "ClientMutate", "ClientDropPartition", "ClientAlterMetadata", "CoordinatorCancel",
                 "ReplicaSelectMerge", "ClientStartQuery"]
# Directed walks: the weight of a directed rule (conformance/windows.py) that can run, and of a
# plain action. With ~15-20 actions enabled at a time, at 16:1 (128) one directed rule that could
# run still got under half the steps (plain steps started migrations of the wrong partition and
# sent the INSERTs a CLONE needed); 32:1 gives it most. A query is plainly started at an eighth
# of an action's weight: there are two, and uniform choice spent both in a walk's first steps,
# before any migration began; CANCEL and a crash at a quarter: each ended most migrations it
# met; a REASSIGN at a quarter and an INSERT sent at half (MigrationStart and the INSERT rules
# pick the partition and the moment that leave an INSERT for the CLONE).
DIRECTED_WEIGHT = 256
# Steps a walk of the repair machine gets, at least: a crash, a drop, a move cancelled and a repair
# switched take more than the ci profile's 40. Measured, ci, 100 walks each: at 40 steps a CANCEL
# on 68 in a hundred walks, a repair started on 40 and switched on 15; at 60, 81, 55 and 46 (12.8 s);
# at 80, 81, 60 and 51 (20.9 s).
REPAIR_STEPS = 60


def repair_settings(prof: settings) -> settings:
    """The repair machine's settings: the profile's, with walks of REPAIR_STEPS at least."""
    return settings(prof, stateful_step_count=max(prof.stateful_step_count, REPAIR_STEPS))
# The directed rules a migration with traffic around it needs (windows.py): the swarm never leaves
# them out. Left out, MigrationNextStep or MigrationStart left most walks with no SWITCH,
# InsertNextStep or InsertAroundMigration with no INSERT in CLONE, QueryOnDisagreeingMap with no
# query in the window (a plain query weighs 1 of ~150). Swarm testing leaves out what a walk can
# do without; these it cannot, for the windows the directed rules aim at.
# RepairAfterLoss runs only in the repair machine (and is kept out of the swarm's draw, so that
# the default machine's walks are the same draws as before it existed).
SWARM_KEEPS = ("MigrationStart", "MigrationNextStep", "InsertNextStep", "InsertAroundMigration",
               "QueryOnDisagreeingMap", "RepairAfterLoss")
SWARM_DIRECTED = [n for n in DIRECTED if n not in SWARM_KEEPS]
PLAIN_WEIGHT = {"ClientStartQuery": 1, "CoordinatorCancel": 2, "ReplicaCrash": 2, "AdminReassign": 2, "ClientSendInsert": 4}
PLAIN_WEIGHT_DEFAULT = 8


def protocol_machine(bugs=frozenset(), block_during_clone: bool = False, counts: Counter | None = None,
                     refusals: Counter | None = None, namespace=None, coverage=None, directed: bool = True,
                     repair: bool = False):
    """`namespace`: makes a `connect` into a fresh, empty Keeper namespace for each example (real
    ZooKeeper); by default each example gets its own in-memory ensemble. `coverage`
    (lab/migration_coverage.py MigrationCoverage): counts the walks that complete a
    migration with writes and queries around it.

    `directed` (the default): one rule, `Step`, picks each step among the enabled actions and the
    directed rules of conformance/windows.py (each a spec action restricted to the instances that
    open or use a migration's or a restart's window), the latter weighted DIRECTED_WEIGHT, with
    swarm testing over both. False: one rule per action, Hypothesis's uniform choice among the
    enabled ones (the machine before the directed rules; `python -m lab.switch_table --undirected`).

    `repair`: SYSTEM DROP REPLICA and RepairStart are steps too (REPAIR_BOUNDS: one replica, down
    and holding no row only it has, dropped for good), and the directed rule RepairAfterLoss
    crashes such a replica, drops it and repairs its partitions."""
    counts = Counter() if counts is None else counts
    refusals = Counter() if refusals is None else refusals
    actions = ALL_PROTOCOL_ACTIONS + (REPAIR_ACTIONS if repair else [])

    class ProtocolMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.system = ProtocolSystem(bugs=bugs, block_during_clone=block_during_clone,
                                         connect=namespace() if namespace else None,
                                         bounds=REPAIR_BOUNDS if repair else None)
            self._inv = None
            self._enabled = {}
            if coverage is not None:
                coverage.start_walk()

        def enabled(self, name):
            if name not in self._enabled:
                self._enabled[name] = enabled(self.system, name)
            return self._enabled[name]

        # Swarm testing: each run leaves out a random set of actions (and, directed, of directed
        # rules), so that some runs never refresh a map or never read, and reach the stale-map
        # states a uniform choice rarely does. A left-out action still runs when nothing else can
        # (no run gets stuck).
        swarm_out: frozenset = frozenset()

        # A walk retries INSERTs or drops a partition, not both: the models' bounds, under which
        # the spec's invariants hold (conformance/protocol_system.py RETRIES_NOT_DROPS).
        walk = Walk()

        @initialize(out=st.sets(st.sampled_from(SWARM_ACTIONS + (SWARM_DIRECTED if directed else [])), max_size=3),
                    drops=st.booleans(), knobs=st.tuples(st.integers(0, 2), st.booleans(), st.booleans(), st.integers(0, 3)))
        def swarm(self, out, drops, knobs):
            self.swarm_out = frozenset(out)
            self.system.bounds.update(DROPS_NOT_RETRIES if drops else RETRIES_NOT_DROPS)
            # Drawn False first (Hypothesis starts from zero): a write in CLONE, a query before the
            # fetch, no restart first, no cancel. One walk in three writes across the SWITCH (its
            # migration's last INSERT waits for the SWITCH: with the partition's other INSERT
            # written before the CLONE, none is written in CLONE; one in four had F4 at walk 37 in
            # five unseeded runs' median, one in three at 9); one in four cancels its first
            # migration (its second, if it starts one, runs to the end).
            # A walk that writes across the SWITCH queries after it: the stale reader that misses
            # those rows (F6) starts only then.
            crosses = knobs[0] == 2
            # Of the walks that neither cancel nor crash first, one in three crashes its migration's
            # source after the SWITCH (down_leaver) and one in three trims a DROP or a mutation
            # from the log before the first migration (alter_first); of those that crash first, one
            # in four keeps the replica down until it is lost. Derived from the draws the other
            # windows already make, so that the walks of those keep theirs.
            walk = Walk(not crosses, not knobs[1] and not crosses, knobs[2], knobs[3] == 3, self.swarm_out,
                        lost_restart=knobs[2] and knobs[3] == 1, down_leaver=not knobs[2] and knobs[3] == 2,
                        alter_first=not knobs[2] and knobs[3] == 1)
            if repair:
                # Every walk of the repair machine cancels its first move (its second, if any,
                # runs to the end), where the default machine's draw gives one in four: a CANCEL
                # then meets the drop and the repair on most walks (issue 37; with five walks in
                # eight, 35-42 in a hundred). The default machine's draws are left as they were.
                walk = dataclasses.replace(walk, cancel=True)
            self.walk = walk
            note(f"left out this run: {sorted(out)}; {'drops, no retries' if drops else 'retries, no drops'}; {walk}")

        def allowed(self, name):
            if not self.enabled(name):
                return False
            if name not in self.swarm_out:
                return True
            return not any(self.enabled(n) for n in actions if n not in self.swarm_out)

        def directed_options(self, rule_name):
            if rule_name in self.swarm_out:
                return []
            # An action the swarm left out is still taken by a directed rule (only queries started
            # in a window, say), unless the directed rule is left out too.
            return DIRECTED[rule_name](self.system, self.enabled, self.walk)

        def teardown(self):
            if coverage is not None:
                coverage.end_walk()
            self.system.close()

        def take(self, name, params):
            before = self.system.fingerprint()
            migs = self.system.migration_states() if coverage is not None else None
            window = window_of(self.system, name, params) if coverage is not None else None
            try:
                self.system.step(name, params)
            except REFUSED:
                refusals[name] += 1
                if self.system.fingerprint() != before:
                    raise ConformanceFailure(f"{name}{params} was refused but changed the state") from None
                return
            counts[name] += 1
            if coverage is not None:
                wrote = INSERT_PARTITION[params[1]] if name == "ReplicaWriteInsert" else None
                coverage.observe(name, wrote, migs, self.system.migration_states())
                if window:
                    coverage.window(window)
            self._inv = None
            self._enabled = {}

        def holds(self, name):
            if self._inv is None:
                self._inv = self.system.invariants()
            return self._inv[name]

    if directed:
        # One rule: the weighted choice is the machine's, not Hypothesis's (which picks uniformly
        # among rules, and whose own swarm, turning rules off per walk, ended many walks early when
        # every rule that could run was off). Every step is still one of the spec's actions with an
        # instance its guard allows; a directed rule only narrows the instances and weighs more.
        def step(self, data):
            plain = [(n, None) for n in actions if self.allowed(n)]
            aimed = [(n, opts) for n in DIRECTED if (opts := self.directed_options(n))]
            weights = [DIRECTED_WEIGHT] * len(aimed) + [PLAIN_WEIGHT.get(n, PLAIN_WEIGHT_DEFAULT) for n, _ in plain]
            pick = data.draw(st.integers(0, sum(weights) - 1), label="rule")
            at = 0
            while pick >= weights[at]:
                pick -= weights[at]
                at += 1
            rule_name, opts = (aimed + plain)[at]
            if opts is None:
                opts = [(rule_name, p) for p in self.enabled(rule_name)]
            name, params = opts[data.draw(st.integers(0, len(opts) - 1), label="instance")]
            note(f"{name}{params}" + ("" if name == rule_name else f" ({rule_name})"))
            self.take(name, params)
        _name(step, "Step")
        ProtocolMachine.Step = rule(data=st.data())(step)
    else:
        for name in actions:
            def make(name):
                def step(self, choice):
                    options = self.enabled(name)
                    params = options[choice % len(options)]
                    note(f"{name}{params}")
                    self.take(name, params)
                _name(step, name)
                return precondition(lambda self: self.allowed(name))(rule(choice=st.integers(0, 255))(step))
            setattr(ProtocolMachine, name, make(name))

    for name in PROTOCOL_INVARIANTS:
        def make_inv(name):
            def check(self):
                if not self.holds(name):
                    raise ConformanceFailure(f"{name} violated")
            _name(check, name)
            return invariant()(check)
        setattr(ProtocolMachine, name, make_inv(name))
    return ProtocolMachine


# --- the whole protocol under one TLC model's constants ----------------------------------------
# The share of the model machine's walks that may CANCEL a migration (the protocol machine's
# walks cancel in one of four too).
CANCELLING_WALKS = 0.25


def model_machine(cfg: str, bugs: frozenset[str] | None = None, counts: Counter | None = None, graph=None,
                  walks: list | None = None):
    """The reference under the constants of spec/<family>/{cfg} (conformance/spec_system.py), with the
    cfg's switches unless `bugs` is given. One rule, Step: of the actions some instance of which
    changes the reference's state here (every instance is tried on a snapshot and taken back),
    the walk's schedule picks one, and one such instance of it. The cfg's invariants, evaluated
    on the reference's state read as the spec's variables (conformance/spec_model.py).

    `graph` (conformance/explore.py SpecGraph): the state graph of a model with the same
    constants, usually the fixed model a broken variant is made from. Every step taken from one
    of its states must then be one of its edges: a reference that does what the fixed spec does
    not allow fails at that step, before any invariant breaks. `walks`: each failing walk is
    appended to it, as (action, args) steps, for conformance/walk.py to shrink and replay.

    A model's constants are small (one or two partitions, one insert, one migration), so random
    choice reaches a model's deep states far more often than in the general protocol machine."""
    from conformance.spec_model import load_model
    from conformance.spec_system import SpecSystem
    from conformance.walk import WalkChecks
    checks = WalkChecks(load_model(cfg), graph)
    counts = Counter() if counts is None else counts

    actions = [t.name for t in of_module("SelectiveReplication")]

    class ModelMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.system = SpecSystem(checks.model, bugs)
            self.walk: list = []
            self._enabled = None
            self._state = None        # the abstract state of now: read once per step
            self.order: list[str] | None = None
            self.demote: dict[int, str] = {}
            self.held: frozenset = frozenset()
            self.steps = 0

        # Every choice of the walk comes from one seeded Random, not from Hypothesis's draws:
        # those favour small integers and near-sorted permutations (so that a failure shrinks),
        # which skews a walk towards the first action and instance of each list. Shrinking is
        # conformance/walk.py's, on the recorded walk; the seed keeps a run repeatable
        # (derandomized in the ci profile).
        #
        # Priority scheduling (PCT, Burckhardt et al. 2010), in half the runs: the actions get a
        # random priority order and the highest-priority action that can run does, with up to two
        # random points where an action drops to the lowest priority. Uniform choice starts a
        # query or a CLONE as soon as it can; bugs that need one late (a query started against a
        # stale map after a SWITCH) are then found at a rate PCT bounds from below.
        #
        # One walk in four may CANCEL a migration, as in the protocol machine (windows.py Walk):
        # CANCEL can run at every step of a CLONE, and uniform choice took it in three walks of
        # four on MCMigrationWrites, where no SWITCH then comes. In the others CANCEL runs only
        # when nothing else can.
        @initialize(seed=st.integers(0, 2**32 - 1))
        def schedule(self, seed):
            self.rnd = random.Random(seed)
            if self.rnd.random() < 0.5:
                self.order = self.rnd.sample(actions, len(actions))
                self.demote = {self.rnd.randrange(25): self.rnd.choice(actions) for _ in range(self.rnd.randrange(3))}
            self.held = frozenset() if self.rnd.random() < CANCELLING_WALKS else frozenset({"CoordinatorCancel"})
            note(f"seed {seed}: " + (f"priority order {self.order}, demoted at steps {self.demote}" if self.order
                                     else "uniform choice") + ("" if self.held else ", may cancel"))

        def fail(self, failed: tuple[str, str]):
            if walks is not None:
                walks.append(list(self.walk))
            raise ConformanceFailure(failed[1])

        def state(self) -> dict:
            if self._state is None:
                self._state = self.system.abstract()
            return self._state

        def choosable(self) -> list[str]:
            """The actions the walk may take here: the enabled ones, less those it holds back while
            something else can run; under a priority order, the first of them in it."""
            en = self.enabled()
            runnable = [a for a in actions if en.get(a) and a not in self.held] or [a for a in actions if en.get(a)]
            if self.order is None or not runnable:
                return runnable
            return [next(a for a in self.order if a in runnable)]

        def enabled(self) -> dict:
            if self._enabled is None:
                self._enabled = changing_instances(self.system, self.state())
            return self._enabled

    # One rule: the choice among actions is the machine's (uniform, or the schedule's), not
    # Hypothesis's. With one rule per action, Hypothesis's own swarm (feature flags turning rules
    # off per example) left no rule to run whenever the schedule's one action, or the few a deep
    # state enables, were off, and the example was thrown away: on MCMigrationWrites most walks
    # ran 0-4 steps. A state with no step left stutters, as the spec's does (the model's bounds
    # have run out).
    def step(self):
        names = self.choosable()
        if not names:
            return
        name = self.rnd.choice(names)
        args = self.rnd.choice(self.enabled()[name])
        note(f"{name}{args}")
        before = self.state()
        self.system.step(name, args)
        self.walk.append((name, args))
        counts[name] += 1
        self._enabled = self._state = None
        failed = checks.step(before, name, self.state())
        if failed:
            self.fail(failed)
        self.steps += 1
        if self.order is not None and self.steps in self.demote:
            self.order.remove(self.demote[self.steps])
            self.order.append(self.demote[self.steps])
    _name(step, "Step")
    ModelMachine.Step = rule()(step)

    def check(self):
        failed = checks.broken(self.state())
        if failed:
            self.fail(failed)
    _name(check, "SpecInvariants")
    ModelMachine.SpecInvariants = invariant()(check)
    return ModelMachine


# --- PR #102244's design under one of its TLC models' constants ---------------------------------
def pr_machine(cfg: str, bugs: frozenset[str] | None = None, counts: Counter | None = None,
               walks: list | None = None):
    """The reference's PR #102244 design (reference/pr102244/) under the constants of spec/<family>/{cfg}, a
    model of PR102244.tla or a first-INSERT model of PR102244Whole.tla (conformance/pr_system.py
    DESIGNS), with the cfg's switches unless `bugs` is given. One rule per action of
    the system (the spec's names); precondition, as model_machine's: some instance of it changes
    the reference's state here (each tried on a snapshot and taken back); the rule takes one. After
    every step, every invariant of the spec module, evaluated on the reference's state by
    checkers/pr102244_live.py (PRSystem.invariants). `walks`: each failing walk is appended,
    as (action, args) steps. The model's bounds (MaxFails, MaxQueries, ...) are the system's guards;
    a state with no step left stutters."""
    from conformance.pr_designs import design
    _, read_constants, system_cls, spec_actions, _ = design(cfg)
    constants = read_constants(cfg)
    actions = [a for a in spec_actions if a not in ("CoordinatorCrash", "TakeOver")]   # not implemented (pr_system.py)
    counts = Counter() if counts is None else counts

    windowed = hasattr(system_cls, "in_window")

    class PRMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.system = system_cls(constants, bugs)
            self.walk: list = []
            self._enabled = None
            self._state = None

        # Swarm testing, as protocol_machine: each run leaves out a few actions (a run that never
        # fails a migration, or never refreshes a cache, reaches the SWITCH and the stale-cache
        # states a uniform choice rarely does); a left-out action still runs when nothing else can.
        swarm_out: frozenset = frozenset()

        @initialize(out=st.sets(st.sampled_from(actions), max_size=3))
        def swarm(self, out):
            self.swarm_out = frozenset(out)
            note(f"left out this run: {sorted(out)}")

        def usable(self) -> dict:
            """The enabled instances a rule may take. The bound on queries is small: spent outside
            a migration's window it finds nothing (nothing is half done), so a design that names
            its windows (`in_window`) queries in them, and outside one only when nothing else can
            run."""
            en = self.enabled()
            if (windowed and en.get("Query") and any(v for a, v in en.items() if a != "Query")
                    and not self.system.in_window()):
                return {a: v for a, v in en.items() if a != "Query"}
            return en

        def allowed(self, name: str) -> bool:
            en = self.usable()
            if not en.get(name):
                return False
            return name not in self.swarm_out or not any(en.get(a) for a in actions if a not in self.swarm_out)

        def state(self) -> dict:
            if self._state is None:
                self._state = self.system.abstract()
            return self._state

        def enabled(self) -> dict:
            if self._enabled is None:
                self._enabled = changing_instances(self.system, self.state())
            return self._enabled

        def take(self, name: str, args: tuple, why: str = "") -> None:
            note(f"{name}{args}{why}")
            self.system.step(name, args)
            self.walk.append((name, args))
            counts[name] += 1
            self._enabled = self._state = None

    for name in actions:
        def make(name):
            def step(self, choice):
                options = self.enabled()[name]
                self.take(name, options[choice % len(options)])
            _name(step, name)
            return precondition(lambda self: self.allowed(name))(rule(choice=st.integers(0, 255))(step))
        setattr(PRMachine, name, make(name))

    # A design whose migration takes many steps in order names them (`progress`): one more rule
    # takes an enabled instance of one of them, so a walk of 30 steps reaches the SWITCH more
    # often than uniform choice among every action does. Each step is still an enabled instance
    # of a spec action.
    progress = tuple(a for a in getattr(system_cls, "progress", ()) if a in actions)
    if progress:
        def advance(self, choice):
            en = self.enabled()
            options = [(a, args) for a in progress for args in en.get(a, ())]
            self.take(*options[choice % len(options)], why=" (progress)")
        _name(advance, "Progress")
        PRMachine.Progress = precondition(lambda self: any(self.enabled().get(a) for a in progress))(
            rule(choice=st.integers(0, 255))(advance))

    # A design that says when a query can see a migration half done (`in_window`: a CLONE or SWITCH
    # in flight, or a cache behind Keeper) gets a rule that queries only then: the bound on
    # queries is small, and uniform choice spends it before any migration starts.
    if windowed and "Query" in actions:
        def query_in_window(self, choice):
            options = self.enabled()["Query"]
            self.take("Query", options[choice % len(options)], why=" (in a window)")
        _name(query_in_window, "QueryInWindow")
        PRMachine.QueryInWindow = precondition(lambda self: bool(self.enabled().get("Query"))
                                               and self.system.in_window())(rule(choice=st.integers(0, 255))(
                                                   query_in_window))

    PRMachine.Stutter = precondition(lambda self: not self.enabled())(rule()(lambda self: None))

    def check(self):
        broken = {k: v for k, v in self.system.invariants().items() if v}
        if broken:
            if walks is not None:
                walks.append(list(self.walk))
            raise ConformanceFailure("; ".join(f"{k}: {v}" for k, v in sorted(broken.items())))
    _name(check, "SpecInvariants")
    PRMachine.SpecInvariants = invariant()(check)
    return PRMachine
