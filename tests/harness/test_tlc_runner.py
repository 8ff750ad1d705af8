from pathlib import Path

import pytest

from harness.tlc import runner
from harness.tlc.values import ModelValue

pytestmark = pytest.mark.tlc
TLA = Path(__file__).parent / "tla"


def test_holding_model_reports_statistics():
    res = runner.run_tlc(TLA / "Counter.tla", TLA / "Counter.cfg", check_deadlock=False)
    assert res.outcome == runner.HOLDS, res.errors
    assert res.ok
    # Log entries record x when raised: none raised 4 states, one raised at a <= x: 2 * 10,
    # both raised at a <= b <= x in either order: 2 * 20. Total 64.
    assert res.distinct_states == 64
    assert res.depth == 6
    assert res.states_generated >= res.distinct_states
    assert res.trace == []


def test_a_short_run_runs_tlc_under_the_first_jit_tier_alone_with_the_same_figures(monkeypatch):
    commands = []
    popen = runner.subprocess.Popen
    monkeypatch.setattr(runner.subprocess, "Popen", lambda cmd, **kw: commands.append(cmd) or popen(cmd, **kw))
    res = runner.run_tlc(TLA / "Counter.tla", TLA / "Counter.cfg", check_deadlock=False, short=True)
    assert res.outcome == runner.HOLDS and (res.distinct_states, res.depth) == (64, 6)
    runner.run_tlc(TLA / "Counter.tla", TLA / "Counter.cfg", check_deadlock=False)
    jar = [cmd.index("-cp") for cmd in commands]
    assert [set(runner.SHORT_RUN_JVM) <= set(cmd[:j]) for cmd, j in zip(commands, jar)] == [True, False]


def test_invariant_violation_comes_with_a_parsed_trace():
    # One worker: with two, TLC's breadth-first trace is not always the shortest one.
    res = runner.run_tlc(TLA / "Counter.tla", TLA / "CounterViolation.cfg", check_deadlock=False, workers=1)
    assert res.outcome == runner.INVARIANT_VIOLATED
    assert res.violated == "BothRaisedFalseInv"
    assert [s.action for s in res.trace] == ["Init", "Raise", "Raise"]
    assert res.trace[0].location is None and "module Counter" in res.trace[1].location
    last = res.trace[-1].state
    assert last["flag"] == {ModelValue("r1"): True, ModelValue("r2"): True}
    assert len(last["log"]) == 2 and last["log"][0]["note"] == 'say "hi"'
    assert {e["who"] for e in last["log"]} == {ModelValue("r1"), ModelValue("r2")}


def test_deadlock_is_reported_as_deadlock_not_success():
    res = runner.run_tlc(TLA / "Counter.tla", TLA / "CounterDeadlock.cfg", check_deadlock=True)
    assert res.outcome == runner.DEADLOCK
    assert not res.ok
    assert res.trace and res.trace[-1].state["x"] == 3


def test_deadlock_check_can_be_turned_off():
    res = runner.run_tlc(TLA / "Counter.tla", TLA / "CounterDeadlock.cfg", check_deadlock=False)
    assert res.outcome == runner.HOLDS


def test_syntax_error_is_a_parse_error_with_sany_text():
    res = runner.run_tlc(TLA / "SyntaxError.tla")
    assert res.outcome == runner.PARSE_ERROR
    assert "line 3" in res.errors[0]


def test_unknown_operator_is_a_semantic_error():
    res = runner.run_tlc(TLA / "UnknownOperator.tla")
    assert res.outcome == runner.SEMANTIC_ERROR
    assert "undefinedThing" in res.errors[0]


def test_time_budget_kills_the_run():
    res = runner.run_tlc(TLA / "Counter.tla", TLA / "CounterHuge.cfg", check_deadlock=False, timeout_s=3)
    assert res.outcome == runner.TIMEOUT
    assert res.duration_s < 30


def test_missing_model_file_is_a_setup_error():
    with pytest.raises(runner.TLCSetupError, match="Nope.tla"):
        runner.run_tlc(TLA / "Nope.tla")


def test_bad_jar_override_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("TLA2TOOLS_JAR", str(tmp_path / "missing.jar"))
    with pytest.raises(runner.TLCSetupError, match="missing.jar"):
        runner.find_jar()


def test_cli_exit_codes(capsys):
    from harness.tlc.__main__ import main

    assert main([str(TLA / "Counter.tla"), "--quiet", "--no-deadlock"]) == 0
    assert main([str(TLA / "Counter.tla"), "--config", str(TLA / "CounterViolation.cfg"), "--quiet", "--no-deadlock",
                 "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "BothRaisedFalseInv" in out and "2: Raise" in out


def test_bounded_simulation_stops_without_claiming_a_proof():
    res = runner.run_tlc(TLA / "Counter.tla", TLA / "Counter.cfg", check_deadlock=False, workers=1,
                         extra_args=["-simulate", "-depth", "10"], jvm_args=["-Dtlc2.TLC.stopAfter=2"], timeout_s=60)
    assert res.outcome == runner.STOPPED
    assert not res.ok
    assert res.states_generated and res.states_generated > 0


def test_simulation_finds_a_violation():
    res = runner.run_tlc(TLA / "Counter.tla", TLA / "CounterViolation.cfg", check_deadlock=False, workers=1,
                         extra_args=["-simulate", "-depth", "10"], jvm_args=["-Dtlc2.TLC.stopAfter=20"], timeout_s=60)
    assert res.outcome == runner.INVARIANT_VIOLATED and res.violated == "BothRaisedFalseInv"


def test_each_run_parses_the_standard_modules_from_a_folder_of_its_own(tmp_path):
    # SANY copies Naturals.tla & co. out of the jar into java.io.tmpdir and parses them there;
    # runs sharing that folder rewrite each other's copies (make test's two workers saw a model
    # that is fine fail with a parse error). Each run must parse its own copies.
    import re
    import tempfile

    log = tmp_path / "tlc.log"
    res = runner.run_tlc(TLA / "Counter.tla", TLA / "Counter.cfg", check_deadlock=False, log_path=log)
    assert res.outcome == runner.HOLDS, res.errors
    standard = re.findall(r"Parsing file (\S+/Naturals\.tla)", log.read_text())
    assert standard, "SANY named no standard module it parsed"
    shared = Path(tempfile.gettempdir()).resolve()
    assert all(Path(f).resolve().parent != shared for f in standard), standard
