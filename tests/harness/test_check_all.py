import pytest

from harness import check_all


@pytest.fixture(autouse=True)
def no_reaping_in_the_test_process(monkeypatch):
    """check_all makes its process a subreaper and reaps any child it has between steps, giving a
    running one 3 s. In a pytest worker, whose children are the fixtures' servers, that would reap
    what is not check_all's and wait 3 s twice a step: 72 s for one test in make test (2026-12-01)."""
    monkeypatch.setattr(check_all, "_adopt_orphans", lambda: None)
    monkeypatch.setattr(check_all, "_reap_orphans", lambda wait=3.0: None)


def test_a_stage_that_is_not_built_is_reported_not_passed(capsys):
    stage = check_all.Stage("ghost", "no/such/module.py", ["-m", "no.such.module"], "some")
    row = check_all.run_stage(stage, thorough=False)
    assert row["result"] == "not built" and "no/such/module.py" in row["summary"]


def test_running_a_missing_stage_alone_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(check_all.STAGES, "ghost", check_all.Stage("ghost", "no/such.py", [], "some"))
    assert check_all.main(["--stage", "ghost"]) == 2
    assert "not built yet" in capsys.readouterr().err


def test_summary_table_lists_every_row(capsys):
    check_all.print_table([{"stage": "check-spec", "result": "passed", "summary": "5/5", "seconds": 6.0},
                           {"stage": "conformance", "result": "not built", "summary": "-", "seconds": 0.0}])
    out = capsys.readouterr().out
    assert "check-spec" in out and "not built" in out and "key figures" in out


class Recorded:
    """subprocess.Popen for a stage run beside another: records the command, prints one line."""
    ran: list = []

    def __init__(self, cmd, **kw):
        Recorded.ran.append(cmd[1:])
        self.cmd = cmd
        self.stdout = iter([f"{cmd[2]} says hello\n"])

    def wait(self):
        return 0


def test_make_check_leaves_the_fault_suite_to_make_check_thorough(monkeypatch, tmp_path):
    ran = Recorded.ran = []
    monkeypatch.setattr(check_all, "REPORTS", tmp_path)
    monkeypatch.setattr(check_all.subprocess, "call", lambda cmd, cwd: ran.append(cmd[1:]) or 0)
    monkeypatch.setattr(check_all.subprocess, "Popen", Recorded)
    assert check_all.main([]) == 0
    fast = ran[:]
    ran.clear()
    assert check_all.main(["--thorough"]) == 0
    stage = lambda cmds, name: next(c for c in cmds if c[1] == check_all.STAGES[name].args[1])  # noqa: E731
    assert sorted(c[1] for c in fast) == sorted(check_all.STAGES[s].args[1] for s in check_all.CHECK_STAGES)
    assert "harness.faults" not in " ".join(" ".join(c) for c in fast) and stage(ran, "faults")
    assert "--thorough" not in stage(fast, "long-tests") and "--thorough" in stage(ran, "long-tests")
    assert stage(fast, "check-spec")[stage(fast, "check-spec").index("--size") + 1] == "small"
    assert stage(ran, "check-spec")[stage(ran, "check-spec").index("--size") + 1] == "all"
    assert (tmp_path / "check.json").is_file() and (tmp_path / "check-thorough.json").is_file()


def test_the_long_tests_of_make_check_repeat_no_model_run_no_spark_check_history_and_no_thorough_sweep():
    import subprocess
    import sys

    from harness import long_tests

    def run(args: list[str]) -> list[str]:
        args = [a for a in args if a not in ("-n", "2", "--dist", "loadfile", "-q")]
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                             cwd=long_tests.ROOT, capture_output=True, text=True).stdout
        return [ln for ln in out.splitlines() if "::" in ln]

    def collected(thorough: bool) -> list[str]:
        main, own = run(long_tests.pytest_args(thorough)), run(long_tests.own_process_args(thorough))
        assert own and all(i.split("::")[0] in long_tests.OWN_PROCESS for i in own)
        assert not set(main) & set(own), "a test run in both processes"
        return main + own

    fast, thorough = collected(False), collected(True)
    assert fast and set(fast) < set(thorough)
    for ids in (fast, thorough):
        assert not [i for i in ids if i.startswith(long_tests.CHECKED_BY_CHECK_SPEC)]
    assert not [i for i in fast if "test_reduction_view_keeps_every_broken_variant" in i]
    assert [i for i in thorough if "test_reduction_view_keeps_every_broken_variant" in i]
    # no racing history twice: the teeth spark-check checks (lab/spark_runs.py) are left to it
    from lab.spark_runs import checked_teeth
    teeth = [i for i in fast if "test_switch_caught_and_fixed_holds[" in i]
    in_spark_check = {f"[{switch}-{profile}-{seed}]" for switch, profile, seed in checked_teeth("small")}
    assert teeth and not [i for i in teeth if any(i.endswith(x) for x in in_spark_check)]


def test_stages_of_one_step_run_side_by_side_with_their_lines_prefixed(monkeypatch, tmp_path, capsys):
    ran = Recorded.ran = []
    monkeypatch.setattr(check_all, "REPORTS", tmp_path)
    monkeypatch.setattr(check_all.subprocess, "call", lambda cmd, cwd: ran.append(cmd[1:]) or 0)
    monkeypatch.setattr(check_all.subprocess, "Popen", Recorded)
    monkeypatch.setattr(check_all, "CHECK_STEPS", [["check-spec"], ["conformance", "spark-check"]])
    assert check_all.main([]) == 0
    out = capsys.readouterr().out
    assert "[conformance] conformance says hello" in out and "[spark-check] lab.spark_runs says hello" in out
    assert "check-spec says" not in out                       # a stage alone in its step: not through Popen
    rows = {r["stage"]: r for r in __import__("json").loads((tmp_path / "check.json").read_text())}
    assert rows["conformance"]["beside"] == ["spark-check"] and "beside" not in rows["check-spec"]
    assert "(with spark-check)" in out


def test_a_failing_stage_beside_another_fails_make_check(monkeypatch, tmp_path):
    class Failing(Recorded):
        def wait(self):
            return 1 if "lab.spark_runs" in self.cmd else 0
    Recorded.ran = []
    monkeypatch.setattr(check_all, "REPORTS", tmp_path)
    monkeypatch.setattr(check_all.subprocess, "call", lambda cmd, cwd: 0)
    monkeypatch.setattr(check_all.subprocess, "Popen", Failing)
    monkeypatch.setattr(check_all, "CHECK_STEPS", [["conformance", "spark-check"]])
    assert check_all.main([]) == 1
    rows = {r["stage"]: r["result"] for r in __import__("json").loads((tmp_path / "check.json").read_text())}
    assert rows["spark-check"] == "FAILED (exit 1)" and rows["conformance"] == "passed"


def test_a_lane_runs_its_stages_in_turn_beside_the_other_lanes(monkeypatch, tmp_path):
    import threading
    import time
    events, lock = [], threading.Lock()

    class Timed(Recorded):
        def __init__(self, cmd, **kw):
            super().__init__(cmd, **kw)
            with lock:
                events.append(("start", cmd[2]))

        def wait(self):
            time.sleep(0.2 if "lab.spark_runs" in self.cmd else 0.05)
            with lock:
                events.append(("end", self.cmd[2]))
            return 0
    Recorded.ran = []
    monkeypatch.setattr(check_all, "REPORTS", tmp_path)
    monkeypatch.setattr(check_all.subprocess, "Popen", Timed)
    monkeypatch.setattr(check_all, "CHECK_STEPS", [[("conformance", "reference-traces"), "spark-check"]])
    assert check_all.main([]) == 0
    at = {e: i for i, e in enumerate(events)}
    assert at[("end", "conformance")] < at[("start", "traces")]        # in turn within the lane
    assert at[("start", "lab.spark_runs")] < at[("end", "conformance")]  # beside the other lane
    assert at[("start", "traces")] < at[("end", "lab.spark_runs")]
    rows = {r["stage"]: r for r in __import__("json").loads((tmp_path / "check.json").read_text())}
    assert rows["reference-traces"]["beside"] == ["spark-check"]
    assert rows["spark-check"]["beside"] == ["conformance", "reference-traces"]


def test_the_traces_clickhouse_runs_never_run_beside_the_spark_jobs():
    # beside the Spark job's real-ClickHouse runs a replica of the traces' failed to start once
    # (check_all.py): the two may share a lane, run in turn, but never stand in two lanes of a step
    for steps in (check_all.CHECK_STEPS, check_all.THOROUGH_STEPS):
        for step in steps:
            traces, spark = ([lane for lane in check_all.lanes(step) if name in lane]
                             for name in ("traces", "spark-check"))
            assert not (traces and spark) or traces == spark, step
