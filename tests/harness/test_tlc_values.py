import pytest

from harness.tlc.values import Fn, ModelValue, TLAValueError, format_value, parse_state, parse_value, to_json


@pytest.mark.parametrize("text, value", [
    ("42", 42),
    ("-7", -7),
    ("TRUE", True),
    ("FALSE", False),
    ('"202401_5"', "202401_5"),
    (r'"say \"hi\" \\ done"', 'say "hi" \\ done'),
    ("r1", ModelValue("r1")),
    ("<<>>", ()),
    ("<<1, <<2>>>>", (1, (2,))),
    ("{}", frozenset()),
    ("{r1, r2}", frozenset({ModelValue("r1"), ModelValue("r2")})),
])
def test_scalars_and_collections(text, value):
    assert parse_value(text) == value


def test_record_parses_to_fn_with_string_keys():
    v = parse_value('[st |-> "chosen", owners |-> {r1}, version |-> -1]')
    assert isinstance(v, Fn)
    assert v["st"] == "chosen" and v["owners"] == frozenset({ModelValue("r1")}) and v["version"] == -1


def test_function_over_model_values_and_nesting():
    v = parse_value('(p1 :> [owners |-> {r1, r2}, version |-> 0] @@ p2 :> [owners |-> {}, version |-> -1])')
    assert v[ModelValue("p1")]["version"] == 0
    assert v[ModelValue("p2")]["owners"] == frozenset()


def test_values_are_hashable_inside_sets():
    v = parse_value('{<<p1, {r1, r2}>>, <<p2, {r3}>>, [a |-> 1]}')
    assert (ModelValue("p2"), frozenset({ModelValue("r3")})) in v
    assert Fn({"a": 1}) in v


def test_record_equals_function_with_same_mapping():
    assert parse_value("[a |-> 1]") == parse_value('("a" :> 1)')


def test_state_with_multiline_values():
    state = parse_state('/\\ asg = ( p1 :> [owners |-> {r1}, version |-> 0] @@\n   p2 :> [owners |-> {}, version |-> -1] )\n/\\ n = 3\n')
    assert set(state) == {"asg", "n"}
    assert state["n"] == 3
    assert state["asg"][ModelValue("p2")]["version"] == -1


def test_single_variable_state():
    assert parse_state("x = <<1, 2>>") == {"x": (1, 2)}


@pytest.mark.parametrize("bad", ["[a |-> ]", "{1, 2", "(a :> 1 @@)", "<<1 2>>", "1 2", "#", ""])
def test_malformed_values_raise_with_the_text(bad):
    with pytest.raises(TLAValueError):
        parse_value(bad)


def test_format_round_trips():
    text = '[owners |-> {r1, r2}, tags |-> <<"a", TRUE>>, version |-> -1]'
    assert parse_value(format_value(parse_value(text))) == parse_value(text)


def test_to_json_is_plain():
    assert to_json(parse_value('[s |-> {r2, r1}, f |-> (p1 :> 1)]')) == {"s": ["r1", "r2"], "f": {"p1": 1}}
