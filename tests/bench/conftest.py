"""Fixtures the bench tests share with the suites of what they time."""

from tests.pd.conftest import no_leftovers  # noqa: F401  (the pd-eval bench starts stand-in servers)
