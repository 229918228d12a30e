"""Fixtures of the grid tests: the data-root writers of tests/data, reused."""

from tests.data.conftest import make_pneumoniamnist_root  # noqa: F401 - a fixture, registered by import
