"""harness.mutation_report (issue 18): mutmut's per-module results and the spec's verdicts become
the bench:mutation section of BENCHMARKS.md, replacing only that section."""

import json

from harness import mutation_report as mr
from harness.bench_rebalance import splice


def test_mutmut_results_are_counted_per_module_and_survivors_per_function(tmp_path):
    meta = tmp_path / "reference" / "migration.py.meta"
    meta.parent.mkdir()
    meta.write_text(json.dumps({"exit_code_by_key": {
        "reference.migration.x_switch__mutmut_1": 1, "reference.migration.x_switch__mutmut_2": 0,
        "reference.migration.x_cleanup__mutmut_1": 0, "reference.migration.x_cleanup__mutmut_2": 33,
        "reference.migration.x_cleanup__mutmut_3": None, "reference.migration.x_cancel__mutmut_1": 36}}))
    r = mr.reference_results(tmp_path)["reference/migration.py"]
    assert (r["mutants"], r["killed"], r["survived"], r["no tests"], r["not run"], r["timeout"]) == (6, 1, 2, 1, 1, 1)
    assert r["survivors_by_function"] == {"switch": 1, "cleanup": 1}
    table = mr.reference_markdown({"reference/migration.py": r})
    assert "| `reference/migration.py` | 6 | 5 | 1 | 2 | 1 | 1 | 1 |" in table


def test_the_section_replaces_only_its_own_markers():
    doc = "# B\n\n<!-- bench:tlc -->\nx\n<!-- /bench:tlc -->\n"
    once = splice(doc, "mutation", mr.section({}, None))
    twice = splice(once, "mutation", mr.section({}, None))
    assert once == twice and "<!-- bench:tlc -->\nx\n" in twice and twice.count("<!-- bench:mutation -->") == 1
