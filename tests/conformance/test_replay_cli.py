"""`python -m conformance replay`: help, and one line with exit 2 for a file it cannot use."""

import json

import pytest

from conformance.__main__ import main


def test_replay_help_is_usage_not_a_file(capsys):
    with pytest.raises(SystemExit) as e:
        main(["replay", "--help"])
    assert e.value.code == 0
    assert "usage: python -m conformance replay" in capsys.readouterr().out


@pytest.mark.parametrize("content, says", [
    (None, "no such file"), ("not json", "is not a failure file (not JSON"),
    # held to the failure file's schema: a switch nobody has, a step that is no [action, parameters] pair
    (json.dumps({"module": "Assignment", "cfg": "MCAssignment.cfg", "bugs": ["no_such_switch"], "steps": []}),
     "at bugs/0"),
    (json.dumps({"module": "Assignment", "cfg": "MCAssignment.cfg", "bugs": [], "steps": [["A"]]}), "at steps/0"),
])
def test_replay_of_a_missing_or_foreign_file_is_bad_input(tmp_path, capsys, content, says):
    path = tmp_path / "f.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as e:
        main(["replay", str(path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert says in err and str(path) in err and len(err.strip().splitlines()) == 1


def test_replay_of_a_walk_file_runs_its_steps(tmp_path):
    """The same entry with a usable file does run (exit 0: every step of an empty walk holds)."""
    path = tmp_path / "walk.json"
    path.write_text(json.dumps({"module": "Assignment", "cfg": "MCAssignment.cfg", "bugs": [], "steps": []}))
    assert main(["replay", str(path)]) == 0


@pytest.mark.parametrize("flag", ["--switch-table", "--undirected"])
def test_the_switch_tables_options_are_the_labs_not_conformances(capsys, flag):
    """The switch table measures the machines (python -m lab.switch_table): `python -m conformance`
    refuses its options in one line, exit 2."""
    with pytest.raises(SystemExit) as e:
        main([flag])
    assert e.value.code == 2
    assert flag in capsys.readouterr().err
