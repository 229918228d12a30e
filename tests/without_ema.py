"""An environment in which the ``ema`` package cannot be imported, for checking that our models are self-contained.

``sitecustomize`` runs at the start of every Python process whose path holds it, the
processes that ``mlflow models serve`` starts included: the one written here puts a finder
first on ``sys.meta_path`` that refuses ``ema`` and everything under it.
"""

from __future__ import annotations

import os
from pathlib import Path

SITECUSTOMIZE = """
import importlib.abc
import sys


class RefuseEma(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ema" or name.startswith("ema."):
            raise ModuleNotFoundError(f"No module named {name!r} (refused: this environment has no ema)", name=name)
        return None


sys.meta_path.insert(0, RefuseEma())
"""


def environment_without_ema(folder: Path) -> dict[str, str]:
    """``os.environ`` with a ``PYTHONPATH`` of only a folder whose ``sitecustomize`` refuses to import ``ema``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {**os.environ, "PYTHONPATH": str(folder)}
