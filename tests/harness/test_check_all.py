from harness import check_all


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
