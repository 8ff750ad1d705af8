"""Parse TLC's printed values (TLA+ value syntax) into hashable Python values.

TLC prints states as ``/\\ var = value``. The mapping chosen here keeps values hashable, so
they can sit inside sets and be compared across spec and reference:

    integers        -> int            TRUE / FALSE   -> bool
    "strings"       -> str            model values   -> ModelValue
    {a, b}          -> frozenset      <<a, b>>       -> tuple
    [k |-> v, ...]  -> Fn (records)   (a :> 1 @@ b :> 2) -> Fn (functions)

Records and functions are both ``Fn``: in TLA+ a record is a function whose domain is a set of
strings, so two such values are equal exactly when their mappings are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True, order=True)
class ModelValue:
    """A TLC model value (a CONSTANT bound to an uninterpreted name such as ``r1``)."""

    name: str

    def __repr__(self) -> str:
        return self.name


class Fn(Mapping):
    """An immutable, hashable TLA+ function or record."""

    __slots__ = ("_d", "_hash")

    def __init__(self, pairs: Mapping | list | tuple = ()):
        self._d = dict(pairs)
        self._hash = None

    def __getitem__(self, key):
        return self._d[key]

    def __iter__(self) -> Iterator:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._d.items()))
        return self._hash

    def __eq__(self, other) -> bool:
        if isinstance(other, Fn):
            return self._d == other._d
        if isinstance(other, Mapping):
            return self._d == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        if all(isinstance(k, str) for k in self._d):
            return "[" + ", ".join(f"{k} |-> {format_value(v)}" for k, v in self._d.items()) + "]"
        return "(" + " @@ ".join(f"{format_value(k)} :> {format_value(v)}" for k, v in self._d.items()) + ")"


class TLAValueError(ValueError):
    """Raised when text is not a TLA+ value TLC could have printed."""


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<int>-?\d+)
      | (?P<punct><<|>>|\|->|:>|@@|[\[\]{}(),])
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", '"': '"', "\\": "\\"}


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise TLAValueError(f"unexpected character {text[pos:pos + 20]!r} at offset {pos} in {text[:80]!r}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise TLAValueError(f"value ends early: {self.text[:80]!r}")
        if expected is not None and tok[1] != expected:
            raise TLAValueError(f"expected {expected!r}, found {tok[1]!r} in {self.text[:80]!r}")
        self.i += 1
        return tok

    def items(self, close: str, item) -> list:
        out = []
        if self.peek() and self.peek()[1] == close:
            self.take(close)
            return out
        while True:
            out.append(item())
            sep = self.take()[1]
            if sep == close:
                return out
            if sep != ",":
                raise TLAValueError(f"expected ',' or {close!r}, found {sep!r} in {self.text[:80]!r}")

    def value(self) -> Any:
        kind, tok = self.take()
        if kind == "int":
            return int(tok)
        if kind == "string":
            return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), tok[1:-1])
        if kind == "ident":
            if tok in ("TRUE", "FALSE"):
                return tok == "TRUE"
            return ModelValue(tok)
        if tok == "<<":
            return tuple(self.items(">>", self.value))
        if tok == "{":
            return frozenset(self.items("}", self.value))
        if tok == "[":
            return Fn(self.items("]", self.field))
        if tok == "(":
            return self.function()
        raise TLAValueError(f"unexpected {tok!r} in {self.text[:80]!r}")

    def field(self) -> tuple[str, Any]:
        kind, name = self.take()
        if kind != "ident":
            raise TLAValueError(f"record field name expected, found {name!r}")
        self.take("|->")
        return name, self.value()

    def function(self) -> Fn:
        pairs = []
        while True:
            key = self.value()
            self.take(":>")
            pairs.append((key, self.value()))
            sep = self.take()[1]
            if sep == ")":
                return Fn(pairs)
            if sep != "@@":
                raise TLAValueError(f"expected '@@' or ')', found {sep!r} in {self.text[:80]!r}")


def parse_value(text: str) -> Any:
    """Parse one TLA+ value as TLC prints it."""
    return _parse_value(text)


# A state graph repeats each variable's value in many states (MCAssignment_blind_write: 48,776
# states, 243,880 values to parse, far fewer distinct texts), and parsing was 3/4 of a conformance
# replay's time. The values are immutable, so states may share one parsed object per text.
@lru_cache(maxsize=1 << 16)
def _parse_value(text: str) -> Any:
    p = _Parser(text)
    v = p.value()
    if p.peek() is not None:
        raise TLAValueError(f"trailing text after value: {p.peek()[1]!r} in {text[:80]!r}")
    return v


_VAR_LINE = re.compile(r"^/\\ (\w+) = ", re.MULTILINE)


def parse_state(text: str) -> dict[str, Any]:
    """Parse a state printed as ``/\\ v1 = e1`` lines (values may span lines)."""
    text = text.strip()
    if not text:
        return {}
    if not text.startswith("/\\"):
        # A spec with a single variable prints the bare `var = value`.
        name, _, rest = text.partition(" = ")
        return {name.strip(): parse_value(rest)}
    heads = list(_VAR_LINE.finditer(text))
    state = {}
    for k, m in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(text)
        state[m.group(1)] = parse_value(text[m.end():end])
    return state


def format_value(v: Any) -> str:
    """Render a parsed value back in TLA+ syntax (for messages and FINDINGS traces)."""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, tuple):
        return "<<" + ", ".join(format_value(x) for x in v) + ">>"
    if isinstance(v, frozenset):
        return "{" + ", ".join(sorted(format_value(x) for x in v)) + "}"
    return repr(v)


def to_json(v: Any) -> Any:
    """A JSON-friendly rendering: sets become sorted lists, functions dicts keyed by text."""
    if isinstance(v, bool) or isinstance(v, (int, str)):
        return v
    if isinstance(v, ModelValue):
        return v.name
    if isinstance(v, tuple):
        return [to_json(x) for x in v]
    if isinstance(v, frozenset):
        return sorted((to_json(x) for x in v), key=lambda x: repr(x))
    if isinstance(v, Fn):
        return {(k if isinstance(k, str) else format_value(k)): to_json(x) for k, x in v.items()}
    raise TypeError(f"not a TLA+ value: {v!r}")
