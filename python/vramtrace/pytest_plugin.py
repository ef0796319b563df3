"""A pytest plugin: a test that uses the ``vramtrace_no_growth`` fixture (or carries the
``@pytest.mark.vramtrace_no_growth(limit_bytes=0)`` marker) runs as a vramtrace phase named after
the test, and fails when GPU memory it allocated is still live after it returns (and after a
``gc.collect()``).

    vramtrace run -- python -m pytest -p vramtrace.pytest_plugin tests/

Live memory comes from the preload's live set (the buffers born during the test that are not
freed), so it is exact and costs no trace analysis. Outside ``vramtrace run`` the check cannot be
made: the test runs unchecked and pytest shows a warning saying so. The trace then answers where
the growth came from: ``vramtrace leaks --phase 'test:NODEID' TRACE``.
"""
from __future__ import annotations

import gc
import time
import warnings
from typing import Iterator, List, Optional

import pytest

from . import _native, phase

MARKER = "vramtrace_no_growth"


class GrowthChecker:
    """What the fixture yields: ``limit_bytes`` may be raised inside the test."""

    def __init__(self, name: str, limit_bytes: int) -> None:
        self.name = name
        self.limit_bytes = limit_bytes
        self.grown_bytes: Optional[int] = None


def _live_bytes_born_since(born_ns: int) -> Optional[int]:
    items = _native.live_items(born_ns)
    return None if items is None else sum(item[1] for item in items)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER + "(limit_bytes=0): fail the test if GPU memory it allocated "
                            "stays live after it (needs `vramtrace run`)")


@pytest.fixture
def vramtrace_no_growth(request: pytest.FixtureRequest) -> Iterator[GrowthChecker]:
    marker = request.node.get_closest_marker(MARKER)
    limit = int(marker.kwargs.get("limit_bytes", 0)) if marker else 0
    checker = GrowthChecker("test:" + request.node.nodeid, limit)
    if _native.enabled() != 2:
        warnings.warn(pytest.PytestWarning("vramtrace_no_growth: not running under `vramtrace run` (or armed "
                                           "only): %s is not checked for GPU memory growth" % request.node.nodeid))
        yield checker
        return
    born_ns = time.monotonic_ns()  # CLOCK_MONOTONIC, the clock of the preload's born_ns
    with phase(checker.name):
        yield checker
        gc.collect()
    grown = _live_bytes_born_since(born_ns)
    checker.grown_bytes = grown
    if grown is not None and grown > checker.limit_bytes:
        pytest.fail("%s: GPU memory grew by %d bytes (limit %d) during the test; where: vramtrace leaks "
                    "--phase '%s' TRACE" % (request.node.nodeid, grown, checker.limit_bytes, checker.name),
                    pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    """A marked test gets the fixture without naming it."""
    for item in items:
        names = getattr(item, "fixturenames", None)  # a pytest.Function's; other items have none
        if item.get_closest_marker(MARKER) and names is not None and MARKER not in names:
            names.append(MARKER)
