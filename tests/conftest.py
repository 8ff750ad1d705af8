pytest_plugins = ["harness.pytest_fixtures"]
