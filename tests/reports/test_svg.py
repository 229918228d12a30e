"""The report's SVG plots: round ticks, step lines, merged pixel runs, escaped labels, degenerate data."""

from __future__ import annotations

import re
from xml.etree import ElementTree

import numpy as np
import pytest

from ema.reports import figures, svg

NS = {"svg": "http://www.w3.org/2000/svg"}


def parsed(picture: bytes) -> ElementTree.Element:
    root = ElementTree.fromstring(picture)
    assert root.tag == f"{{{NS['svg']}}}svg"
    return root


def texts(root: ElementTree.Element) -> list[str]:
    return [element.text for element in root.iterfind(".//svg:text", NS)]


def points(path: ElementTree.Element) -> np.ndarray:
    return np.array(re.findall(r"(-?[\d.]+),(-?[\d.]+)", path.get("d")), dtype=float)


@pytest.mark.parametrize(
    ("low", "high"), [(0, 1), (-0.05, 1.05), (2.3, 34.6), (-3e-5, 7e-5), (1000, 1001), (-20, -19.5)]
)
def test_linear_ticks_are_round_and_span_the_range(low, high):
    ticks = svg.linear_ticks(low, high)
    step = np.diff(ticks)
    assert 3 <= ticks.size <= 11 and np.allclose(step, step[0])
    mantissa = step[0] / 10 ** np.floor(np.log10(step[0]) + 1e-9)
    assert any(np.isclose(mantissa, m) for m in (1, 2, 2.5, 5))
    assert ticks[0] >= low - 1e-12 and ticks[-1] <= high + 1e-12
    assert ticks[0] - low < step[0] and high - ticks[-1] < step[0]


def test_linear_ticks_give_an_exact_zero():
    assert 0.0 in svg.linear_ticks(-0.3, 0.7) and "-0" not in svg.tick_labels(svg.linear_ticks(-0.3, 0.7))


def test_log_ticks_are_the_decades_inside():
    assert np.allclose(svg.log_ticks(1e-4, 1.0), [1e-4, 1e-3, 1e-2, 1e-1, 1])
    assert svg.tick_labels(svg.log_ticks(3e-4, 0.5)) == ["0.001", "0.01", "0.1"]


def test_a_step_line_holds_each_value_until_the_next_x():
    panel = svg.Panel()
    panel.add(np.array([0.0, 1.0, 3.0]), np.array([0.2, 0.5, 1.0]), step=True)
    (line,) = panel.lines
    assert np.array_equal(line.x, [0, 1, 1, 3, 3]) and np.array_equal(line.y, [0.2, 0.2, 0.5, 0.5, 1.0])


def test_an_ecdf_of_many_samples_is_drawn_through_its_ends_with_its_pixel_runs_merged():
    values = np.sort(np.random.default_rng(0).normal(size=20_000))
    picture = figures.score_distributions({"query": {"score": values}}, thresholds={}, title="t")
    paths = parsed(picture).findall(".//svg:g/svg:path", NS)
    ecdf = max(paths, key=lambda path: np.ptp(points(path)[:, 1]))  # the ECDF spans the most height of the row
    drawn = points(ecdf)
    assert len(drawn) < 2 * 20_000 / 4  # far fewer vertices than the 40,000 of the step line
    assert drawn[:, 0].min() == drawn[0, 0] and drawn[:, 0].max() == drawn[-1, 0]  # left to right
    assert np.all(np.diff(drawn[:, 0]) >= 0) and np.all(np.diff(drawn[:, 1]) <= 0)  # a CDF: up the page


@pytest.mark.parametrize("zeros", [0, 20, 2000])
def test_a_step_line_stays_a_staircase_when_many_steps_share_a_pixel(zeros):
    """4,000 binary scores: steps of 0.04 px. Merging them must keep both corners of every step (no diagonal)."""
    values = np.r_[np.zeros(zeros), np.ones(4000 - zeros)]
    picture = figures.score_distributions({"members": {"correctness": values}}, thresholds={}, title="t")
    for path in parsed(picture).findall(".//svg:g/svg:path", NS):
        drawn = points(path)
        moved = np.diff(drawn, axis=0) != 0
        assert not np.any(moved.all(axis=1)), drawn  # every segment is horizontal or vertical


def test_score_figure_has_a_row_per_score_a_legend_and_the_threshold():
    rng = np.random.default_rng(1)
    distributions = {
        "query <M1> & co": {"confidence": rng.uniform(0.9, 1, 300), "correctness": (rng.random(300) < 0.9) * 1.0},
        "members (reference)": {"confidence": rng.uniform(0.95, 1, 200), "correctness": np.ones(200)},
    }
    root = parsed(figures.score_distributions(distributions, thresholds={"confidence": 0.97}, title="scores"))
    words = texts(root)
    assert "query <M1> & co (n=300)" in words  # escaped in the file, read back as written
    assert words.count("members (reference) (n=200)") == 2  # one legend per row
    assert "logit(confidence)" in words and "threshold 0.97" in words
    dashed = [path for path in root.iterfind(".//svg:g/svg:path", NS) if path.get("stroke") == "black"]
    assert len(dashed) == 2 and all(path.get("stroke-dasharray") for path in dashed)  # histogram and ECDF
    assert {path.get("stroke") for path in root.iterfind(".//svg:g/svg:path", NS)} >= set(svg.COLORS[:2])


def test_roc_figure_has_a_log_axis_and_one_line_per_curve_and_chance():
    fpr = np.linspace(0, 1, 1001)
    curves = {f"score {i}": (fpr, fpr ** (1 / (i + 2))) for i in range(12)}  # more curves than colours
    root = parsed(figures.roc_curves(curves, title="roc"))
    words = texts(root)
    assert {"0.001", "0.01", "0.1", "1"} <= set(words) and "false-positive rate (log scale)" in words
    assert all(f"score {i}" in words for i in range(12)) and "chance" in words
    assert len(root.findall(".//svg:g/svg:path", NS)) == 13


@pytest.mark.parametrize(
    "scores",
    [np.full(50, 0.7), np.array([np.nan, np.inf]), np.zeros(0)],
    ids=["one value", "nothing finite", "empty"],
)
def test_degenerate_scores_still_make_a_figure(scores):
    parsed(figures.score_distributions({"query": {"confidence": scores}}, thresholds={"confidence": 0.5}, title="t"))


def test_no_scores_make_an_empty_figure():
    root = parsed(figures.score_distributions({}, thresholds={}, title="nothing"))
    assert "nothing" in texts(root)


#: DejaVu Sans at 11 px: no label's characters average wider (measured in Chromium: 5.75 px for a legend label).
CHAR_WIDTH = 6.2


def _size(root: ElementTree.Element) -> tuple[float, float]:
    return float(root.get("width")), float(root.get("height"))


def test_legends_fit_long_labels_and_many_entries():
    fpr = np.linspace(0, 1, 101)
    long = "calibrated: its score (member and non-member references), measured on a very long query file name"
    curves = {long: (fpr, fpr**0.5), **{f"score {i}": (fpr, fpr ** (1 / (i + 2))) for i in range(24)}}
    root = parsed(figures.roc_curves(curves, title="roc"))
    width, height = _size(root)
    for text in root.iterfind(".//svg:text", NS):
        if text.get("text-anchor") == "start":  # a legend entry
            assert float(text.get("x")) + CHAR_WIDTH * len(text.text) <= width, text.text
            assert float(text.get("y")) <= height, text.text
    looks = {(path.get("stroke"), path.get("stroke-dasharray")) for path in root.iterfind(".//svg:g/svg:path", NS)}
    assert len(looks) == 26  # 25 curves and chance, each its own colour and dash


def test_characters_xml_forbids_are_replaced_not_written():
    label = "query\x0bfile\x00 \udcff.csv"
    root = parsed(
        figures.score_distributions({label: {"confidence": np.linspace(0.5, 1, 20)}}, thresholds={}, title=label)
    )
    assert "query\ufffdfile\ufffd \ufffd.csv" in texts(root)


def test_a_curve_whose_false_positive_rates_are_all_zero_is_drawn_at_the_left_end():
    root = parsed(figures.roc_curves({"perfect": (np.zeros(3), np.array([0.0, 0.5, 1.0]))}, title="roc"))
    frame = root.find(".//svg:rect[@stroke='black']", NS)
    left, top = float(frame.get("x")), float(frame.get("y"))
    (perfect, _) = root.findall(".//svg:g/svg:path", NS)
    drawn = points(perfect)
    assert np.all(drawn[:, 0] == left) and drawn[:, 1].min() < top + 10  # up the left edge to a TPR of 1


def test_a_histogram_peak_is_kept_when_many_bins_share_a_pixel_column():
    """A threshold far from the data squeezes the bins into one pixel column: the tallest bin's top must stay."""
    values = np.random.default_rng(3).normal(size=2000)
    root = parsed(figures.score_distributions({"q": {"score": values}}, thresholds={"score": 50_000.0}, title="t"))
    frame = root.find(".//svg:rect[@stroke='black']", NS)  # the histogram's panel comes first
    top, height = float(frame.get("y")), float(frame.get("height"))
    histogram = root.find(".//svg:g/svg:path", NS)
    assert points(histogram)[:, 1].min() == pytest.approx(top + height * (1 - 1 / 1.05), abs=0.15)


def test_tick_labels_differ_on_a_narrow_range_and_log_ticks_thin_out():
    assert len(set(svg.tick_labels(svg.linear_ticks(1.0, 1.0 + 1e-12)))) == len(svg.linear_ticks(1.0, 1.0 + 1e-12))
    assert len(set(svg.tick_labels(svg.linear_ticks(1e6, 1e6 + 1e-3)))) > 2
    decades = svg.log_ticks(1e-30, 1.0)
    assert decades.size <= svg.MOST_LOG_TICKS and decades[-1] == 1.0


def test_one_sample_draws_its_ecdf_step_from_zero():
    root = parsed(figures.score_distributions({"q": {"score": np.array([0.3])}}, thresholds={}, title="t"))
    ecdf = root.findall(".//svg:g/svg:path", NS)[1]
    assert np.ptp(points(ecdf)[:, 1]) > 100  # from 0 to 1: most of the panel's height
