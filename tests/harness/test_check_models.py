import json

import pytest

from harness import check_models
from harness.tlc.runner import HOLDS, INVARIANT_VIOLATED, TLCResult


def _manifest(tmp_path, models):
    (tmp_path / "M.tla").write_text("")
    (tmp_path / "M.cfg").write_text("")
    p = tmp_path / "models.json"
    p.write_text(json.dumps({"models": models}))
    return p


BASE = {"name": "M", "spec": "M.tla", "config": "M.cfg", "size": "small", "expect": "holds", "budget_s": 30}


def test_the_real_manifest_loads():
    models = check_models.load_manifest()
    assert any(m["expect"] == "holds" for m in models)
    assert any(m["expect"] == "violates" for m in models)


@pytest.mark.parametrize("change, message", [
    ({"budget_s": None}, "lacks budget_s"),
    ({"expect": "maybe"}, "expect must be"),
    ({"expect": "violates"}, "name one invariant or one property"),
    ({"config": "Missing.cfg"}, "Missing.cfg does not exist"),
    ({"size": "huge"}, "size must be"),
    ({"finding": "F3"}, "'finding' names a finding"),   # a holding model shows no finding
    ({"expect": "violates", "invariant": "XInv", "finding": "the third"}, "'finding' names a finding"),
    ({"expect": "violates", "invariant": "XInv", "retires": ["PR-F4"]}, "'retires' lists findings"),  # a failing model retires none
    ({"retires": ["the filter one"]}, "'retires' lists findings"),
])
def test_malformed_manifest_entries_are_named(tmp_path, change, message):
    entry = {**BASE, **change}
    entry = {k: v for k, v in entry.items() if v is not None}
    with pytest.raises(check_models.ManifestError, match=message):
        check_models.load_manifest(_manifest(tmp_path, [entry]))


def test_duplicate_names_are_refused(tmp_path):
    with pytest.raises(check_models.ManifestError, match="twice"):
        check_models.load_manifest(_manifest(tmp_path, [BASE, BASE]))


def _res(outcome, violated=None, distinct=10, secs=1.0):
    return TLCResult(outcome=outcome, exit_code=0, duration_s=secs, violated=violated, distinct_states=distinct)


def test_judge_accepts_what_was_expected():
    assert check_models.judge({**BASE, "distinct_states": 10}, _res(HOLDS)) == []
    m = {**BASE, "expect": "violates", "invariant": "RoutedToOwnersInv"}
    assert check_models.judge(m, _res(INVARIANT_VIOLATED, "RoutedToOwnersInv")) == []


def test_judge_catches_drift_and_wrong_invariant_and_notes_an_overrun():
    assert "drifted" in check_models.judge({**BASE, "distinct_states": 11}, _res(HOLDS))[0]
    m = {**BASE, "expect": "violates", "invariant": "RoutedToOwnersInv"}
    assert "expected to violate" in check_models.judge(m, _res(INVARIANT_VIOLATED, "TypeOKInv"))[0]
    assert "expected to violate" in check_models.judge(m, _res(HOLDS))[0]
    assert check_models.judge(BASE, _res(HOLDS, secs=31)) == []  # slow is a note, not a failure
    assert "over its 30s budget" in check_models.over_budget(BASE, _res(HOLDS, secs=31))
    assert check_models.over_budget(BASE, _res(HOLDS, secs=29)) is None
    assert "expected to hold" in check_models.judge(BASE, _res("deadlock"))[0]


def test_judge_reads_an_expected_temporal_violation():
    m = {**BASE, "expect": "violates", "property": "MigrationsEndProp"}
    assert check_models.judge(m, _res("property_violated", "temporal property")) == []
    assert "expected to violate MigrationsEndProp" in check_models.judge(m, _res(HOLDS))[0]


def test_a_simulation_passes_only_when_it_stopped_without_a_violation():
    m = {**BASE, "simulate": {"depth": 40, "seconds": 60}}
    assert check_models.judge(m, _res("stopped")) == []
    assert "simulation bound" in check_models.judge(m, _res(INVARIANT_VIOLATED, "QueryNoMissingInv"))[0]


def test_a_seeded_simulation_passes_its_seed_and_the_worker_count_to_tlc(monkeypatch):
    # The seed makes a simulation's verdict and figures repeatable; without it every run draws anew.
    seen = {}
    monkeypatch.setattr(check_models, "run_tlc", lambda spec, cfg, **kw: seen.update(kw) or _res("stopped"))
    check_models.run_model({**BASE, "simulate": {"depth": 60, "seconds": 5, "seed": 7}}, workers=1)
    assert seen["workers"] == 1
    assert seen["extra_args"] == ["-simulate", "-depth", "60", "-seed", "7"]
    check_models.run_model({**BASE, "simulate": {"depth": 60, "seconds": 5}})
    assert "-seed" not in seen["extra_args"] and seen["workers"] == 2


def test_a_model_recorded_within_seconds_runs_under_the_first_jit_tier_alone(monkeypatch):
    seen = {}
    monkeypatch.setattr(check_models, "run_tlc", lambda spec, cfg, **kw: seen.update(kw) or _res(HOLDS))
    for recorded, short in ((2.0, True), (check_models.SHORT_S, True), (check_models.SHORT_S + 0.1, False),
                            (None, False)):   # not yet recorded: it may be long
        check_models.run_model({**BASE, "recorded_seconds": recorded})
        assert seen["short"] is short, recorded


def test_every_finding_with_a_failing_model_is_named_in_findings_md():
    """The manifest's `finding` keys are FINDINGS.md's own numbers, each a model that violates."""
    text = (check_models.SPEC_DIR / "FINDINGS.md").read_text()
    findings = {m["finding"] for m in check_models.load_manifest() if "finding" in m}
    assert {"F1", "F3", "F8", "F20", "PR-F1", "PR-F5"} <= findings
    for f in findings:
        assert f"| {f} |" in text, f"{f} is not a row of spec/FINDINGS.md's summary tables"
    retired = {f for m in check_models.load_manifest() for f in m.get("retires", [])}
    assert {"PR-F4", "PR-F5"} <= retired   # the PR's code re-reads Keeper where the description's reading did not
    for f in retired:
        assert f"| {f} |" in text and "retired" in text.split(f"| {f} |", 1)[1].split("\n", 1)[0], \
            f"{f}'s row in spec/FINDINGS.md does not say it is retired"


def test_an_unknown_finding_is_bad_input_naming_the_known_ones(capsys):
    assert check_models.main(["--finding", "F99"]) == 2
    err = capsys.readouterr().err
    assert "--finding F99" in err and "F3" in err and len(err.strip().splitlines()) == 1


@pytest.mark.tlc
def test_two_jobs_give_the_verdicts_of_one_in_the_manifests_order():
    # Two quick models of different lengths: the longer on record starts first with two jobs,
    # the verdicts still come back in the order they were asked for, each as one job gives it.
    models = [m for m in check_models.load_manifest() if m["name"] in ("MCAssignment", "MCAssignment_blind_write")]
    assert len(models) == 2
    one = check_models.check(models, verbose=False, workers=1, jobs=1)
    two = check_models.check(models, verbose=False, workers=1, jobs=2)
    assert [v.model["name"] for v in two] == [m["name"] for m in models]
    assert [(v.passed, v.result.outcome, v.result.violated) for v in two] == \
           [(v.passed, v.result.outcome, v.result.violated) for v in one]
    assert all(v.passed for v in two), [v.problems for v in two]

