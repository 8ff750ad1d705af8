"""lab.mutation_report (issue 18): mutmut's per-module results and the spec's verdicts become
the bench:mutation section of BENCHMARKS.md, replacing only that section."""

import json

from lab import mutation_report as mr
from lab.bench_rebalance import splice

# mutmut's trampolined copy of a module: each mutant a function beside the original's copy.
TRAMPOLINED = """
def x_switch__mutmut_orig(mig):
    if not mig or mig["state"] != "clone":
        raise GuardFailed("CoordinatorSwitch", f"{mig} is not a CLONE")
    return mig["dst"]
def x_switch__mutmut_1(mig):
    if not mig and mig["state"] != "clone":
        raise GuardFailed("CoordinatorSwitch", f"{mig} is not a CLONE")
    return mig["dst"]
def x_switch__mutmut_2(mig):
    if not mig or mig["state"] != "clone":
        raise GuardFailed("XXCoordinatorSwitchXX", f"{mig} is not a CLONE")
    return mig["dst"]
def x_switch__mutmut_3(mig):
    if not mig or mig["state"] != "XXcloneXX":
        raise GuardFailed("CoordinatorSwitch", f"{mig} is not a CLONE")
    return mig["dst"]
def x_switch__mutmut_4(mig):
    if not mig or mig["state"] != "clone":
        raise GuardFailed(None, f"{mig} is not a CLONE")
    return mig["dst"]
def x_switch__mutmut_5(mig):
    if not mig or mig["state"] != "clone":
        raise GuardFailed("CoordinatorSwitch", f"{mig['XXdstXX']} is not a CLONE")
    return mig["dst"]
class Replica:
    def xǁReplicaǁcleanup__mutmut_orig(self, p):
        return p in self.parts
    def xǁReplicaǁcleanup__mutmut_1(self, p):
        return p not in self.parts
"""


def _module(tmp_path, codes):
    (tmp_path / "protocol").mkdir()
    (tmp_path / "protocol" / "migration.py").write_text(TRAMPOLINED)
    (tmp_path / "protocol" / "migration.py.meta").write_text(json.dumps({"exit_code_by_key": codes}))


def test_mutmut_results_are_counted_per_module_and_the_survivors_classed(tmp_path):
    _module(tmp_path, {f"protocol.migration.x_switch__mutmut_{n}": 0 for n in (1, 2, 3, 4, 5)}
            | {"protocol.migration.xǁReplicaǁcleanup__mutmut_1": 33, "protocol.migration.x_switch__mutmut_6": 1,
               "protocol.migration.x_switch__mutmut_7": None, "protocol.migration.x_switch__mutmut_8": 36})
    reading = {mr.reading_key("protocol/migration.py", "switch", 'if not mig and mig["state"] != "clone":',
                              'if not mig  or mig["state"] != "clone":'): {"verdict": "gap", "reason": "wrong line"},
               mr.reading_key("protocol/migration.py", "Replica.cleanup", "return p in self.parts",
                              "return p not in self.parts"): {"verdict": "equivalent", "reason": "never called"}}
    r = mr.reference_results(tmp_path, reading, layers={})["protocol/migration.py"]
    assert (r["mutants"], r["killed"], r["survived"], r["no tests"], r["not run"], r["timeout"]) == (9, 1, 5, 1, 1, 1)
    cls = {m["key"].split(".")[-1]: (m["function"], m["class"]) for m in r["not_killed"]}
    # the f-string and the action's name of a raise are text; the guard, a string compared and a
    # key read inside the f-string are not
    assert cls == {"x_switch__mutmut_1": ("switch", "unread"), "x_switch__mutmut_2": ("switch", "message"),
                   "x_switch__mutmut_3": ("switch", "unread"), "x_switch__mutmut_4": ("switch", "message"),
                   "x_switch__mutmut_5": ("switch", "unread"),
                   "xǁReplicaǁcleanup__mutmut_1": ("Replica.cleanup", "equivalent")}
    table = mr.reference_markdown({"protocol/migration.py": r})
    # 8 run, 3 equivalent (2 by rule, 1 read): killed 1 + timeout 1 of 5
    assert "| `protocol/migration.py` | 9 | 8 | 1 | 0 | 2 | 1 | 0 | 3 | 1 | 1 | 1 | 40% |" in table


def test_a_reading_is_found_by_the_line_text_whatever_mutmut_numbers_it(tmp_path):
    reading_file = tmp_path / "reading.toml"
    reading_file.write_text("""
[[mutant]]
module = "protocol/migration.py"
function = "switch"
before = 'if not mig or mig["state"] != "clone":'
after = 'if not mig and   mig["state"] != "clone":'
verdict = "gap"
reason = "a second SWITCH let through"
""")
    reading = mr.load_reading(reading_file)
    _module(tmp_path, {"protocol.migration.x_switch__mutmut_1": 0})
    (m,) = mr.reference_results(tmp_path, reading, layers={})["protocol/migration.py"]["not_killed"]
    assert (m["class"], m["reason"]) == ("gap", "a second SWITCH let through")
    assert "a second SWITCH let through" in mr.reference_markdown(mr.reference_results(tmp_path, reading, {}))


def test_a_survivor_a_racing_run_or_the_protocol_machine_kills_is_killed_by_make_test(tmp_path):
    """The layers harness's verdicts, found by the mutated line: a racing history the checker refuses
    is a kill of make test (test_races.py) and of the history layer; a racing run that raises is a
    kill of make test but no history; the tests and a history are the two layers issue 18 asks for."""
    _module(tmp_path, {"protocol.migration.x_switch__mutmut_1": 0, "protocol.migration.x_switch__mutmut_3": 0})
    common = {"module": "protocol/migration.py", "function": "switch", "before": 'if not mig or mig["state"] != "clone":'}
    layers = {"protocol.migration.x_switch__mutmut_1": {**common, "after": 'if not mig and mig["state"] != "clone":',
                                                        "tests": "survived", "racing": "violation", "protocol": "killed"},
              "protocol.migration.x_switch__mutmut_3": {**common, "after": 'if not mig or mig["state"] != "XXcloneXX":',
                                                        "tests": "survived", "racing": "crash"}}
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(layers))
    loaded = mr.load_layers(path, tmp_path)
    r = mr.reference_results(tmp_path, {}, loaded)["protocol/migration.py"]
    assert (r["survived"], r["killed by layers"], r["not_killed"]) == (0, 2, [])
    assert [mr.layers_of(x) for x in loaded.values()] == [{"history", "conformance"}, {"tests"}]
    assert "| `protocol/migration.py` | 2 | 0 | 1 | 1 | 0 | 0 | 0 of 0 | 1 | 1 | 1 | 0 | 0 | 1 |" in mr.layers_markdown(loaded, {})


def test_a_racing_run_that_raises_and_then_a_history_refused_are_two_layers(tmp_path):
    """Since a racing run goes on past a step that raises (issue 18), one mutant can be killed by
    the tests (test_races.py saw the run raise: racing_tests `raised`) and by the history the run
    still left (racing `violation`): two layers, one a history. A run that raised and left a
    history that holds is the tests' kill alone."""
    _module(tmp_path, {"protocol.migration.x_switch__mutmut_1": 0, "protocol.migration.x_switch__mutmut_3": 0})
    common = {"module": "protocol/migration.py", "function": "switch", "before": 'if not mig or mig["state"] != "clone":',
              "tests": "survived", "protocol": "survived"}
    layers = {"protocol.migration.x_switch__mutmut_1": {**common, "after": 'if not mig and mig["state"] != "clone":',
                                                        "racing": "violation", "racing_tests": "raised"},
              "protocol.migration.x_switch__mutmut_3": {**common, "after": 'if not mig or mig["state"] != "XXcloneXX":',
                                                        "racing": "survived", "racing_tests": "raised"}}
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(layers))
    loaded = mr.load_layers(path, tmp_path)
    assert [mr.layers_of(x) for x in loaded.values()] == [{"tests", "history"}, {"tests"}]
    assert "| `protocol/migration.py` | 2 | 0 | 2 | 1 | 0 | 0 | 0 of 0 | 2 | 0 | 1 | 0 | 0 | 1 |" in mr.layers_markdown(loaded, {})


def test_a_history_refused_only_through_no_logical_errors_is_counted_apart(tmp_path):
    """A mutant that makes a REASSIGN raise leaves a history refused by NoLogicalErrorsInv alone
    (the exception logged, nothing lost): still a history kill, but its own column says so, in
    the history kills and in the two-layer kills; one refused by a protocol invariant as well is
    not counted there."""
    _module(tmp_path, {"protocol.migration.x_admin_reassign__mutmut_1": 0,
                       "protocol.migration.x_admin_reassign__mutmut_2": 0})
    common = {"module": "protocol/migration.py", "function": "admin_reassign", "before": "_write(k, p, m, v)",
              "tests": "survived", "protocol": "survived", "racing": "violation", "racing_tests": "raised"}
    layers = {"protocol.migration.x_admin_reassign__mutmut_1": {**common, "after": "_write(k, p, m)",
                                                                "racing_invariants": ["NoLogicalErrorsInv"]},
              "protocol.migration.x_admin_reassign__mutmut_2": {**common, "after": "_write(k, p, None, v)",
                                                                "racing_invariants": ["NoLogicalErrorsInv",
                                                                                      "OwnersCompleteInv"]}}
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(layers))
    loaded = mr.load_layers(path, tmp_path)
    assert [mr.layers_of(x) for x in loaded.values()] == [{"tests", "history"}, {"tests", "history"}]
    assert "| `protocol/migration.py` | 2 | 0 | 2 | 2 | 1 | 0 | 0 of 0 | 2 | 0 | 2 | 1 | 0 | 0 |" in mr.layers_markdown(loaded, {})


def test_a_broken_variants_tooth_the_mutant_changes_is_a_history_kill_counted_apart(tmp_path):
    """A mutant of code only a variant runs (the switch's name renamed) is equivalent on the fixed
    protocol, which the racing runs run; on the switch's tooth its history differs from the
    unmutated code's (held, where the variant's is refused): a history kill, with the tests two
    layers, counted in the tooth's own columns. Once the Spark job has judged both histories, it
    must tell them apart too (teeth_spark), or the kill does not count; a tooth kill where the
    mutant only raised (NoLogicalErrorsInv is all it adds) goes in that column as well."""
    keys = [f"protocol.migration.x_switch__mutmut_{n}" for n in (1, 2, 3, 4, 5)]
    _module(tmp_path, dict.fromkeys(keys, 1))   # killed by mutmut's tests
    common = {"module": "protocol/migration.py", "function": "switch", "tests": "killed", "racing": "survived",
              "protocol": "survived", "teeth_unmutated_invariants": ["OwnersCompleteInv"]}
    before = 'if "switch_without_catchup" not in bugs:'
    layers = {keys[0]: {**common, "before": before, "after": 'if "SWITCH_WITHOUT_CATCHUP" not in bugs:',
                        "teeth": "violation", "teeth_invariants": []},
              keys[1]: {**common, "before": before, "after": 'if "XXswitch_without_catchupXX" not in bugs:',
                        "teeth": "violation", "teeth_invariants": [], "teeth_spark": "killed"},
              keys[2]: {**common, "before": before, "after": 'if "switch_without_catchup" in bugs:',
                        "teeth": "violation", "teeth_invariants": [], "teeth_spark": "survived"},
              keys[3]: {**common, "before": "x = f(a)", "after": "x = f(None)",
                        "teeth": "violation", "teeth_invariants": ["NoLogicalErrorsInv"]},
              keys[4]: {**common, "before": "y = g(a)", "after": "y = g(None)", "teeth": "survived"}}
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(layers))
    loaded = mr.load_layers(path, tmp_path)
    assert [mr.layers_of(x) for x in loaded.values()] == [{"tests", "history"}, {"tests", "history"}, {"tests"},
                                                          {"tests", "history"}, {"tests"}]
    # 5 run, 5 by the tests, 3 by a history, 1 of them only NoLogicalErrorsInv, 3 only a tooth, the
    # Spark job refused the one it judged of those; 3 two layers (1, 3); 2 short
    assert ("| `protocol/migration.py` | 5 | 0 | 5 | 3 | 1 | 3 | 1 of 1 | 5 | 0 | 3 | 1 | 3 | 2 |"
            in mr.layers_markdown(loaded, {}))


def test_the_section_replaces_only_its_own_markers():
    doc = "# B\n\n<!-- bench:tlc -->\nx\n<!-- /bench:tlc -->\n"
    once = splice(doc, "mutation", mr.section({}, None))
    twice = splice(once, "mutation", mr.section({}, None))
    assert once == twice and "<!-- bench:tlc -->\nx\n" in twice and twice.count("<!-- bench:mutation -->") == 1


def test_the_section_says_which_modules_are_not_run_from_the_results():
    ref = {"protocol/a.py": {"mutants": 10, "not run": 0}, "protocol/b.py": {"mutants": 5, "not run": 5},
           "protocol/c.py": {"mutants": 8, "not run": 3}}
    said = mr.not_run_sentence(ref)
    assert said == "`b.py` is listed in `[tool.mutmut]` but not run; run in part: `c.py` (5 of 8); "
    assert "`a.py`" not in said and mr.not_run_sentence({"protocol/a.py": {"mutants": 1}}) == ""


def test_a_kept_verdict_fills_a_mutant_mutmut_has_not_run_and_a_fresh_one_wins(tmp_path):
    """A new checkout has no mutants/ results (lab/mutation_store.py): the kept verdicts count
    by the mutated line, whatever number mutmut gives the mutant now; a verdict mutmut decided in
    this checkout wins; a module no .meta names comes whole from what is kept."""
    _module(tmp_path, {"protocol.migration.x_switch__mutmut_1": None, "protocol.migration.x_switch__mutmut_3": 1})
    common = {"module": "protocol/migration.py", "function": "switch", "message": False,
              "before": 'if not mig or mig["state"] != "clone":'}
    stored = [{**common, "after": 'if not mig and mig["state"] != "clone":', "tests": "survived"},   # mutmut_1
              {**common, "after": 'if not mig or mig["state"] != "XXcloneXX":', "tests": "survived"},   # mutmut_3
              {"module": "protocol/query.py", "function": "route", "before": "a", "after": "b", "message": False,
               "tests": "killed"}]
    v = mr.reference_verdicts(tmp_path, stored)
    got = {(m["module"], m["after"]): (m["tests"], m["from"]) for ms in v.values() for m in ms}
    assert got == {("protocol/migration.py", stored[0]["after"]): ("survived", "kept"),
                   ("protocol/migration.py", stored[1]["after"]): ("killed", "run"),
                   ("protocol/query.py", "b"): ("killed", "kept")}
    r = mr.reference_results(tmp_path, {}, {}, verdicts=v)
    assert (r["protocol/migration.py"]["survived"], r["protocol/migration.py"]["killed"]) == (1, 1)
    assert r["protocol/query.py"]["mutants"] == 1 and r["protocol/query.py"]["killed"] == 1


def test_the_report_a_new_checkout_writes_from_the_kept_results_is_the_same(tmp_path, monkeypatch):
    """The report written from a run's results (mutants/, build/mutation/) keeps them in the
    repository; with mutants/ and build/ gone, as in a new clone, it writes the same section."""
    from lab import mutation_store

    root, build, store = tmp_path / "mutants", tmp_path / "build", tmp_path / "kept"
    root.mkdir()
    _module(root, {"protocol.migration.x_switch__mutmut_1": 0, "protocol.migration.x_switch__mutmut_3": 1,
                   "protocol.migration.xǁReplicaǁcleanup__mutmut_1": 0})
    build.mkdir()
    layers = {"protocol.migration.x_switch__mutmut_1": {
        "module": "protocol/migration.py", "function": "switch", "before": 'if not mig or mig["state"] != "clone":',
        "after": 'if not mig and mig["state"] != "clone":', "tests": "survived", "racing": "violation",
        "racing_tests": "survived", "history": str(build / "histories" / "x")}}
    (build / "layers.json").write_text(json.dumps(layers))
    bench = tmp_path / "BENCHMARKS.md"
    bench.write_text("# B\n\n<!-- bench:mutation -->\n<!-- /bench:mutation -->\n")
    for name, value in (("MUTANTS", root), ("LAYERS_JSON", build / "layers.json"), ("SPEC_JSON", build / "spec.json"),
                        ("BENCHMARKS", bench)):
        monkeypatch.setattr(mr, name, value)
    monkeypatch.setattr(mutation_store, "STORE", store)
    monkeypatch.setattr(mr, "load_reading", lambda: {})
    assert mr.main([]) == 0
    first = bench.read_text()
    assert "| `protocol/migration.py` | 3 | 3 | 1 | 1 |" in first   # killed by mutmut, and by a racing history
    kept_layers = (store / "layers.jsonl").read_text()
    assert "histories" not in kept_layers and '"racing": "violation"' in kept_layers
    import shutil
    shutil.rmtree(root)
    shutil.rmtree(build)
    root.mkdir()   # mutmut has made no copy yet either
    assert mr.main([]) == 0
    assert bench.read_text() == first


def test_the_layers_go_on_from_the_verdicts_kept_in_an_earlier_checkout(tmp_path, monkeypatch):
    """lab.mutation_layers takes a mutant's verdicts from the kept results when it ran in an
    earlier checkout (found by the mutated line, mutmut's number may differ), so it runs only
    the others; one the kept results do not name, or that this run already has, is left alone."""
    from lab import mutation_layers, mutation_store

    monkeypatch.setattr(mutation_store, "STORE", tmp_path)
    common = {"module": "protocol/migration.py", "function": "switch", "before": "a"}
    mutation_store.save_layers([{**common, "after": "b", "racing": "violation", "history": "/gone"}])
    todo = [("protocol/migration.py", "protocol.migration.x_switch__mutmut_7", 1),
            ("protocol/migration.py", "protocol.migration.x_switch__mutmut_8", 1),
            ("protocol/migration.py", "protocol.migration.x_switch__mutmut_9", 1)]
    diffs = {"protocol.migration.x_switch__mutmut_7": ("a", "b", False),
             "protocol.migration.x_switch__mutmut_8": ("a", "c", False),
             "protocol.migration.x_switch__mutmut_9": ("a", "b", False)}
    results = {"protocol.migration.x_switch__mutmut_9": {"racing": "survived"}}
    assert mutation_layers._resume_from_kept(results, todo, diffs) == 1
    assert results["protocol.migration.x_switch__mutmut_7"]["racing"] == "violation"
    assert "history" not in results["protocol.migration.x_switch__mutmut_7"]   # build/ paths are not kept
    assert "protocol.migration.x_switch__mutmut_8" not in results
    assert results["protocol.migration.x_switch__mutmut_9"] == {"racing": "survived"}


def test_the_spec_sentence_names_the_actions_without_verdicts_from_the_results():
    from lab.mutation_report import spec_sentence
    from lab.mutation_spec import SPEC_DIR, SPEC_FILE, generate
    actions = sorted({m.action for m in generate((SPEC_DIR / SPEC_FILE).read_text().splitlines())})
    some = {"verdicts": [{"action": a} for a in actions[1:]]}
    assert spec_sentence(some).endswith(f"are not run: {actions[0]}.")
    assert spec_sentence({"verdicts": [{"action": a} for a in actions]}).startswith(
        f"the spec's guard mutants cover all {len(actions)} actions")
