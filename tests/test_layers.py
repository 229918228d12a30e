"""Imports run one way (DESIGN.md, "Lines that must hold"): every module's imports against one table.

The table names each layer and the layers it may import; a second table names which
layers may import each heavy third-party package. The checker reads imports with ``ast``
(top-level and inside functions alike), so a lazy import is held to the same rules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ema", "ema_cli")

#: Module prefix -> layer; the longest matching prefix wins.
LAYER_OF_PREFIX = {
    "ema": "root",
    "ema.errors": "base",
    "ema.validation": "base",
    "ema.limits": "base",
    "ema.run_warnings": "base",
    "ema.progress": "base",
    "ema.model_package": "base",
    "ema.signals": "core",
    "ema.thresholds": "core",
    "ema.stats": "core",
    "ema.auditors": "core",
    "ema.inputs": "data",
    "ema.input_transform": "data",
    "ema.image_shapes": "data",
    "ema.data": "data",
    "ema.training": "training",
    "ema.oracle": "oracle",
    "ema.engines": "engines",
    "ema.reports": "reports",
    "ema.tracking": "tracking",
    "ema.workflows": "workflows",
    "ema.experiments": "experiments",
    "ema_cli": "cli",
}

_BELOW_TRACKING = {"base", "core", "data", "training", "oracle"}
#: Layer -> the layers it may import (itself included).
ALLOWED = {
    "root": {"root", "base", "core", "workflows"},  # the lazy facade of ema/__init__.py
    "base": {"base"},
    "core": {"base", "core"},
    "data": {"base", "data"},
    "training": {"base", "data", "training"},
    "oracle": {"base", "core", "data", "oracle"},
    "engines": {"base", "core", "data", "oracle", "engines"},
    "reports": {"base", "core", "reports"},
    "tracking": {"base", "data", "tracking"},
    "workflows": _BELOW_TRACKING | {"engines", "reports", "tracking", "workflows"},
    "experiments": _BELOW_TRACKING | {"engines", "reports", "tracking", "workflows", "experiments"},
    "cli": {"root", "workflows", "experiments", "cli"},
}

#: Third-party package -> the layers (or single modules) that may import it.
THIRD_PARTY = {
    "mlflow": {"tracking", "oracle", "ema.training.packaging", "ema.training.pyfunc_code"},
    "torch": {"training"},
    "torchvision": {"training"},
    "pyspark": {"engines"},
    "click": {"cli"},
    "matplotlib": {"reports", "experiments"},
}


def layer_of(module: str) -> str | None:
    matches = [prefix for prefix in LAYER_OF_PREFIX if module == prefix or module.startswith(prefix + ".")]
    return LAYER_OF_PREFIX[max(matches, key=len)] if matches else None


def imported_modules(source: str, module: str) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports, relative imports resolved."""
    package = module.split(".")
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level]) if node.level else ""
            name = ".".join(part for part in (base, node.module) if part)
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def violations(module: str, source: str) -> list[str]:
    """The forbidden imports of one module, as readable lines."""
    own = layer_of(module)
    problems = []
    for target in sorted(imported_modules(source, module)):
        top = target.split(".")[0]
        if top in PACKAGES:
            other = layer_of(target)
            if other is None or other in ALLOWED[own]:
                continue
            problems.append(f"{module} ({own}) imports {target} ({other})")
        elif top in THIRD_PARTY and not {own, module} & THIRD_PARTY[top]:
            problems.append(f"{module} ({own}) imports {top}")
    return problems


def project_modules() -> dict[str, str]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path.read_text()
    return modules


def test_every_module_has_a_layer():
    assert [m for m in project_modules() if layer_of(m) is None] == []


def test_imports_follow_the_layer_table():
    problems = [line for module, source in project_modules().items() for line in violations(module, source)]
    assert problems == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("ema.workflows.audit", "from ema.experiments.paper.runner import run_grid", "imports ema.experiments.paper"),
        ("ema.stats.paper", "import torch", "ema.stats.paper (core) imports torch"),
        ("ema.workflows.train", "def f():\n    import mlflow\n", "ema.workflows.train (workflows) imports mlflow"),
        ("ema.tracking.registry", "from ema.training.packaging import x", "imports ema.training.packaging"),
        ("ema_cli.audit", "from ema.stats import EMA_TESTS", "ema_cli.audit (cli) imports ema.stats (core)"),
        ("ema.auditors.ema", "from ..tracking import keys", "imports ema.tracking"),
    ],
)
def test_checker_refuses_a_forbidden_edge(module, source, expected):
    assert any(expected in line for line in violations(module, source))


def test_checker_accepts_an_allowed_edge():
    assert violations("ema.workflows.audit", "from ema.tracking import keys\nimport numpy") == []


def test_no_module_imports_the_benchmarks():
    """benchmarks/ holds measurements only: studies live in ema.experiments and never reach back into it."""
    importers = [
        module
        for module, source in project_modules().items()
        if any(target.split(".")[0] == "benchmarks" for target in imported_modules(source, module))
    ]
    assert importers == []


#: The studies of ema/experiments/: one subpackage each (DESIGN.md, "Inside ema/").
STUDIES = sorted(f"ema.experiments.{path.parent.name}" for path in (ROOT / "ema" / "experiments").glob("*/__init__.py"))


def study_of(module: str) -> str | None:
    return next((study for study in STUDIES if module == study or module.startswith(study + ".")), None)


def test_no_study_imports_another():
    """Each study stands alone: what two studies share lives at ema/experiments/ top (common, parallel)."""
    assert STUDIES == ["ema.experiments.errors", "ema.experiments.paper", "ema.experiments.unlearning"]
    crossings = [
        f"{module} imports {target}"
        for module, source in project_modules().items()
        for target in sorted(imported_modules(source, module))
        if study_of(module) and study_of(target) not in (None, study_of(module))
    ]
    assert crossings == []


#: House rule: no module under ema/ or ema_cli/ is longer than this (split along a seam instead).
MAX_MODULE_LINES = 450


def oversized_modules(modules: dict[str, str], limit: int = MAX_MODULE_LINES) -> list[str]:
    """The modules longer than ``limit`` lines, each named with its length."""
    lengths = {module: len(source.splitlines()) for module, source in modules.items()}
    return [f"{module}: {length} lines (at most {limit})" for module, length in lengths.items() if length > limit]


def test_no_module_is_over_the_line_limit():
    assert oversized_modules(project_modules()) == []


def test_line_limit_names_the_module_and_its_length():
    modules = {"ema.short": "x = 1\n" * MAX_MODULE_LINES, "ema.long": "x = 1\n" * (MAX_MODULE_LINES + 1)}
    assert oversized_modules(modules) == [f"ema.long: {MAX_MODULE_LINES + 1} lines (at most {MAX_MODULE_LINES})"]
