pytest_plugins = ["harness.pytest_fixtures"]


def pytest_collection_modifyitems(config, items):
    """Tests marked `faults` (ZooKeeper fault runs longer than the quick suite's budget) run only
    when asked for by a -m expression naming them (`pytest -m faults`), never in `make test`."""
    if "faults" in (config.getoption("markexpr") or ""):
        return
    kept = [i for i in items if i.get_closest_marker("faults") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("faults") is not None])
        items[:] = kept
