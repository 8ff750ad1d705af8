pytest_plugins = ["harness.pytest_fixtures"]

import pytest


@pytest.hookimpl(tryfirst=True)   # before -m deselects by marker
def pytest_collection_modifyitems(items):
    """A `faults` test (members of the ZooKeeper ensemble killed, the whole ensemble down) takes
    longer than `make test`'s budget allows: it is also `long`, so `make check`'s long-tests stage
    runs it, and `make faults` runs the fault suite alone."""
    for item in items:
        if item.get_closest_marker("faults") is not None:
            item.add_marker(pytest.mark.long)
