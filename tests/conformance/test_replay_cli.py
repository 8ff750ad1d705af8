"""`python -m conformance replay`: help, and one line with exit 2 for a file it cannot use."""

import json

import pytest

from conformance.__main__ import main


def test_replay_help_is_usage_not_a_file(capsys):
    assert main(["replay", "--help"]) == 0
    assert "usage: python -m conformance replay FILE" in capsys.readouterr().out


@pytest.mark.parametrize("content, says", [(None, "cannot read"), ("not json", "is not a failure file")])
def test_replay_of_a_missing_or_foreign_file_is_bad_input(tmp_path, capsys, content, says):
    path = tmp_path / "f.json"
    if content is not None:
        path.write_text(content)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert says in err and str(path) in err and len(err.strip().splitlines()) == 1


def test_replay_of_a_walk_file_runs_its_steps(tmp_path):
    """The same entry with a usable file does run (exit 0: every step of an empty walk holds)."""
    path = tmp_path / "walk.json"
    path.write_text(json.dumps({"module": "Assignment", "cfg": "MCAssignment.cfg", "bugs": [], "steps": []}))
    assert main(["replay", str(path)]) == 0


@pytest.mark.parametrize("flag", ["--model-machine", "--undirected"])
def test_switch_table_options_without_the_switch_table_are_bad_usage(capsys, flag):
    """They only change what --switch-table runs: alone they are refused in one line, exit 2."""
    with pytest.raises(SystemExit) as e:
        main([flag])
    assert e.value.code == 2
    assert "go with --switch-table" in capsys.readouterr().err
