"""The lazy facade of ``ema/__init__.py``: cheap to import, each name the object its module defines."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import ema
from tests.test_layers import ALLOWED, layer_of

#: Prints which heavy packages ``import ema`` (and nothing else) imported.
PROBE = "import sys, ema; print(*sorted(n for n in ('mlflow', 'torch', 'sklearn', 'scipy') if n in sys.modules))"


def test_import_ema_imports_neither_mlflow_nor_torch():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.split() == []


@pytest.mark.parametrize("name", sorted(ema._FACADE))
def test_facade_name_is_the_object_its_module_defines(name):
    module = importlib.import_module(ema._FACADE[name])
    assert getattr(ema, name) is getattr(module, name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("audit", "ema.workflows.audit.audit"),
        ("AuditConfig", "ema.workflows.audit_config.AuditConfig"),
        ("AuditResult", "ema.auditors.result.AuditResult"),
        ("EMAAuditor", "ema.auditors.ema.EMAAuditor"),
        ("KSRatioAuditor", "ema.auditors.ks_ratio.KSRatioAuditor"),
        ("CalibratedAuditor", "ema.auditors.calibrated.CalibratedAuditor"),
        ("check_auditor", "ema.auditors.conformance.check_auditor"),
        ("InputError", "ema.errors.InputError"),
    ],
)
def test_facade_name_is_the_public_object_users_know(name, expected):
    value = getattr(ema, name)
    assert f"{value.__module__}.{value.__qualname__}" == expected


def test_facade_lists_every_public_error_kind():
    from ema import errors

    kinds = {name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, Exception)}
    assert kinds <= set(ema._FACADE)


def test_all_and_dir_list_the_facade():
    assert set(ema._FACADE) <= set(ema.__all__)
    assert set(ema.__all__) <= set(dir(ema))


def test_facade_modules_are_layers_the_root_may_import():
    assert {layer_of(module) for module in ema._FACADE.values()} <= ALLOWED["root"]


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'ema' has no attribute 'nope'"):
        ema.nope  # noqa: B018
