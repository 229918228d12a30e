"""The auditing core imports neither torch, mlflow nor click (DESIGN.md, "Lines that must hold")."""

import subprocess
import sys

CORE_MODULES = ("ema.signals", "ema.thresholds", "ema.stats", "ema.auditors")
FORBIDDEN = ("torch", "mlflow", "click")


def test_core_imports_no_framework_tracking_or_cli():
    code = (
        f"import {', '.join(CORE_MODULES)}; import sys; "
        f"loaded = sorted({set(FORBIDDEN)!r} & set(sys.modules)); "
        "assert not loaded, f'core imported {loaded}'"
    )
    completed = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
