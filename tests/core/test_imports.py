"""The auditing core imports neither torch, mlflow nor click (DESIGN.md, "Lines that must hold")."""

import importlib.util
import pkgutil
import subprocess
import sys

#: Every module of the ema.stats package, found without importing it.
STATS_MODULES = tuple(
    f"ema.stats.{module.name}"
    for module in pkgutil.iter_modules(importlib.util.find_spec("ema.stats").submodule_search_locations)
)
CORE_MODULES = ("ema.signals", "ema.thresholds", "ema.stats", *STATS_MODULES, "ema.auditors")
FORBIDDEN = ("torch", "mlflow", "click")


def test_core_modules_cover_the_stats_package():
    assert {"ema.stats.paper", "ema.stats.placement", "ema.stats.power"} <= set(STATS_MODULES)


def test_core_imports_no_framework_tracking_or_cli():
    code = (
        f"import {', '.join(CORE_MODULES)}; import sys; "
        f"loaded = sorted({set(FORBIDDEN)!r} & set(sys.modules)); "
        "assert not loaded, f'core imported {loaded}'"
    )
    completed = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
