"""``ema audit --no-figures``: the same verdict, numbers and report, without the figures; no audit imports matplotlib.

Audits run the test-only toy method of ``tests/workflows/test_methods.py`` (a few seconds each),
on a quickly trained target.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from tests.workflows.conftest import probe_output
from tests.workflows.test_methods import toy_method  # noqa: F401 (a fixture)


def artifacts(run_id: str) -> set[str]:
    """Every artifact path of the run, folders listed through."""
    client, found, folders = MlflowClient(), set(), [None]
    while folders:
        for entry in client.list_artifacts(run_id, folders.pop()):
            (folders.append if entry.is_dir else found.add)(entry.path)
    return found


def report(run_id: str, folder: Path) -> str:
    return Path(MlflowClient().download_artifacts(run_id, keys.ARTIFACT_REPORT, str(folder))).read_text()


@pytest.mark.usefixtures("toy_method")
def test_an_audit_without_figures_logs_the_same_verdict_and_numbers_and_no_figure(trained, tmp_path):
    _, outcome = trained
    config = AuditConfig(model_uri=outcome.version.uri, query="M1", method="toy")
    drawn = audit(config, progress=False)
    plain = audit(dataclasses.replace(config, figures=False), progress=False)
    client = MlflowClient()
    with_figures, without = client.get_run(drawn.run_id).data, client.get_run(plain.run_id).data
    assert without.metrics == with_figures.metrics
    assert without.tags[keys.TAG_VERDICT] == with_figures.tags[keys.TAG_VERDICT]
    assert f"{keys.ARTIFACT_FIGURES_DIR}/toy_scores.svg" in artifacts(drawn.run_id)
    figures = {path for path in artifacts(drawn.run_id) if path.startswith(f"{keys.ARTIFACT_FIGURES_DIR}/")}
    assert artifacts(plain.run_id) == artifacts(drawn.run_id) - figures
    page = report(plain.run_id, tmp_path)
    assert "Not drawn: this audit ran without figures" in page and "<img" not in page
    assert "--no-figures" in page.split('id="reproduce"')[1]  # the command asks for the same audit


#: Registers the toy, then runs ``ema audit --method toy`` on the model given as the first argument, first with
#: ``--no-figures``, then without, in one process: prints whether matplotlib was imported after each
#: (the report's figures are SVG written by ``ema.reports.svg``).
PROBE = """
import sys
from ema.workflows.methods import register_method
from tests.workflows.test_methods import toy_spec
register_method(toy_spec())
from ema_cli.cli import main
audit = ["audit", "--model", sys.argv[1], "--query", "M6", "--method", "toy", "--no-progress"]
for extra in (["--no-figures"], []):
    main([*audit, *extra], prog_name="ema", standalone_mode=False)
    print("matplotlib imported:", "matplotlib" in sys.modules)
"""


def test_ema_audit_never_imports_matplotlib_figures_or_not(trained):
    _, outcome = trained
    words = probe_output(PROBE, outcome.version.uri)
    assert words.count("matplotlib imported: False") == 2
