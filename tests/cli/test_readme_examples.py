"""Every command README.md and the part READMEs show (issue 17), held to what it claims.

EXAMPLES lists each command once with how it is held: run as written (cheap ones here, the rest
`long`), its `--help` where the README shows a template (FILE, HISTORY_DIR), its Makefile target,
or the test that covers it. A command added to a README and not to EXAMPLES fails the first test,
and so does an entry whose command left the READMEs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_runner import ROOT, no_traceback, run_cli

READMES = ["README.md", "protocol/README.md", "history/README.md", "reference/README.md", "conformance/README.md",
           "checkers/README.md", "agreement/README.md", "spec/README.md", "spec/parallel_replicas/README.md",
           "spec/part_moves/README.md", "traces/README.md"]
COMMAND = re.compile(r"^(\.venv/bin/python|python|make|\.venv/bin/spark-submit|spark-submit|bash) \S")


def shown_commands() -> dict[str, str]:
    """command -> the README showing it first: each line of a fenced block (continuations joined,
    comments cut) and each inline `code` span that reads as a command."""
    found: dict[str, str] = {}
    for name in READMES:
        text = (ROOT / name).read_text()
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
            for line in re.sub(r"\\\n\s*", "", block).splitlines():
                cmd = re.split(r"\s+#\s", line)[0].strip()
                if COMMAND.match(cmd):
                    found.setdefault(cmd, name)
        for span in re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S)):
            if COMMAND.match(span.strip()):
                found.setdefault(span.strip(), name)
    return found


@dataclass
class Run:
    """Run as written (python -> this interpreter); `subs` moves what it writes into the test's folder."""
    code: int
    says: list[str]
    subs: dict = field(default_factory=dict)
    long: bool = False
    zookeeper: bool = False


@dataclass
class Help:
    """A template (FILE, HISTORY_DIR, ...) or a server for a shell: its module's --help must work."""
    argv: list[str]


@dataclass
class Make:
    target: str


@dataclass
class Covered:
    """Run elsewhere, by the test named."""
    by: str


RUN_BUG = ("python -m reference run --bug cleanup_no_delay --add-replicas 1 --rebalance --query-rate 0.5")
EXAMPLES = {
    "make check": Make("check"), "make check-thorough": Make("check-thorough"), "make test": Make("test"), "make setup": Make("setup"), "make bench": Make("bench"),
    "make check-spec": Make("check-spec"), 'make check-spec ARGS="--size all"': Make("check-spec"),
    'make check-spec ARGS="--only MCAssignment"': Make("check-spec"),
    'make check-spec ARGS="--only MCMigration"': Make("check-spec"), "make check-spec ARGS=--record": Make("check-spec"),
    "make test ARGS=tests/protocol": Make("test"), "make help": Make("help"),
    "make test ARGS=\"-m 'not (long or slow or tlc or spark or clickhouse)'\"": Make("test"),
    "make faults": Make("faults"), "make mutation": Make("mutation"),
    'make check-spec ARGS="--only MCPRSelective"': Make("check-spec"),
    'make check-spec ARGS="--only MCPartMoves_stale_local_pins"': Make("check-spec"),
    "python -m reference.part_move_races --out /tmp/pm --version v21_8 --crash-at SOURCE_DROP": Covered(
        "tests/reference/test_part_move_races.py (the command line's verdicts and exit codes)"),
    "python -m reference.part_move_races --out DIR [--version v21_8] [--fixes ...] [--no-dedup] "
    "[--crash-at SOURCE_DROP]": Help(["reference.part_move_races"]),
    "python -m pyspark_jobs.spark_check --input /tmp/pm/history": Covered(
        "tests/checkers/test_checkers_agree.py::test_part_move_histories_get_the_same_verdict_from_all_three"),
    "python -m harness.check_models --finding F27": Run(0, ["F27: MCPartMoves_delays_unbounded",
                                                            "F27: MCPartMoves_post_delay_unbounded",
                                                            "QueryReadShard", "2/2 models as expected"]),
    "python -m harness.check_models --finding F24": Run(0, ["F24: MCPRSelective_union", "F24: MCPRMigration_union",
                                                            "PRAnnounce", "2/2 models as expected"]),
    "python -m harness.check_models --finding F3": Run(0, ["F3: MCMigrationWrites_clone_from_source_only",
                                                           "CoordinatorSwitch", "1/1 models as expected"]),
    "python -m reference run --profile racing --history DIR": Help(["reference", "run"]),
    "python -m reference gantt": Help(["reference", "gantt"]),
    "python -m agreement": Help(["agreement"]),
    "python -m history.schema": Run(0, ["| table | column | type | checkers | meaning |", "| `inserts` |"]),
    "python -m reference run --profile PROFILE --seed N": Covered(
        "tests/reference/test_races.py (each profile's run and its exit codes)"),
    "python -m lab.teeth --seeds N": Help(["lab.teeth"]),
    "python -m lab.guard_clauses": Covered("tests/lab/test_guard_clauses.py (one clause dropped for real; the "
                                           "whole run, about 15 min, records the table it checks)"),
    "python -m lab.guard_clauses --check": Covered("make check-thorough's guard-clauses stage (tests/harness/"
                                                   "test_check_all.py); tests/lab/test_guard_clauses.py keeps the "
                                                   "table it compares with true"),
    "python -m lab.window_coverage": Covered("tests/reference/test_race_windows.py (the windows profiles); make "
                                             "spark-check prints it for every profile"),
    "python -m lab.mutation_spec --actions ClientQueryFails --liveness MCLivenessQuery": Covered(
        "tests/spec/test_invariant_domains.py (the guard's drop mutant holds on MCRestartQuery and breaks QueryAnsweredProp)"),
    ".venv/bin/python -m lab.switch_table --profile ci": Covered(
        "tests/lab/test_switch_table.py (the ci table's rows as tests)"),
    "python -m lab.switch_table": Covered("tests/lab/test_switch_table.py (at the ci profile)"),
    "python -m lab.switch_table --profile ci": Covered(
        "tests/lab/test_switch_table.py (the ci table's rows as tests)"),
    "python -m lab.switch_table --profile P": Help(["lab.switch_table"]),
    "python -m lab.switch_table --profile ci [--undirected]": Help(["lab.switch_table"]),
    "python -m lab.mutation_spec --check-witnesses": Covered(
        "tests/lab/test_mutation_spec.py (the unmutated model reaches its witness; a mutant that never starts a "
        "migration does not)"),
    "python -m lab.mutation_spec --actions ClientReceiveAck --models MCRetry": Covered(
        "tests/spec/test_invariant_domains.py (the same mutants on MCRetry, killed by AckedCommittedInv)"),
    '.venv/bin/python -m pytest tests/lab/test_teeth.py -m "long or not long" -q': Covered(
        "make check's spark-check stage checks the teeth's histories with test_teeth.py's assertions, its "
        "long tests the teeth it does not, check-thorough every case, make test the quick one"), "make conformance": Make("conformance"), "make spark-check": Make("spark-check"),
    "bash .ci/run": Covered(".ci/run is make test on a clean clone: running it here would run this test again"),
    "python -m reference run ...": Help(["reference", "run"]),
    "python -m reference run --design pr102244": Covered(
        "tests/traces/test_pr_design_traces.py (record_reference runs it on ZooKeeper)"),
    "python -m reference run --zk 127.0.0.1:PORT --data /tmp/d --history /tmp/h --blocks 40 --add-replicas 1 "
    "--rebalance": Covered("tests/reference/test_attach.py (this run killed at four phases)"),
    "python -m reference run --attach --zk 127.0.0.1:PORT --data /tmp/d --history /tmp/h": Covered(
        "tests/reference/test_attach.py (attached after each kill, one history judged by the oracle and DuckDB)"),
    "python -m reference": Help(["reference"]), "python -m harness.tlc": Help(["harness.tlc"]),
    # the README's table of the commands the exit-status contract covers (test_declared_inputs.py holds each)
    **{f"python -m {m}": Help([m]) for m in (
        "agreement.pr102244_repro", "checkers.duckdb_check", "harness.bootstrap", "harness.check_all",
        "harness.clickhouse", "lab.bench", "lab.faults", "lab.mutation_layers", "lab.polars_check", "lab.teeth",
        "reference.part_move_races", "traces")},
    "python spec/rfc/gen_cfgs.py": Covered("tests/cli/test_declared_inputs.py::test_the_cfg_generators_refuse_what_"
                                           "they_do_not_know"),
    "python -m harness.check_models": Help(["harness.check_models"]),
    "python -m reference run --history DIR": Help(["reference", "run"]),
    "python -m harness.long_tests": Help(["harness.long_tests"]),
    "python -m lab.load_sweep": Help(["lab.load_sweep"]),
    ".venv/bin/python -m agreement [--write-readme]": Help(["agreement"]),
    ".venv/bin/python -m traces clickhouse": Covered("tests/traces/test_clickhouse_traces.py (record, validate; "
                                                     "the same calls), make traces"),
    "python -m traces clickhouse": Covered("tests/traces/test_clickhouse_traces.py, make traces"),
    ".venv/bin/python -m traces clickhouse --drop-while-lost": Covered(
        "tests/traces/test_clickhouse_traces.py::test_1816s_clone_keeping_a_partition_dropped_while_it_was_lost_"
        "is_rejected_at_the_clone (the same workload)"),
    ".venv/bin/python -m traces clickhouse --runs 4 --inserts 60 --keep build/traces": Make("traces"),
    ".venv/bin/python -m traces clickhouse [--runs 4 --inserts 60]": Make("traces"),
    ".venv/bin/python -m traces validate DATA_DIR --root /clickhouse/tables/01/t --replicas r1,r2,r3": Covered(
        "tests/traces/test_clickhouse_traces.py::test_the_command_line_validates_a_recorded_log_and_refuses_what_it_"
        "cannot_read"),
    "python -m traces validate": Help(["traces", "validate"]),
    "make traces": Make("traces"),
    ".venv/bin/python -m traces reference": Covered(
        "tests/traces/test_reference_traces.py::test_the_reference_subcommand_says_which_and_exits_by_the_contract"),
    ".venv/bin/python -m traces reference --bug no_dedup": Covered(
        "tests/traces/test_reference_traces.py::test_no_dedup_writes_a_retried_block_again_and_the_trace_is_"
        "rejected_there (the same run)"),
    "python -m traces validate DATA_DIR --root TABLE_PATH --replicas r1,r2,r3": Help(["traces", "validate"]),
    ".venv/bin/python -m traces reference --profile racing": Make("traces"),
    ".venv/bin/python -m traces reference --design rfc --design pr102244": Make("traces"),
    ".venv/bin/python -m traces reference --design pr102244": Covered(
        "tests/traces/test_pr_design_traces.py::test_the_reference_subcommand_takes_the_design_and_refuses_what_it_"
        "lacks"),
    ".venv/bin/python -m traces reference --design pr102244 --bug complete_without_rescan": Covered(
        "tests/traces/test_pr_design_traces.py::test_a_broken_switch_that_writes_differently_is_rejected_at_its_step"),
    ".venv/bin/python -m traces reference --profile racing --profile losing --profile leaving --keep build/traces":
        Make("traces"),
    "python -m lab.trace_teeth --record": Help(["lab.trace_teeth"]),
    "python -m lab.trace_teeth --design pr102244 --record": Help(["lab.trace_teeth"]),
    "python -m traces reference --design pr102244": Covered(
        "tests/traces/test_pr_design_traces.py::test_the_reference_subcommand_takes_the_design_and_refuses_what_it_"
        "lacks"),
    "python -m lab.findings_under": Help(["lab.findings_under"]),
    "python -m lab.trace_teeth --jobs 2 --record": Help(["lab.trace_teeth"]),
    "python -m agreement --write-readme": Help(["agreement"]),
    ".venv/bin/python -m harness.clickhouse --replicas 2": Help(["harness.clickhouse"]),
    "python -m lab.bench --only rebalance": Help(["lab.bench"]),
    ".venv/bin/python -m harness.tlc spec/assignment/MCAssignment.tla --config spec/assignment/MCAssignment_blind_write.cfg --no-deadlock":
        Run(1, ["invariant_violated", "AssignmentChangesOnlyByCASInv"]),
    ".venv/bin/python -m harness.tlc spec/rfc/MCSelectiveReplication.tla --config spec/rfc/MCMigration_cleanup_no_delay.cfg"
    " --no-deadlock --svg build/cleanup_no_delay.svg": Run(1, ["CleanupSafeInv", "sequence diagram written to"],
                                                          subs={"build/": "{tmp}/"}),
    # A model that violates in seconds: this test is about --diff, and check-spec runs every model.
    ".venv/bin/python -m harness.tlc spec/rfc/MCSelectiveReplication.tla --config spec/rfc/MCFilteredLog_filter_with_stale_cache.cfg"
    " --no-deadlock --diff --workers 1": Run(1, ["invariant_violated, OwnersCompleteInv",
                                                 "2: ClientSendInsert\n    ins = <<"]),   # only what changed
    # reference/README.md
    "python -m reference run --replicas 10 --months 3 --blocks 40 --add-replicas 2 --rebalance --fault-rate 0.05"
    " --history /tmp/history": Run(0, ["REBALANCE done", "history check: 0 violations", "history written to"],
                                   subs={"/tmp/history": "{tmp}/history"}, long=True),
    RUN_BUG: Run(1, ["history check: ", "missed row"]),
    "python -m reference run --lose r2": Run(0, ["DROP REPLICA r2", "REPAIR done", "history check: 0 violations"]),
    "python -m reference run --lose r2 --bug repair_without_clone": Run(1, ["history check: ", "OwnersCompleteInv"]),
    "python -m harness.zookeeper": Covered("test_cli_housekeeping.py::test_zookeeper_for_the_shell_prints_its_address"
                                           "_and_stops_on_sigterm"),
    "python -m reference run --zk 127.0.0.1:PORT --blocks 4": Run(0, ["history check: 0 violations"], zookeeper=True),
    "python -m reference tables --zk 127.0.0.1:PORT": Run(0, ["system.replicas (3 rows)"], zookeeper=True),
    "python -m reference tables --zk 127.0.0.1:PORT --show system.selective_assignments --format jsoneachrow": Run(
        0, ['{"partition_id":"2024'], zookeeper=True),
    "python -m reference run --blocks 4 --format tsv --show system.replicas": Run(
        0, ["replica_name\tis_active\tlog_pointer", "\nr1\t1\t", "history check: 0 violations"]),
    "python -m reference run --replicas 4 --blocks 20 --add-replicas 2 --rebalance --placement-chart build/placement.png":
        Run(0, ["REBALANCE done", "placement chart written to", "history check: 0 violations"], subs={"build/": "{tmp}/"}),
    "python -m reference gantt --ingest 2.5 --out build/gantt-sim.png": Run(0, ["makespan", "wrote "],
                                                                          subs={"build/": "{tmp}/"}),
    "python -m reference gantt --run --out build/gantt-run.png": Run(0, ["switched", "wrote "],
                                                                     subs={"build/": "{tmp}/"}, long=True),
    "python -m reference run --design pr102244 --as-code --add-replicas 1 --rebalance": Run(
        1, ["rebalancer done", "history check: ", "OwnersCompleteInv"]),
    "python -m reference repro reference/pr102244/repro/PR-F2.toml": Run(
        1, ["expectation failed: both acknowledged INSERTs readable: got 1, expected 2", "PR-F2 shown"]),
    "python -m reference repro reference/pr102244/repro/PR-F2.toml --fixed": Run(0, ["verdict: holds"]),
    "python -m reference repro": Help(["reference", "repro"]),
    "python -m agreement repro FILE": Covered("tests/agreement/test_pr102244_repro_http.py (servers started there)"),
    # conformance/README.md
    # What make test runs as tests/conformance/ (the README says so); again here it took over 10 minutes.
    ".venv/bin/python -m conformance --profile ci": Covered("tests/conformance/ (the ci profile's stages as tests)"),
    ".venv/bin/python -m conformance --profile thorough": Make("check-thorough"),
    "python -m conformance --profile thorough": Make("check-thorough"),
    "python -m conformance": Help(["conformance"]), "python -m conformance --profile dev": Make("conformance"),
    "python -m conformance replay FILE": Help(["conformance", "replay"]),
    ".venv/bin/python -m conformance replay build/conformance/machine-MCRetry_no_dedup.cfg.json":
        Covered("test_replay_of_the_file_make_conformance_writes (long)"),
    ".venv/bin/python -m conformance replay build/conformance/machine-MCRetry_no_dedup.cfg.json --svg build/walk.svg":
        Covered("tests/cli/test_pictures.py::test_conformance_walk_as_a_sequence_diagram (that walk, written by the test)"),
    # checkers/README.md
    ".venv/bin/spark-submit pyspark_jobs/spark_check.py --input HISTORY_DIR":
        Covered("tests/checkers/test_spark_cluster.py: .venv/bin/spark-submit from a shell without the venv"),
    ".venv/bin/spark-submit pyspark_jobs/spark_check.py --input HISTORY_DIR [--report out.json]":
        Covered("tests/checkers/test_spark_cluster.py: .venv/bin/spark-submit from a shell without the venv"),
    ".venv/bin/python -m pyspark_jobs.spark_check --input HISTORY_DIR [--master local[2]]":
        Help(["pyspark_jobs.spark_check"]),
    "python -m lab.spark_runs --scale small": Make("spark-check"),
}


def test_every_command_the_readmes_show_is_listed_here():
    shown = shown_commands()
    assert len(shown) > 30  # the extraction finds the READMEs' commands, not nothing
    assert sorted(set(shown) - set(EXAMPLES)) == [], "shown in a README but not in EXAMPLES"
    assert sorted(set(EXAMPLES) - set(shown)) == [], "in EXAMPLES but no README shows it any more"


def test_make_targets_exist():
    rules = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    assert {e.target for e in EXAMPLES.values() if isinstance(e, Make)} <= rules


def documented_options() -> dict[tuple[str, ...], set[str]]:
    """Each `python -m MODULE [SUBCOMMAND]` the READMEs show with options, and the options shown."""
    out: dict[tuple[str, ...], set[str]] = {}
    for cmd in EXAMPLES:
        words = [w.strip("[]") for w in cmd.split()]
        if words[0] not in ("python", ".venv/bin/python") or words[1] != "-m" or words[2] == "pytest":
            continue
        # a subcommand is a bare lower-case word (HISTORY_DIR and paths are arguments)
        argv = words[2:3] + [w for w in words[3:4] if w.isidentifier() and w.islower()]
        out.setdefault(tuple(argv), set()).update(w.split("=")[0] for w in words[3:] if w.startswith("--"))
    return {argv: options for argv, options in out.items() if options}


@pytest.mark.parametrize("argv, options", sorted(documented_options().items()), ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_every_option_the_readmes_show_is_one_the_command_takes(argv, options, tmp_path):
    # A command moved or an option renamed leaves the READMEs' text behind: `python -m conformance
    # --switch-table` stood in conformance/README.md for weeks after the table moved to
    # lab.switch_table, its examples "covered" by the tests of the table itself.
    ran = run_cli(["-m", *argv, "--help"], tmp_path / "tmp")
    assert ran.code == 0 and "usage:" in ran.out and no_traceback(ran.err), ran.text
    unknown = sorted(o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", ran.out))
    assert unknown == [], f"python -m {' '.join(argv)} --help does not list {unknown}"


@pytest.mark.parametrize("argv", sorted({tuple(e.argv) for e in EXAMPLES.values() if isinstance(e, Help)}), ids=" ".join)
def test_templates_have_working_help(argv, tmp_path):
    ran = run_cli(["-m", *argv, "--help"], tmp_path / "tmp")
    assert ran.code == 0 and "usage:" in ran.out and no_traceback(ran.err), ran.text


def _argv(cmd: str, tmp: Path, zk: str | None) -> list[str]:
    example = EXAMPLES[cmd]
    for old, new in example.subs.items():
        cmd = cmd.replace(old, new.format(tmp=tmp))
    if zk:
        cmd = cmd.replace("127.0.0.1:PORT", zk)
    words = cmd.split()
    assert words[0] in ("python", ".venv/bin/python") and words[1] == "-m", cmd
    return words[1:]


RUNS = [pytest.param(cmd, id=cmd[:90], marks=[m for m, on in ((pytest.mark.long, e.long),
                                                             (pytest.mark.zookeeper, e.zookeeper)) if on])
        for cmd, e in EXAMPLES.items() if isinstance(e, Run)]


@pytest.mark.parametrize("cmd", RUNS)
def test_example_does_what_the_readme_says(cmd, tmp_path, request):
    example = EXAMPLES[cmd]
    zk = None
    if example.zookeeper:
        zk = request.getfixturevalue("zk_chroot")
        if "tables" in cmd:  # a table to show: the README's run on the same server first
            first = run_cli(_argv("python -m reference run --zk 127.0.0.1:PORT --blocks 4", tmp_path, zk), tmp_path / "t0")
            assert first.code == 0, first.text
    ran = run_cli(_argv(cmd, tmp_path, zk), tmp_path / "tmp", timeout=600)
    assert ran.code == example.code, f"{cmd}: exit {ran.code}\n{ran.text[-3000:]}"
    assert no_traceback(ran.err), ran.err
    missing = [s for s in example.says if s not in ran.text]
    assert not missing, f"{cmd}: {missing} not in\n{ran.text[-3000:]}"


@pytest.mark.long
def test_replay_of_the_file_make_conformance_writes(tmp_path):
    """conformance/README.md replays a model machine's walk of MCRetry_no_dedup: the walk
    `make conformance` (stage 5, `hunt`) writes, replayed by the command as shown."""
    import os
    os.environ.setdefault("CONFORMANCE_PROFILE", "ci")
    from hypothesis import settings

    from conformance.__main__ import graph_of, hunt
    from conformance.machines import profile
    cfg = "MCRetry_no_dedup.cfg"
    r = hunt(cfg, graph_of(cfg), settings(profile(), max_examples=1000, stateful_step_count=20, database=None),
             failures=tmp_path)
    assert r["failed"] and Path(r["failure_file"]).name == f"machine-{cfg}.json"
    ran = run_cli(["-m", "conformance", "replay", r["failure_file"]], tmp_path / "tmp")
    assert ran.code == 1 and no_traceback(ran.err) and "step " in ran.out, ran.text
