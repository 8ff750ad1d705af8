"""The reproductions of the PR #102244 findings (reference/pr102244/repro/*.toml) on the reference's
PR design: as the code is, an expectation fails and the oracle flags the file's invariant; with
the fix, every expectation holds and the history holds. The Spark job's verdict on the same
histories: tests/checkers/test_spark_pr102244_repro.py."""

import pytest

from reference.__main__ import main
from reference.pr102244.repro import REPRO_DIR, ReproError, all_repros, load
from reference.pr102244.repro_reference import CODE, ReferenceDriver, ReproUnsupported

ON_THE_REFERENCE = ["PR-F1", "PR-F2", "PR-F3", "PR-F6", "PR-F7", "PR-F8", "PR-F9", "PR-F10"]


def test_every_reproduction_file_loads_and_names_a_finding_of_findings_md():
    text = (REPRO_DIR.parents[2] / "spec" / "FINDINGS.md").read_text()
    repros = all_repros()
    assert {r.finding for r in repros} >= {"PR-F1", "PR-F2", "PR-F3", "PR-F6", "PR-F7", "PR-F8"}
    for r in repros:
        assert r.path.stem == r.finding and f"| {r.finding} |" in text
        assert r.expectations, f"{r.path.name} expects nothing: it could not show its finding"


@pytest.mark.parametrize("finding", ON_THE_REFERENCE)
def test_the_code_shows_the_finding_and_the_fix_holds(tmp_path, finding):
    repro = load(REPRO_DIR / f"{finding}.toml")
    code = ReferenceDriver(repro, data_dir=tmp_path / "code", say=lambda m: None).run()
    assert [e.held for e in code.expectations] != [True] * len(code.expectations)
    assert repro.invariant in code.broken
    fixed = ReferenceDriver(repro, fixed=True, data_dir=tmp_path / "fixed", say=lambda m: None).run()
    assert [e.held for e in fixed.expectations] == [True] * len(fixed.expectations)
    assert fixed.broken == {}


def test_every_reproduction_runs_on_the_reference_and_one_that_needs_more_is_refused_by_name(tmp_path):
    assert {r.finding for r in all_repros() if r.code <= set(CODE)} == {r.finding for r in all_repros()}
    assert {r.finding for r in all_repros()} == set(ON_THE_REFERENCE)
    bad = tmp_path / "PR-F8.toml"
    bad.write_text((REPRO_DIR / "PR-F8.toml").read_text().replace('"snapshot_omits_patch_parts"', '"patch_parts_v2"'))
    with pytest.raises(ReproUnsupported, match="does not implement: patch_parts_v2"):
        ReferenceDriver(load(bad))


def test_the_command_line_says_the_finding_is_shown(capsys, tmp_path):
    assert main(["repro", str(REPRO_DIR / "PR-F2.toml"), "--history", str(tmp_path / "h")]) == 1
    out = capsys.readouterr().out
    assert "expectation failed: both acknowledged INSERTs readable: got 1, expected 2" in out
    assert "PR-F2 shown: OwnersCompleteInv flagged" in out and (tmp_path / "h" / "inserts.parquet").is_file()
    assert main(["repro", str(REPRO_DIR / "PR-F2.toml"), "--fixed"]) == 0


GOOD = REPRO_DIR / "PR-F2.toml"


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('finding = "PR-F2"\n', ""), "'finding' is a required property"),
    (lambda t: t.replace('finding = "PR-F2"', 'finding = "F2"'), "finding: 'F2' does not match"),
    (lambda t: t.replace('fix = ["source_stops_at_switch"]', 'fix = ["other"]'), r"fix \['other'\] is not in code"),
    (lambda t: t.replace('on = "r2"\nsql = "SYSTEM STOP', 'on = "r9"\nsql = "SYSTEM STOP'), "replica 'r9' is not in"),
    (lambda t: t.replace("timeout_s = 120", "timeout_s = -1"), "timeout_s"),
    (lambda t: t.replace('name = "both', 'kill = "r1"\nname = "both'), "step/"),   # two kinds in one step
    (lambda t: t + "\n[[step]]\nsleep = 1\nbogus = 2\n", "step/"),
    (lambda t: t.replace("[[step]]", "[[step]", 1), "not TOML"),
])
def test_a_malformed_file_is_named_in_one_line(tmp_path, edit, message):
    bad = tmp_path / "bad.toml"
    bad.write_text(edit(GOOD.read_text()))
    with pytest.raises(ReproError, match=message) as e:
        load(bad)
    assert "\n" not in str(e.value)


def test_a_statement_the_driver_does_not_know_is_bad_input_not_a_guess(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.read_text().replace("SYSTEM STOP PULLING REPLICATION LOG t", "SYSTEM STOP MERGES t"))
    assert main(["repro", str(bad)]) == 2
    assert "SYSTEM STOP MERGES t: a statement the reference driver does not run" in capsys.readouterr().err


def test_one_migrate_after_the_other_finds_the_target_listed_and_does_nothing(tmp_path):
    """PR-F3 needs the two commands at once: the command's own check (the target already listed is
    success at once) runs before startClone's CAS, so only a race gets past it."""
    bad = tmp_path / "PR-F3.toml"
    bad.write_text((REPRO_DIR / "PR-F3.toml").read_text().replace("background = true\n", ""))
    said = []
    out = ReferenceDriver(load(bad), data_dir=tmp_path / "d", say=said.append).run()
    assert [e.held for e in out.expectations] == [True, True] and out.broken == {}
    assert "    r3 is already in the assignment of 202401: nothing to do" in said


def test_a_paused_statement_must_run_in_the_background(tmp_path):
    text = (REPRO_DIR / "PR-F6.toml").read_text()
    bad = tmp_path / "PR-F6.toml"
    bad.write_text(text.replace("background = true\n", ""))
    with pytest.raises(ReproError, match="paused at selective_replication_pause_after_snapshot: run it with background"):
        ReferenceDriver(load(bad), data_dir=tmp_path / "d", say=lambda m: None).run()


def _edited(tmp_path, *edits):
    """PR-F7's file with steps replaced: (text of the step, what replaces it)."""
    text = (REPRO_DIR / "PR-F7.toml").read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    (tmp_path / "PR-F7.toml").write_text(text)
    return load(tmp_path / "PR-F7.toml")


def test_pr_f7_needs_the_two_drivers_to_judge_the_timeout_differently(tmp_path):
    """The ALTER reaches a replica when it applies the log entry: with r2's log pulling left on, r2
    takes the short timeout too, its SYSTEM SYNC rolls the migration back instead of SWITCHing it,
    and nothing stops at the SWITCH's failpoint."""
    repro = _edited(tmp_path, ('on = "r2"\nsql = "SYSTEM STOP PULLING REPLICATION LOG t"', "sleep = 1"))
    with pytest.raises(ReproError, match="nothing paused at selective_replication_pause_before_switch_multi on r2"):
        ReferenceDriver(repro, data_dir=tmp_path / "d", say=lambda m: None).run()


def test_pr_f7_without_the_pauses_is_an_ordinary_rollback(tmp_path):
    """Without r1's pause its rollback lands before r2 reads the node: the migration FAILS, r2's
    SYNC has nothing to drive, and both owners stay (the race, not the rollback, is the bug)."""
    repro = _edited(tmp_path,
                    ('on = "r1"\nsql = "SYSTEM ENABLE FAILPOINT selective_replication_pause_before_rollback"',
                     "sleep = 1"),
                    ('on = "r1"\nsql = "SYSTEM WAIT FAILPOINT selective_replication_pause_before_rollback PAUSE"\n'
                     'timeout_s = 90', "sleep = 5"),
                    ('on = "r3"\nuntil = "SELECT sum(rows) = 1 FROM system.parts WHERE table = \'t\' AND active AND '
                     'partition_id = \'202401\'"', "sleep = 1"),
                    ('on = "r2"\nsql = "SYSTEM WAIT FAILPOINT selective_replication_pause_before_switch_multi PAUSE"',
                     "sleep = 1"))
    said = []
    out = ReferenceDriver(repro, data_dir=tmp_path / "e", say=said.append).run()
    assert [e.held for e in out.expectations] == [True, True] and out.broken == {}
    assert not any("DriveSwitch" in s for s in said)


def test_a_failpoint_the_reference_does_not_have_is_refused_by_name(tmp_path):
    bad = tmp_path / "PR-F7.toml"
    bad.write_text((REPRO_DIR / "PR-F7.toml").read_text().replace("pause_before_rollback", "pause_elsewhere"))
    with pytest.raises(ReproError, match="the reference has no failpoint selective_replication_pause_elsewhere"):
        ReferenceDriver(load(bad), data_dir=tmp_path / "d", say=lambda m: None).run()


RUN = ("run --design pr102244 --replicas 3 --add-replicas 1 --rebalance --blocks 30 --rows 3 --months 1 --buckets 4 "
       "--query-rate 0.3 --queries 2 --max-concurrent 2 --seed 0").split()


def test_a_random_run_of_the_code_as_it_is_breaks_and_the_fixed_design_holds(capsys):
    assert main([*RUN, "--as-code"]) == 1
    assert "OwnersCompleteInv: r4 owns 202401-0" in capsys.readouterr().out
    assert main(RUN) == 0


def test_as_code_is_for_the_pr_design_only(capsys):
    assert main(["run", "--as-code"]) == 2
    assert "--as-code runs PR #102244's code: use it with --design pr102244" in capsys.readouterr().err


def test_a_reading_of_the_description_is_refused_with_the_code(capsys):
    assert main(["run", "--design", "pr102244", "--as-code", "--reading", "filter_cached"]) == 2
    assert "--reading names a reading of the PR's description; --as-code runs its code" in capsys.readouterr().err
