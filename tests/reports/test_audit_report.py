"""An audit's report page: verdict in words, p-values, figures, caveats, lineage and command, all inline."""

from __future__ import annotations

import base64
import dataclasses
import re
from xml.etree import ElementTree

import numpy as np
import pytest

from ema.auditors.result import AuditResult, is_pvalue
from ema.errors import InputError
from ema.reports.audit import AuditReport, render_audit_report
from ema.reports.page import number
from ema.workflows.methods import metric_vocabulary

SVG_NS = "http://www.w3.org/2000/svg"
SVG_ROOT = f"{{{SVG_NS}}}svg"


def make_result(method="ema", verdict="not_memorized", *, metrics=None, thresholds=None, seed=0) -> AuditResult:
    rng = np.random.default_rng(seed)
    scores = {"confidence": rng.random(50), "negative_entropy": -rng.random(50)}
    flags = {name: values >= 0.5 for name, values in scores.items()}
    membership = np.logical_or.reduce(list(flags.values())).astype(np.int8)
    return AuditResult(
        method=method,
        scores=scores,
        flags=flags,
        membership=membership,
        metrics=metrics or {"rho_ema": 0.0123, "rho_ema_ks": 0.0456, "flag_rate": float(membership.mean())},
        verdict=verdict,
        alpha=0.1,
        thresholds=thresholds
        if thresholds is not None
        else {"mode": "global", "signals": {"confidence": {"global": 0.5}, "negative_entropy": {"global": -0.5}}},
    )


def render(**overrides) -> AuditReport:
    options = {
        "query": "M6",
        "lineage": {"Model": "ema-target v3", "Run that trained the model": "abc123", "Scoring server": None},
        "command": "ema audit --model models:/ema-target/3 --query M6 --method ema",
        "vocabulary": metric_vocabulary(),
    }
    options.update(overrides)
    results = options.pop("results", {"ema": make_result()})
    return render_audit_report(results, **options)


def test_render_audit_report_states_the_verdict_in_words_with_alpha():
    page = render().html
    assert "Verdict: Not memorized" in page and "alpha = 0.1" in page and "not_memorized" in page
    assert "Threshold mode: global; flag rate" in page


def test_render_audit_report_gives_the_flag_rate_as_a_share_and_a_count():
    result = make_result()
    flagged = int(result.membership.sum())
    assert f"<b>{number(result.flag_rate)}</b> ({flagged} of 50 samples)" in render(results={"ema": result}).html


def test_render_audit_report_lists_the_pvalues():
    page = render().html
    assert "rho_ema" in page and "0.0123" in page and "0.0456" in page and "&lt;= 0.1" in page


def test_render_audit_report_inlines_its_figures_and_returns_them_as_svg():
    report = render()
    assert list(report.figures) == ["ema_scores.svg"]
    (picture,) = report.figures.values()
    assert ElementTree.fromstring(picture).tag == SVG_ROOT
    inline = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', report.html)
    assert [base64.b64decode(data) for data in inline] == [picture]


def test_render_audit_report_is_self_contained():
    page = render().html
    assert "<style>" in page and "<script" not in page
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing to fetch


def test_render_audit_report_shows_power_and_any_other_metric_when_the_result_has_them():
    metrics = {"p_removed": 0.2, "p_retained": 0.01, "power_retained": 0.83, "min_detectable_fraction": 0.125}
    page = render(results={"calibrated": make_result("calibrated", "memorized", metrics=metrics)}).html
    power = page.split('id="power"')[1].split("</section>")[0]
    assert "0.83" in power and "0.125" in power and "min_detectable_fraction" in power
    assert "Verdict: Memorized" in page and "p_retained" in page


def test_render_audit_report_says_not_reached_only_of_a_min_detectable_fraction_that_was_not():
    """The meaning column read "(undefined: not reached)" beside a defined 0.46; the value column says it now."""
    metrics = {"p_removed": 0.2, "p_retained": 0.01, "power_retained": 0.3}
    reached = render(
        results={"calibrated": make_result("calibrated", metrics={**metrics, "min_detectable_fraction": 0.46})}
    )
    assert re.search(r"<td>min_detectable_fraction</td><td class=num>0.46</td>", reached.html), reached.html
    assert "not reached" not in reached.html
    missed = render(
        results={"calibrated": make_result("calibrated", metrics={**metrics, "min_detectable_fraction": float("nan")})}
    )
    assert re.search(r"<td>min_detectable_fraction</td><td class=num>not reached</td>", missed.html)


def test_render_audit_report_says_when_power_is_not_reported():
    assert "Not reported" in render().html.split('id="power"')[1].split("</section>")[0]


def test_render_audit_report_shows_warnings_and_assumptions():
    thresholds = {
        "mode": "global",
        "signals": {},
        "warnings": ["the reference has 12 samples of class 3"],
        "assumptions": {"p_removed": "the query, if removed, is distributed like the reference"},
    }
    page = render(results={"calibrated": make_result("calibrated", "inconclusive", thresholds=thresholds)}).html
    assert "the reference has 12 samples of class 3" in page
    assert "distributed like the reference" in page and "Verdict: Inconclusive" in page


def test_render_audit_report_shows_the_warnings_it_is_given_instead_of_the_results():
    thresholds = {"mode": "global", "signals": {}, "warnings": ["from the result"]}
    page = render(results={"ema": make_result(thresholds=thresholds)}, warnings=["from the gates"]).html
    section = page.split('id="warnings"')[1].split("</section>")[0]
    assert "from the gates" in section and "from the result" not in section


def test_render_audit_report_says_none_without_warnings():
    assert "None." in render().html.split('id="warnings"')[1].split("</section>")[0]


def test_render_audit_report_shows_lineage_and_command_and_leaves_out_unknowns():
    page = render().html
    assert "ema-target v3" in page and "abc123" in page and "Scoring server" not in page
    assert "ema audit --model models:/ema-target/3 --query M6 --method ema" in page


def test_render_audit_report_draws_references_beside_the_query():
    rng = np.random.default_rng(1)
    with_refs = render(references={"members": {"confidence": rng.random(40)}, "non-members": {"other": rng.random(5)}})
    assert "beside the references (members, non-members)" in with_refs.html
    assert with_refs.figures["ema_scores.svg"] != render().figures["ema_scores.svg"]


def test_render_audit_report_orders_methods_with_the_run_verdict_first():
    results = {"ema": make_result(), "ks-ratio": make_result("ks-ratio", "memorized", metrics={"rho_ks": 0.8})}
    report = render(results=results)
    assert list(report.figures) == ["ema_scores.svg", "ks-ratio_scores.svg"]
    assert "Verdict: Not memorized" in report.html and "ks-ratio says Memorized" in report.html


def verdict_box(page: str) -> str:
    """The verdict box's opening tag and everything inside it."""
    return page.split('<div class="verdict')[1].split("</div></section>")[0].split('<section id="')[0]


def test_render_audit_report_without_warnings_keeps_the_verdict_box_green():
    page = render(warnings=[]).html
    assert '<div class="verdict not_memorized" id="verdict">' in page
    assert "warned" not in verdict_box(page) and "caveats" not in verdict_box(page)


def test_render_audit_report_with_a_gate_fired_puts_the_warnings_inside_an_amber_verdict_box():
    gate = "target accuracy on the non-member reference is 0.027, near chance (0.100): inputs are probably scaled"
    page = render(warnings=[gate]).html
    assert '<div class="verdict warned" id="verdict">' in page
    assert '<div class="verdict not_memorized"' not in page  # no green headline above the warning
    box = verdict_box(page)
    assert "Verdict: Not memorized (with caveats)" in box and "near chance (0.100)" in box
    assert "1 warning(s)" in box
    assert "What ema found, not yet evidence: the audit finds no sign that the model carries these records" in box
    assert "near chance (0.100)" in page.split('id="warnings"')[1]  # and still listed in its own section


def test_render_audit_report_shows_a_disagreement_between_methods_in_an_amber_verdict_box():
    results = {
        "ema": make_result(),
        "calibrated": make_result("calibrated", "inconclusive", metrics={"p_removed": 0.5}),
    }
    box = verdict_box(render(results=results, warnings=[]).html)
    assert box.startswith(" warned") and "The methods disagree" in box
    assert "ema says Not memorized; calibrated says Inconclusive" in box


def test_render_audit_report_escapes_what_it_is_given():
    page = render(lineage={"Model": "<script>alert(1)</script>"}, command="ema audit --query-file '<b>.npz'").html
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;" in page


def test_render_audit_report_refuses_no_results():
    with pytest.raises(InputError, match="at least one audit result"):
        render_audit_report({}, query="M6", lineage={}, command="ema audit")


def test_is_pvalue_names_the_paper_and_the_p_metrics():
    assert [is_pvalue(m) for m in ("rho_ema", "rho_ema_ks", "p_removed", "rho_ks", "power_retained")] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_render_audit_report_of_the_reference_auditor_shows_power_warnings_and_assumptions():
    from ema.auditors.reference import ReferenceAuditor

    rng = np.random.default_rng(3)

    def proba(n, confidence):
        labels = rng.integers(0, 10, n)
        top = np.clip(rng.normal(confidence, 0.05, n), 0.11, 0.999)
        out = np.repeat(((1 - top) / 9)[:, None], 10, axis=1)
        out[np.arange(n), labels] = top
        return out, labels

    auditor = ReferenceAuditor(n_permutations=199, n_power_resamples=100, random_state=0)
    auditor.calibrate(*proba(400, 0.95), *proba(400, 0.8))
    result = auditor.audit(*proba(60, 0.95))
    report = render(results={"reference": result})
    power = report.html.split('id="power"')[1].split("</section>")[0]
    assert "power_retained" in power and "min_detectable_fraction" in power
    assert "p_removed" in report.html.split('id="pvalues"')[1].split("</section>")[0]
    assert "exchangeable with the non-member reference" in report.html  # its assumptions
    assert list(report.figures) == ["reference_scores.svg", "attack_roc.svg"]  # its score's ROC on the references
    assert "reference: its score (member and non-member references)" in report.html.split('id="attack"')[1]
    certify = report.html.split('id="certify"')[1].split("</section>")[0]
    assert f"Certifiable margin: {number(result.metrics['certifiable_margin'])}" in certify
    assert "one-sided 95%" in certify and "probability 0.85" in certify
    assert f"How strong the evidence is</b> (reference): {result.thresholds['evidence']}" in certify
    # first after the verdict box, before every other section
    assert report.html.index('id="verdict"') < report.html.index('id="certify"') < report.html.index('id="pvalues"')
    assert "Threshold mode" not in report.html  # it has none; EMA's reports state theirs
    assert "Shifted queries (--augment shifts" in certify
    table = render(results={"reference": result}, query_kind="table").html
    assert "--augment shifts" not in table.split('id="certify"')[1].split("</section>")[0]  # images only
    shifted = dataclasses.replace(
        result,
        metrics={
            **result.metrics,
            "certifiable_margin_single_view": 0.76,
            "information_single_view": 10.4,
            "information_single_view_lower": 1.2,
        },
    )
    words = render(results={"reference": shifted}).html
    assert (
        f"from an information of at least {number(result.metrics['information_lower'])} (estimate "
        f"{number(result.metrics['information'])}); without them: 0.76, from at least 1.2 (estimate 10.4)."
    ) in words


def test_render_audit_report_says_an_information_that_was_not_estimable_is_not_estimable_not_zero():
    nan = float("nan")
    metrics = {"certifiable_margin": 1.0, "information": nan, "information_lower": nan, "retained_upper_bound": 1.0}
    result = make_result(method="reference", metrics=metrics, thresholds={"certify": {"margin_used": 0.1}})
    page = render(results={"reference": result}).html
    certify = page.split('id="certify"')[1].split("</section>")[0]
    assert "information, not estimable on these references (the margin assumed none), before the query" in certify
    assert "per sample; estimate" not in certify
    numbers = page.split('id="numbers"')[1].split("</section>")[0]
    assert re.search(r"<td>information</td><td class=num>not estimable</td>", numbers), numbers
    assert re.search(r"<td>information_lower</td><td class=num>not estimable</td>", numbers)
    shifted = dataclasses.replace(
        result,
        metrics={
            **metrics,
            "certifiable_margin_single_view": 1.0,
            "information_single_view": nan,
            "information_single_view_lower": nan,
        },
    )
    words = render(results={"reference": shifted}).html
    assert "from an information not estimable on these references (the margin assumed none); without them" in words


def test_render_audit_report_reads_kinds_and_meanings_from_the_vocabulary_it_is_given():
    from ema.auditors.metrics import CHECK, POWER, Metric

    vocabulary = {
        "p_shift": Metric("p_shift", CHECK, "a shift check"),
        "reach": Metric("reach", POWER, "how far this audit sees"),
    }
    metrics = {"p_shift": 0.01, "reach": 0.75, "rho_ema": 0.2}
    page = render(results={"ema": make_result(metrics=metrics)}, vocabulary=vocabulary).html
    pvalues = page.split('id="pvalues"')[1].split("</section>")[0]
    power = page.split('id="power"')[1].split("</section>")[0]
    assert "a shift check" in pvalues and "&lt;= 0.1" not in pvalues  # a check is not compared with alpha
    assert "&gt; 0.1" in pvalues  # rho_ema, a p-value by its name, is
    assert "reach" in power and "how far this audit sees" in power


def test_render_audit_report_without_a_vocabulary_lists_p_metrics_by_name_without_meanings():
    page = render(vocabulary=None).html
    pvalues = page.split('id="pvalues"')[1].split("</section>")[0]
    assert "rho_ema" in pvalues and "one-sample t-test" not in page


def _with_attack(result: AuditResult, n_nonmembers: int) -> AuditResult:
    """``result`` with attack strength recorded for its confidence signal, as EMA's thresholds carry it."""
    from ema.auditors.attack import attack_strength

    rng = np.random.default_rng(2)
    attack = attack_strength(rng.normal(1, 1, 500), rng.normal(0, 1, n_nonmembers)).to_dict()
    signals = {name: dict(entry) for name, entry in result.thresholds["signals"].items()}
    signals["confidence"]["attack"] = attack
    return dataclasses.replace(result, thresholds={**result.thresholds, "signals": signals})


def test_render_audit_report_draws_the_roc_curve_where_membership_is_known():
    report = render(results={"ema": _with_attack(make_result(), 2000)})
    assert list(report.figures) == ["ema_scores.svg", "attack_roc.svg"]
    roc = ElementTree.fromstring(report.figures["attack_roc.svg"])
    assert "ema: confidence (calibration model's halves)" in {text.text for text in roc.iter(f"{{{SVG_NS}}}text")}
    section = report.html.split('id="attack"')[1]
    assert "ema: confidence (calibration model&#x27;s halves)" in section and "figures/attack_roc.svg" in section
    assert "not resolved" not in section
    inline = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', report.html)
    assert report.figures["attack_roc.svg"] in [base64.b64decode(data) for data in inline]


def test_render_audit_report_says_when_the_0_1pct_point_is_not_resolved():
    page = render(results={"ema": _with_attack(make_result(), 300)}).html
    assert "(not resolved: 300 non-members)" in page


def test_render_audit_report_without_figures_draws_none_and_says_so_where_they_would_be():
    report = render(results={"ema": _with_attack(make_result(), 2000)}, draw_figures=False)
    assert report.figures == {}
    assert "<img" not in report.html and "data:image/" not in report.html
    for anchor in ("distributions", "attack"):
        section = report.html.split(f'id="{anchor}"')[1].split("</section>")[0]
        assert "Not drawn: this audit ran without figures" in section, anchor
    attack = report.html.split('id="attack"')[1].split("</section>")[0]
    assert "ema: confidence (calibration model&#x27;s halves)" in attack  # the numbers stay
    drawn = render(results={"ema": _with_attack(make_result(), 2000)})
    assert "Not drawn" not in drawn.html
    assert _verdict_box(report.html) == _verdict_box(drawn.html)


def _verdict_box(page: str) -> str:
    return page.split('id="verdict"')[1].split("</section>")[0]


def test_render_audit_report_without_attack_strength_says_so_and_draws_no_roc():
    report = render()
    assert "attack_roc.svg" not in report.figures and "No attack strength was recorded" in report.html


def test_display_scale_spreads_scores_crowded_at_one_and_zero():
    from ema.reports.figures import display_scale

    fitted = {"query": np.array([0.999, 0.9999, 0.99999, 1.0])}
    spread, label = display_scale("confidence", fitted)
    assert label == "logit(confidence)" and np.all(np.diff(spread(fitted["query"])) > 2)
    spread, label = display_scale("negative_entropy", {"query": -np.array([1e-2, 1e-4, 1e-6])})
    assert label == "-log10(-negative_entropy)" and np.allclose(spread(-np.array([1e-2, 1e-4])), [2, 4])
    spread, label = display_scale("correctness", {"query": np.array([0.0, 1.0, 1.0])})
    assert label == "correctness" and np.array_equal(spread(np.array([0.0, 1.0])), [0.0, 1.0])
