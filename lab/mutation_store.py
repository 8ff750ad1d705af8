"""The mutation results kept in the repository, so that a new checkout writes the report again
without the hours `make mutation` takes (issue 18).

build/ and mutants/ are not kept, and twice a session started without them: the only copy of a
run's results was then BENCHMARKS.md's tables, which no script can fold a later run into. So
`python -m lab.mutation_report` writes back here what it reported:

- `reference.jsonl`: mutmut's verdict per mutant it decided, by the stable key (module, function,
  the mutated line before and after: `mutation_report.reading_key`), not by mutmut's number,
  which moves with every edit of the module;
- `layers.jsonl`: `lab.mutation_layers`' verdicts by the same key, without the kept
  histories' paths (build/ again);
- `spec.json`: `lab.mutation_spec`'s result as it wrote it.

What a run left in mutants/ and build/mutation/ wins over what is kept here, mutant by mutant
(`mutation_report` says how many verdicts it took from each); a mutant no run decided and
nothing kept here names is "not run". JSON lines, one mutant a line, sorted: a re-run's diff
shows which verdicts changed.
"""

from __future__ import annotations

import json
from pathlib import Path

STORE = Path(__file__).resolve().parent / "mutation_results"

# Paths into build/ (the kept histories) mean nothing in another checkout.
_LOCAL = ("history", "teeth_history")


def _read_lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_lines(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n"
                   for r in sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, ensure_ascii=False)))
    path.write_text(text)


def load_reference(store: Path | None = None) -> list[dict]:
    """Each: module, function, before, after, message (only an exception's text changed), tests."""
    return _read_lines((store or STORE) / "reference.jsonl")


def save_reference(rows: list[dict], store: Path | None = None) -> None:
    _write_lines((store or STORE) / "reference.jsonl", [{k: r[k] for k in ("module", "function", "before", "after", "message",
                                                                  "tests")} for r in rows])


def load_layers(store: Path | None = None) -> list[dict]:
    return _read_lines((store or STORE) / "layers.jsonl")


def save_layers(rows: list[dict], store: Path | None = None) -> None:
    _write_lines((store or STORE) / "layers.jsonl", [{k: v for k, v in r.items() if k not in _LOCAL} for r in rows])


def load_spec(store: Path | None = None) -> dict | None:
    path = (store or STORE) / "spec.json"
    return json.loads(path.read_text()) if path.is_file() else None


def save_spec(spec: dict, store: Path | None = None) -> None:
    store = store or STORE   # read when called: the tests point it elsewhere
    store.mkdir(parents=True, exist_ok=True)
    (store / "spec.json").write_text(json.dumps(spec, indent=1, ensure_ascii=False) + "\n")
