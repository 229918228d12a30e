"""The MLflow UI's compare page, rendered in headless Chromium, shows both audits' rho values and verdict codes;
report.html renders its figures, the ROC curve among them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
import requests

from ema.data.arrays import ArraySet
from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.tracking.runs import configure
from ema.training.spec import TrainSpec
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.train import train_target
from tests.ui.browser import Browser
from tests.workflows.test_serving import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SERVER_START_TIMEOUT = 120.0

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (.ci/run installs Debian's chromium)"
)


def chromium(*args: str, profile: Path, timeout: float = 120) -> str:
    command = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True).stdout


@pytest.fixture(scope="module")
def two_audits(tmp_path_factory, template_db):
    """Two audits of a 40-image non-member query file (30 from M6, 10 from S) against two target versions.

    The targets flag most but not all of them, so rho_ema lies strictly between 0 and 1
    and differs between the versions: values the page must show.
    """
    from tests.conftest import open_store

    directory = tmp_path_factory.mktemp("ui")
    open_store(directory, template_db)
    configure()
    splits = load_splits()
    held_out, other = splits.query("M6").take(np.arange(30)), splits.query("S").take(np.arange(10))
    mixed = ArraySet("mixed", *(np.concatenate([getattr(held_out, a), getattr(other, a)]) for a in ("x", "y", "index")))
    query_file = write_set(mixed, directory / "m6-s-40.npz")
    runs = []
    for epochs in (20, 30):
        version = train_target(TrainSpec(epochs=epochs), progress=False).version
        runs.append(audit(AuditConfig(model_uri=version.uri, query_file=str(query_file)), progress=False))
    return directory, runs


@pytest.fixture(scope="module")
def ui_server(two_audits):
    directory, _ = two_audits
    port = free_port()
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    process = subprocess.Popen(
        [
            str(mlflow_cli),
            "server",
            "--backend-store-uri",
            os.environ["MLFLOW_TRACKING_URI"],
            "--artifacts-destination",
            str(directory / "mlruns"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env={
            **os.environ,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "PATH": f"{mlflow_cli.parent}{os.pathsep}{os.environ['PATH']}",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            try:
                if requests.get(f"{base}/health", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("mlflow server did not start")
            time.sleep(0.5)
        yield base
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)


def compare_url(base: str, runs) -> str:
    from mlflow.tracking import MlflowClient

    ids = [r.run_id for r in runs]
    experiment = MlflowClient().get_run(ids[0]).info.experiment_id
    query = urllib.parse.urlencode({"runs": json.dumps(ids), "experiments": json.dumps([experiment])})
    return f"{base}/#/compare-runs?{query}"


def screenshot_page(url: str, tmp_path: Path, name: str) -> None:
    """A 1600x1200 screenshot of ``url``, not blank, copied to ``$EMA_SCREENSHOT_DIR/name`` when that is set."""
    screenshot = tmp_path / name
    chromium(
        "--virtual-time-budget=30000",
        "--window-size=1600,1200",
        f"--screenshot={screenshot}",
        url,
        profile=tmp_path / f"profile-{name}",
    )
    assert screenshot.stat().st_size > 10_000
    keep = os.environ.get("EMA_SCREENSHOT_DIR")
    if keep:
        shutil.copy(screenshot, Path(keep) / name)


def test_compare_page_shows_rho_of_both_audits(two_audits, ui_server, tmp_path):
    _, runs = two_audits
    values = [run.primary.metrics["rho_ema"] for run in runs]
    assert all(0 < v < 1 for v in values) and values[0] != values[1], values
    url = compare_url(ui_server, runs)
    dom = chromium("--virtual-time-budget=30000", "--dump-dom", url, profile=tmp_path / "profile-dom")
    assert "rho_ema" in dom and "rho_ema_ks" in dom
    for run in runs:
        assert run.run_id in dom or run.primary.verdict in dom
        for metric in ("rho_ema", "rho_ema_ks"):
            value = run.primary.metrics[metric]
            shown = {f"{value:.{digits}g}" for digits in range(3, 8)} | {str(round(value, 4)), str(value)}
            assert any(text in dom for text in shown), (metric, value)
    screenshot_page(url, tmp_path, "mlflow-compare.png")


#: JavaScript: the compare page's metrics table as two react-virtualized grids, the names' (each name links to
#: its chart) and the values'.
METRIC_GRIDS = """(() => {
    const grids = [...document.querySelectorAll('.ReactVirtualized__Grid')];
    const names = grids.find(g => g.querySelector('a[title="Plot chart"]'));
    const values = grids.find(g => g !== names && g.innerText.trim() !== '');
    return names && values ? {names, values} : null;
})()"""


#: JavaScript: scroll the metrics grid's values and names columns to their last rows. MLflow syncs the names column
#: from the values' scroll events, one event late, and not at all once the grid holds more rows than it renders
#: (25 metrics of an audit that logs each method's flag rate): both are scrolled, as a user's wheel over each would.
SCROLL_METRICS_TO_BOTTOM = f"""(async () => {{
    const {{names, values}} = {METRIC_GRIDS};
    for (const grid of [values, names]) {{
        grid.scrollTop = grid.scrollHeight;
        await new Promise(resolve => setTimeout(resolve, 500));
        grid.dispatchEvent(new Event('scroll'));
    }}
}})()"""


def metric_row_js(metric: str) -> str:
    """JavaScript: the values shown in ``metric``'s row, one per run left to right, once its name and cells render."""
    return f"""(() => {{
        const {{names, values}} = {METRIC_GRIDS};
        const name = [...names.querySelectorAll('[style]')].find(c => c.innerText.trim() === {json.dumps(metric)});
        if (!name) return null;
        const cells = [...values.querySelectorAll('[style]')].filter(c => c.style.top === name.style.top);
        cells.sort((a, b) => parseFloat(a.style.left) - parseFloat(b.style.left));
        name.scrollIntoView({{block: 'center'}});
        const box = name.getBoundingClientRect();
        const inView = box.top >= 0 && box.bottom <= window.innerHeight;
        return cells.length && inView ? cells.map(c => c.innerText.trim()) : null;
    }})()"""


def test_compare_page_shows_verdict_codes_of_both_audits_side_by_side(two_audits, ui_server, tmp_path):
    """The verdict metrics sort last, below the 17 rows the 300-pixel virtualised metrics grid renders before it
    scrolls (7 in view and 10 overscanned): absent from the first DOM, they appear once the grid is scrolled.

    Both the values and the names columns are scrolled (:data:`SCROLL_METRICS_TO_BOTTOM`).
    """
    from ema.auditors.result import VERDICT_CODES

    _, runs = two_audits
    codes = [VERDICT_CODES[run.results["ema"].verdict] for run in runs]
    assert codes[0] != codes[1], codes  # the versions disagree, so a column shown under the wrong run would fail
    with Browser(CHROMIUM, CHROMIUM_FLAGS, profile=tmp_path / "profile", width=1600, height=1200) as browser:
        browser.open(compare_url(ui_server, runs))
        browser.wait_for(METRIC_GRIDS + " && document.body.innerText.includes('Run ID')")
        run_ids = browser.evaluate(
            "[...document.querySelectorAll('tr')].find(r => r.innerText.startsWith('Run ID')).innerText"
        )
        assert run_ids.split()[2:] == [run.run_id for run in runs]  # the columns' order
        browser.evaluate(SCROLL_METRICS_TO_BOTTOM)
        for metric in ("verdict_code", "verdict_code.ema"):
            assert browser.wait_for(metric_row_js(metric)) == [f"{code:g}" for code in codes], metric
        shot = browser.screenshot(tmp_path / "mlflow-compare-verdicts.png")
    assert shot.stat().st_size > 10_000
    keep_screenshot(shot)


def keep_screenshot(path: Path) -> None:
    """Copy ``path`` to ``$EMA_SCREENSHOT_DIR`` when that is set (CI keeps it as an artifact)."""
    keep = os.environ.get("EMA_SCREENSHOT_DIR")
    if keep:
        shutil.copy(path, Path(keep) / path.name)


def served_report(base: str, run_id: str, tmp_path: Path) -> Path:
    """The run's report.html as the tracking server serves it, saved under ``tmp_path``."""
    page = tmp_path / "report.html"
    page.write_bytes(requests.get(f"{base}/get-artifact?path=report.html&run_uuid={run_id}", timeout=30).content)
    return page


#: JavaScript: the report's ROC figure once Chromium has decoded it, scrolled into view: its box in the viewport.
ROC_IMAGE_BOX = """(() => {
    const image = document.querySelector('#attack img[alt^="ROC curves"]');
    if (!image || !image.complete || image.naturalWidth === 0) return null;
    image.scrollIntoView({block: 'center'});
    const box = image.getBoundingClientRect();
    return {left: box.left, top: box.top, right: box.right, bottom: box.bottom, natural: image.naturalWidth};
})()"""


def test_audit_report_roc_figure_renders_in_chromium(two_audits, ui_server, tmp_path):
    """The attack-strength section's ROC figure is decoded and drawn: its screenshot region holds curves, not blank."""
    from PIL import Image

    _, runs = two_audits
    run = runs[0]
    assert run.primary.metrics["mia_auc.confidence"] > 0  # the audit measured attack strength, so a curve exists
    page = served_report(ui_server, run.run_id, tmp_path)
    with Browser(CHROMIUM, CHROMIUM_FLAGS, profile=tmp_path / "profile", width=1400, height=1000) as browser:
        browser.open(page.as_uri())
        box = browser.wait_for(ROC_IMAGE_BOX)
        shot = browser.screenshot(tmp_path / "audit-report-roc.png")
    assert box["natural"] >= 400 and box["top"] >= 0 and box["bottom"] <= 1000, box
    region = tuple(round(box[side]) for side in ("left", "top", "right", "bottom"))
    pixels = np.asarray(Image.open(shot).convert("RGB").crop(region))
    drawn = np.any(pixels < 200, axis=-1)  # axes, labels and curves; the figure's background is white
    coloured = np.ptp(pixels.astype(int), axis=-1) > 80  # the curves; axes and text are grey
    assert 0.02 < drawn.mean() < 0.5 and coloured.mean() > 0.002, (drawn.mean(), coloured.mean())
    keep_screenshot(shot)


def test_audit_report_renders_with_verdict_pvalues_and_figures(two_audits, ui_server, tmp_path):
    """report.html, as the tracking server serves it, rendered by Chromium; and shown in the UI's artifact view."""
    from mlflow.tracking import MlflowClient

    from ema.reports.audit import VERDICT_WORDS
    from ema.reports.page import number

    _, runs = two_audits
    run = runs[0]
    page = served_report(ui_server, run.run_id, tmp_path)
    dom = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "profile-report")
    assert f"Verdict: {VERDICT_WORDS[run.primary.verdict][0]}" in dom
    pvalues = dom.split('id="pvalues"')[1].split("</section>")[0]
    for metric in ("rho_ema", "rho_ema_ks"):
        assert metric in pvalues and number(run.primary.metrics[metric]) in pvalues, metric
    assert dom.count("<img ") >= 1 and 'src="data:image/svg+xml;base64,' in dom
    assert "non-members (reference)" in dom  # the query's scores are drawn beside a reference's
    assert "figures/ema_scores.svg" in {a.path for a in MlflowClient().list_artifacts(run.run_id, "figures")}

    experiment = MlflowClient().get_run(run.run_id).info.experiment_id
    view = f"{ui_server}/#/experiments/{experiment}/runs/{run.run_id}/artifacts/report.html"
    ui_dom = chromium("--virtual-time-budget=30000", "--dump-dom", view, profile=tmp_path / "profile-view")
    assert "mlflow-html-iframe" in ui_dom  # the artifact view shows the page as HTML, not as text
    shots = {"audit-report.png": page.as_uri(), "mlflow-artifact-report.png": view}
    for name, url in shots.items():
        chromium(
            "--virtual-time-budget=30000",
            "--window-size=1400,2400",
            f"--screenshot={tmp_path / name}",
            url,
            profile=tmp_path / f"profile-{name}",
        )
        assert (tmp_path / name).stat().st_size > 10_000
    keep = os.environ.get("EMA_SCREENSHOT_DIR")
    if keep:
        for name in shots:
            shutil.copy(tmp_path / name, Path(keep) / name)


#: The verdict box's background colours in ema.reports.page.STYLE: amber (.warned) and green (.not_memorized).
AMBER, GREEN = (0xFF, 0xF3, 0xE0), (0xE8, 0xF5, 0xE9)


def rendered_report(tmp_path: Path, name: str, warnings: list[str]) -> tuple[str, np.ndarray]:
    """A not_memorized report with ``warnings``, as Chromium renders it: (its DOM, a screenshot as RGB pixels)."""
    from PIL import Image

    from ema.reports.audit import render_audit_report
    from tests.reports.test_audit_report import make_result

    page = tmp_path / f"{name}.html"
    page.write_text(
        render_audit_report({"ema": make_result()}, query="M6", lineage={}, command="ema audit", warnings=warnings).html
    )
    dom = chromium("--dump-dom", page.as_uri(), profile=tmp_path / f"profile-{name}-dom")
    shot = tmp_path / f"{name}.png"
    chromium("--window-size=1200,900", f"--screenshot={shot}", page.as_uri(), profile=tmp_path / f"profile-{name}")
    return dom, np.asarray(Image.open(shot).convert("RGB"))


def share_of(pixels: np.ndarray, colour: tuple[int, int, int]) -> float:
    return float(np.all(pixels == colour, axis=-1).mean())


def test_audit_report_with_a_gate_fired_renders_an_amber_verdict_box_with_the_warning_inside(tmp_path):
    gate = "target accuracy on the non-member reference is 0.027, near chance (0.100): inputs are probably scaled"
    dom, pixels = rendered_report(tmp_path, "warned", [gate])
    box = dom.split('id="verdict"')[1].split('<section id="')[0]
    assert "Verdict: Not memorized (with caveats)" in box and "near chance (0.100)" in box
    assert share_of(pixels, AMBER) > 0.01 and share_of(pixels, GREEN) == 0.0


def test_audit_report_without_warnings_renders_a_green_verdict_box(tmp_path):
    dom, pixels = rendered_report(tmp_path, "clean", [])
    assert "Verdict: Not memorized" in dom and "caveats" not in dom
    assert share_of(pixels, GREEN) > 0.01 and share_of(pixels, AMBER) == 0.0
