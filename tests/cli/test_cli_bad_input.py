"""Bad input to every command line (issue 17): each case is run as a user would run it, and must
exit with the contract's code (2 bad input, 3 environment; harness/cli_args.py), say what was wrong
naming the input, show no traceback, and leave nothing behind: its own folder as it was, no
temporary file, the checkout unchanged (and Keeper unchanged where one is involved).

The Spark checker's bad-input cases live in tests/checkers/test_bad_input.py (20 cases: a folder
missing, a table missing, two formats of one table, a truncated Parquet file, an unreadable page,
a missing column in Parquet and in JSONL, a wrong type, no final snapshot, every table empty, a
malformed JSONL line, an unknown status, a non-numeric row_id, replication_factor "two", a JSON
array line, a null row_id, nothing acknowledged, two run rows, parts after the last assignment,
no --input), plus Java that cannot start and an unreachable cluster (exit 3).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_runner import ROOT, no_traceback, run_cli, tree_state

from harness.ports import free_port

REF, TLC, MODELS, CONF, ZK = "reference", "harness.tlc", "harness.check_models", "conformance", "harness.zookeeper"
ASSIGNMENT_WALK = {"module": "Assignment", "cfg": "MCAssignment.cfg", "bugs": []}


@dataclass
class Case:
    id: str
    module: str
    args: list[str]
    code: int
    says: list[str]  # every one must appear in what the command printed
    files: dict = field(default_factory=dict)  # name -> text (a str) or None (a folder), made in {home}
    env: dict = field(default_factory=dict)


def run(*args: str) -> list[str]:
    return ["run", "--blocks", "2", *args]


CASES = [
    # python -m reference run: every numeric option's range, named by argparse
    Case("fault_rate_above_1", REF, run("--fault-rate", "1.5"), 2, ["--fault-rate", "between 0 and 1", "1.5"]),
    Case("fault_rate_negative", REF, run("--fault-rate", "-1"), 2, ["--fault-rate", "-1"]),
    Case("fault_rate_nan", REF, run("--fault-rate", "nan"), 2, ["--fault-rate", "finite"]),
    Case("fault_rate_1_acknowledges_nothing", REF, run("--fault-rate", "1"), 2,
         ["no INSERT was acknowledged", "--fault-rate 1"]),
    Case("rows_0", REF, run("--rows", "0"), 2, ["--rows", ">= 1", "not 0"]),
    Case("blocks_negative", REF, ["run", "--blocks", "-1"], 2, ["--blocks", "not -1"]),
    Case("blocks_not_a_number", REF, ["run", "--blocks", "two"], 2, ["--blocks", "'two'"]),
    Case("months_0", REF, run("--months", "0"), 2, ["--months", "not 0"]),
    Case("query_rate_negative", REF, run("--query-rate", "-5"), 2, ["--query-rate", "-5"]),
    Case("max_concurrent_0", REF, run("--max-concurrent", "0"), 2, ["--max-concurrent", "not 0"]),
    Case("replicas_0", REF, run("--replicas", "0"), 2, ["--replicas", "not 0"]),
    Case("buckets_0", REF, run("--buckets", "0"), 2, ["--buckets", "not 0"]),
    Case("add_replicas_negative", REF, run("--add-replicas", "-2"), 2, ["--add-replicas", "not -2"]),
    Case("replication_factor_above_replicas", REF, run("--replication-factor", "4"), 2,
         ["--replication-factor 4", "above the 3 replicas"]),
    # replica names, before the workload runs
    Case("crash_every_replica", REF, run("--crash", "r1", "--crash", "r2", "--crash", "r3"), 2,
         ["--crash", "every replica"]),
    Case("crash_unknown_replica", REF, run("--crash", "r9"), 2, ["--crash r9", "no such replica"]),
    Case("crash_twice", REF, run("--crash", "r1", "--crash", "r1"), 2, ["--crash r1", "twice"]),
    Case("restart_not_crashed", REF, run("--restart", "r2"), 2, ["--restart r2", "--crash"]),
    Case("lose_every_replica", REF, run("--lose", "r1", "--lose", "r2", "--lose", "r3"), 2, ["--lose", "every replica"]),
    Case("lose_unknown_replica", REF, run("--lose", "r9"), 2, ["--lose r9", "no such replica"]),
    Case("lose_below_the_replication_factor", REF, run("--replicas", "2", "--lose", "r2"), 2,
         ["--lose r2", "fewer than --replication-factor"]),
    Case("restart_a_lost_replica", REF, run("--lose", "r2", "--restart", "r2"), 2, ["--restart r2", "lost for good"]),
    Case("reassign_to_unknown_replica", REF, run("--reassign", "202401-5:r9"), 2, ["--reassign 202401-5:r9", "r9"]),
    Case("reassign_malformed_partition", REF, run("--reassign", "202401_5:r2"), 2,
         ["--reassign 202401_5:r2", "malformed partition id '202401_5'"]),
    Case("reassign_without_replica", REF, run("--reassign", "202401-5"), 2, ["--reassign", "PARTITION:REPLICA"]),
    Case("unknown_switch", REF, run("--bug", "nope"), 2, ["--bug", "unknown switch", "nope"]),
    Case("unknown_history_format", REF, run("--history-format", "csv"), 2, ["--history-format", "'csv'"]),
    # --format: ClickHouse's formats print one table
    Case("run_unknown_format", REF, run("--format", "csv"), 2, ["--format", "'csv'"]),
    Case("run_tsv_of_two_tables", REF, run("--format", "tsv"), 2, ["--format tsv", "one table", "--show"]),
    Case("run_tsv_of_the_pr_design", REF, run("--design", "pr102244", "--format", "tsv", "--show", "system.replicas"), 2,
         ["--format tsv", "pr102244"]),
    Case("parallel_replicas_unknown_coordinator", REF, run("--profile", "parallel", "--parallel-replicas", "first"), 2,
         ["--parallel-replicas", "'first'"]),
    Case("parallel_replicas_on_the_quiet_run", REF, run("--parallel-replicas", "union"), 2,
         ["--parallel-replicas", "--profile parallel"]),
    Case("tables_unknown_format", REF, ["tables", "--zk", "127.0.0.1:1", "--format", "xml"], 2, ["--format", "'xml'"]),
    Case("tables_jsoneachrow_of_every_table", REF, ["tables", "--zk", "127.0.0.1:1", "--format", "jsoneachrow"], 2,
         ["--format jsoneachrow", "--show"]),
    Case("placement_chart_without_rebalance", REF, run("--placement-chart", "{home}/p.png"), 2,
         ["--placement-chart", "--rebalance"]),
    Case("placement_chart_not_a_picture", REF, run("--rebalance", "--placement-chart", "{home}/p.jpg"), 2,
         ["--placement-chart", ".png or .svg"]),
    Case("placement_chart_is_a_folder", REF, run("--rebalance", "--placement-chart", "{home}/a_dir"), 2,
         ["--placement-chart", "a_dir", "is a folder"], files={"a_dir": None}),
    # output paths, before the run
    Case("history_is_a_file", REF, run("--history", "{home}/a_file"), 2, ["--history", "a_file", "not a folder"],
         files={"a_file": "x"}),
    Case("history_under_a_file", REF, run("--history", "{home}/a_file/h"), 2, ["--history", "a_file"],
         files={"a_file": "x"}),
    Case("data_is_a_file", REF, run("--data", "{home}/a_file"), 2, ["--data", "a_file"], files={"a_file": "x"}),
    # Keeper addresses
    # --attach (issue 38): what it carries on must be named, and is the killed run's own
    Case("attach_without_zk", REF, ["run", "--attach", "--data", "{home}/d", "--history", "{home}/h"], 2,
         ["--attach", "--zk", "in-memory"]),
    Case("attach_without_history", REF, ["run", "--attach", "--zk", "127.0.0.1:1", "--data", "{home}/d"], 2,
         ["--attach", "--history", "--data"]),
    Case("attach_with_fresh", REF, ["run", "--attach", "--fresh", "--zk", "127.0.0.1:1", "--data", "{home}/d",
                                    "--history", "{home}/h"], 2, ["--attach", "--fresh"]),
    Case("attach_to_a_folder_no_run_journaled", REF, ["run", "--attach", "--zk", "127.0.0.1:1", "--data", "{home}/d",
                                                      "--history", "{home}/h"], 2, ["--attach", "run.json", "--history"],
         files={"h": None}),
    Case("attach_with_another_workload", REF, ["run", "--attach", "--blocks", "7", "--zk", "127.0.0.1:1", "--data",
                                               "{home}/d", "--history", "{home}/h"], 2,
         ["--attach carries on the run", "--blocks 7", "--blocks 40"],
         files={"h": None, "h/journal": None, "h/journal/run.json": json.dumps(
             {"options": {"blocks": 40}, "running": ["r1"], "done": []})}),
    Case("zk_without_port", REF, run("--zk", "nohost"), 2, ["--zk", "HOST:PORT", "'nohost'"]),
    Case("zk_port_out_of_range", REF, run("--zk", "127.0.0.1:70000"), 2, ["--zk", "70000"]),
    Case("zk_nobody_listens", REF, run("--zk", "127.0.0.1:{free_port}"), 3,
         ["no ZooKeeper answers at 127.0.0.1:", "python -m harness.zookeeper"]),
    Case("root_not_a_path", REF, run("--root", "tables/t"), 2, ["--root", "'tables/t'"]),
    Case("tables_without_zk", REF, ["tables"], 2, ["--zk"]),
    Case("unknown_subcommand", REF, ["frobnicate"], 2, ["'frobnicate'"]),
    # python -m reference gantt
    Case("gantt_old_0", REF, ["gantt", "--old", "0"], 2, ["--old", "not 0"]),
    Case("gantt_new_0", REF, ["gantt", "--new", "0"], 2, ["--new", "not 0"]),
    Case("gantt_rf_above_old", REF, ["gantt", "--old", "2", "--rf", "3", "--out", "{home}/g.png"], 2,
         ["--rf 3", "--old"]),
    Case("gantt_read_0", REF, ["gantt", "--read", "0"], 2, ["--read", "> 0"]),
    Case("gantt_out_is_a_folder", REF, ["gantt", "--out", "{home}/a_dir"], 2, ["--out", "a_dir", "is a folder"],
         files={"a_dir": None}),
    # python -m harness.tlc
    Case("tlc_no_such_spec", TLC, ["spec/Nope.tla"], 2, ["spec/Nope.tla", "no such file"]),
    Case("tlc_no_such_config", TLC, ["spec/assignment/MCAssignment.tla", "--config", "spec/nope.cfg"], 2, ["--config", "nope.cfg"]),
    Case("tlc_no_cfg_beside_spec", TLC, ["{home}/Lone.tla"], 2, ["Lone.cfg", "--config"],
         files={"Lone.tla": "---- MODULE Lone ----\n====\n"}),
    Case("tlc_workers_0", TLC, ["spec/assignment/MCAssignment.tla", "--workers", "0"], 2, ["--workers", "not 0"]),
    Case("tlc_timeout_negative", TLC, ["spec/assignment/MCAssignment.tla", "--timeout", "-1"], 2, ["--timeout", "-1"]),
    Case("tlc_simulate_0", TLC, ["spec/assignment/MCAssignment.tla", "--simulate", "0"], 2, ["--simulate", "not 0"]),
    Case("tlc_without_java", TLC, ["spec/assignment/MCAssignment.tla", "--config", "spec/assignment/MCAssignment_blind_write.cfg"], 3,
         ["java not found"], env={"PATH": "/nonexistent"}),
    Case("tlc_svg_is_a_folder", TLC, ["spec/assignment/MCAssignment.tla", "--svg", "{home}/a_dir"], 2, ["--svg", "a_dir", "is a folder"],
         files={"a_dir": None}),
    Case("tlc_svg_under_a_file", TLC, ["spec/assignment/MCAssignment.tla", "--svg", "{home}/a_file/t.svg"], 2, ["--svg", "a_file"],
         files={"a_file": "x"}),
    # python -m harness.check_models
    Case("models_unknown_only", MODELS, ["--only", "MCNope"], 2, ["--only MCNope", "no such model"]),
    Case("models_unknown_size", MODELS, ["--size", "medium"], 2, ["--size", "'medium'"]),
    Case("models_report_under_a_file", MODELS, ["--report", "{home}/a_file/r.json"], 2, ["--report", "a_file"],
         files={"a_file": "x"}),
    # python -m conformance
    Case("conformance_unknown_profile", CONF, ["--profile", "nope"], 2, ["--profile", "'nope'"]),
    Case("conformance_report_is_a_folder", CONF, ["--report", "{home}/a_dir"], 2, ["--report", "a_dir"],
         files={"a_dir": None}),
    Case("replay_without_file", CONF, ["replay"], 2, ["python -m conformance replay: bad input:", "FILE"]),
    Case("replay_missing_file", CONF, ["replay", "{home}/gone.json"], 2, ["gone.json", "no such file"]),
    Case("replay_not_json", CONF, ["replay", "{home}/f.json"], 2, ["f.json", "not a failure file"],
         files={"f.json": "steps: 1"}),
    Case("replay_a_json_list", CONF, ["replay", "{home}/f.json"], 2, ["f.json", "not a failure file"],
         files={"f.json": "[1, 2]"}),
    Case("replay_without_steps", CONF, ["replay", "{home}/f.json"], 2, ["f.json", "'steps' is a required property"],
         files={"f.json": json.dumps(ASSIGNMENT_WALK)}),
    Case("replay_unknown_model", CONF, ["replay", "{home}/f.json"], 2, ["f.json", "MCNope.cfg"],
         files={"f.json": json.dumps({**ASSIGNMENT_WALK, "cfg": "MCNope.cfg", "steps": []})}),
    Case("replay_svg_under_a_file", CONF, ["replay", "{home}/f.json", "--svg", "{home}/a_file/w.svg"], 2,
         ["--svg", "a_file"], files={"f.json": json.dumps({**ASSIGNMENT_WALK, "steps": []}), "a_file": "x"}),
    Case("replay_svg_without_its_file", CONF, ["replay", "{home}/f.json", "--svg"], 2, ["--svg", "expected one argument"],
         files={"f.json": json.dumps({**ASSIGNMENT_WALK, "steps": []})}),
    # python -m lab.load_sweep: refused before a server or Spark starts
    Case("load_sweep_clients_0", "lab.load_sweep", ["--clients", "4,0"], 2, ["--clients", ">= 1", "not 0"]),
    Case("load_sweep_clients_not_numbers", "lab.load_sweep", ["--clients", "many"], 2, ["--clients", "'many'"]),
    Case("load_sweep_two_replicas", "lab.load_sweep", ["--replicas", "2"], 2, ["--replicas", ">= 3", "not 2"]),
    Case("load_sweep_seconds_too_short", "lab.load_sweep", ["--seconds", "1"], 2, ["--seconds", ">= 4"]),
    Case("load_sweep_seconds_nan", "lab.load_sweep", ["--seconds", "nan"], 2, ["--seconds", "nan"]),
    # python -m harness.zookeeper
    Case("zookeeper_unknown_option", ZK, ["--port", "2181"], 2, ["--port"]),
    Case("zookeeper_home_without_jars", ZK, [], 3, ["ZOOKEEPER_HOME", "no zookeeper jar"],
         env={"ZOOKEEPER_HOME": "{home}/a_dir"}, files={"a_dir": None}),
]


def _make(home: Path, files: dict) -> None:
    home.mkdir(parents=True)
    for name, text in files.items():
        if text is None:
            (home / name).mkdir()
        else:
            (home / name).write_text(text)


def _run_case(case: Case, base: Path) -> dict:
    home, tmp = base / case.id / "home", base / case.id / "tmp"
    _make(home, case.files)
    fill = {"home": str(home), "free_port": str(free_port())}
    before = tree_state(home)
    ran = run_cli(["-m", case.module, *(a.format(**fill) for a in case.args)], tmp,
                  env={k: v.format(**fill) for k, v in case.env.items()})
    return {"ran": ran, "home_changed": before != tree_state(home), "left_in_tmp": sorted(p.name for p in tmp.iterdir())}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case at once, three at a time (each is mostly a Python start-up), the checkout's files
    compared before and after the whole batch."""
    base = tmp_path_factory.mktemp("bad-input")
    checkout = tree_state(ROOT)
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = dict(zip((c.id for c in CASES), pool.map(lambda c: _run_case(c, base), CASES)))
    return done, checkout != tree_state(ROOT)


def test_there_are_forty_cases_or_more():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_with_its_code_and_one_named_line(case, results):
    r = results[0][case.id]
    ran = r["ran"]
    assert ran.code == case.code, f"{ran.argv}: exit {ran.code}\n{ran.text}"
    assert no_traceback(ran.err), ran.err
    missing = [s for s in case.says if s not in ran.text]
    assert not missing, f"{ran.argv}: {missing} not in\n{ran.text}"
    assert not r["home_changed"], f"{ran.argv} changed {case.files}"
    assert r["left_in_tmp"] == [], f"{ran.argv} left {r['left_in_tmp']} in the temporary folder"
    if "usage:" not in ran.err:  # ours (bad input or environment), not argparse's usage + error
        assert len(ran.err.strip().splitlines()) == 1, ran.err


def test_no_case_changed_the_checkout(results):
    assert not results[1]


@pytest.mark.zookeeper
@pytest.mark.parametrize("args, says", [
    (["tables", "--zk", "{zk}", "--root", "/nothing/here"], ["--root /nothing/here", "no selective table", "/nothing/here/"]),
    (["tables", "--zk", "{zk}/missing"], ["--zk", "no znode /tests/", "/missing"]),
    (run("--zk", "{zk}/missing"), ["--zk", "no znode /tests/", "/missing"]),
    (run("--zk", "{zk}", "--crash", "r9"), ["--crash r9"]),
    (run("--zk", "{zk}", "--history", "/proc/h"), ["--history", "/proc"]),
], ids=["tables_of_a_missing_znode", "tables_under_a_missing_chroot", "run_under_a_missing_chroot",
        "crash_unknown_replica_on_zookeeper", "history_unwritable_on_zookeeper"])
def test_bad_input_on_zookeeper_changes_nothing_there(args, says, zk_chroot, zk_client, tmp_path):
    def znodes(path="/"):
        return {path: zk_client.get(path)[1].mzxid, **{k: v for c in zk_client.get_children(path)
                                                        for k, v in znodes(f"{path.rstrip('/')}/{c}").items()}}
    zk_client.ensure_path("/clickhouse")  # something there to stay as it was
    before = znodes()
    ran = run_cli(["-m", REF, *(a.format(zk=zk_chroot) for a in args)], tmp_path / "tmp")
    assert ran.code == 2 and no_traceback(ran.err), ran.text
    assert all(s in ran.err for s in says), ran.err
    assert znodes() == before
    assert not list((tmp_path / "tmp").iterdir())
