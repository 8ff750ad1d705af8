"""lab/guard_clauses.py's table (tests/README.md) kept true in make test: every clause's code is
in its module exactly once (the table names code that exists), every clause was dropped and met
a failing test when last recorded, the README's table is the rendering of the record, every test
it names exists; and one clause is dropped for real here, in a copy, to show the tests it names
do fail without it and pass with it."""

import ast
import json
import pytest

from lab.guard_clauses import CLAUSES, README, RESULTS, ROOT, copy_checkout, edited, failing_tests, run_clause, table


def _recorded() -> dict:
    return json.loads(RESULTS.read_text())


def test_every_clause_names_code_that_is_in_its_module_once():
    for c in CLAUSES:
        edited(c)   # BadClause otherwise


def test_every_clause_was_dropped_and_some_test_failed_without_it():
    rec = _recorded()
    keys = [f"{c.design}/{c.key}" for c in CLAUSES]
    assert len(set(keys)) == len(keys), "two clauses share a name"
    assert sorted(rec) == sorted(keys), "lab/guard_clauses.json is not the clause list: run python -m lab.guard_clauses"
    assert [k for k in keys if not rec[k]["failing"]] == []


def test_the_readme_table_is_the_record():
    text = README.read_text()
    assert table(_recorded()) in text, "tests/README.md's table is stale: run python -m lab.guard_clauses"


def test_every_test_the_record_names_exists():
    defined: dict[str, set[str]] = {}
    for failing in (r["failing"] for r in _recorded().values()):
        for t in failing:
            path, name = t.split("::")
            if path not in defined:
                tree = ast.parse((ROOT / path).read_text())
                defined[path] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert name.split("[")[0] in defined[path], t


@pytest.mark.slow
def test_dropping_switchs_catch_up_clause_fails_the_tests_the_record_names(tmp_path):
    """F23's clause of SWITCH, dropped in a copy of the checkout: the recorded tests fail there,
    and the same copy unedited passes them."""
    (clause,) = [c for c in CLAUSES if c.guard == "CoordinatorSwitch" and "caught up" in c.clause]
    named = _recorded()[f"{clause.design}/{clause.key}"]["failing"]
    copy = copy_checkout(tmp_path / "copy")
    assert failing_tests(copy, sorted({t.split("::")[0] for t in named}))[0] == []
    assert set(named) <= set(run_clause(clause, copy))
    assert (copy / clause.module).read_text() == (ROOT / clause.module).read_text()   # restored
