"""A function of another module, imported when first called: how a table row names code that imports mlflow.

The method table and the engine table are read by ``ema audit --help``, which must answer without
mlflow or torch (``tests/cli/test_cli_imports.py``); their rows name the runners, engines and checks
that import them through :func:`deferred`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def deferred(module: str, name: str) -> Callable[..., Any]:
    """A callable that imports ``module`` on its first call and calls its ``name`` with the same arguments."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call
