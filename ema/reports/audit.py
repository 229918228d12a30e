"""One audit's ``report.html``: the verdict in words, its numbers, pictures, caveats, lineage and command.

Reads :class:`~ema.auditors.result.AuditResult` values as the auditors returned them, the
metric vocabulary of the method table (what each number is and means, as
:class:`~ema.auditors.metrics.Metric` values) and the plain strings the workflow knows (lineage,
the reproducing command); computes nothing but shares and formatting.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ema.auditors.attack import AttackStrength
from ema.auditors.metrics import POWER, PVALUE, PVALUE_KINDS, Metric, metric_kind, undefined_text
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, AuditResult
from ema.errors import InputError
from ema.reports import svg
from ema.reports.attack import attack_curves, attack_section, roc_figure
from ema.reports.certification import certification_section
from ema.reports.figures import score_distributions
from ema.reports.page import (
    UNSAFE,
    bullet_list,
    esc,
    image,
    key_value_table,
    number,
    page,
    section,
    table,
)

#: The verdict in plain words: a heading and one sentence a reader without statistics can file.
VERDICT_WORDS = {
    MEMORIZED: ("Memorized", "The model still carries these records: the audit finds that they shaped its training."),
    NOT_MEMORIZED: (
        "Not memorized",
        "The audit finds no sign that the model carries these records, as expected if they were removed.",
    ),
    INCONCLUSIVE: (
        "Inconclusive",
        "The evidence decides neither way: the records may be partly retained, or the query set is too small to tell.",
    ),
}
#: What introduces the reproducing command, unless a note says why it cannot rerun the audit as it is.
EXACT_COMMAND = "The exact command (run where the same tracking store is configured):"
#: Where a figure would be, in an audit run without figures (``ema audit --no-figures``).
NOT_DRAWN = (
    '<p class="muted">Not drawn: this audit ran without figures (<code>ema audit --no-figures</code>, or the '
    "evaluator's <code>figures=False</code>).</p>"
)


@dataclass(frozen=True)
class AuditReport:
    """A rendered report.

    Attributes
    ----------
    html : str
        The standalone page, figures inline.
    figures : dict of str to bytes
        The same figures as SVG files: file name -> bytes.
    """

    html: str
    figures: dict[str, bytes] = field(default_factory=dict)


def render_audit_report(
    results: Mapping[str, AuditResult],
    *,
    query: str,
    lineage: Mapping[str, object],
    command: str,
    command_note: str | None = None,
    references: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    warnings: Sequence[str] | None = None,
    title: str | None = None,
    vocabulary: Mapping[str, Metric] | None = None,
    draw_figures: bool = True,
    query_kind: str | None = None,
) -> AuditReport:
    """Render one audit's page and figures.

    Parameters
    ----------
    results : mapping of str to AuditResult
        Method -> result, the method whose verdict is the run's first.
    query : str
        The query set's name, as the run records it.
    lineage : mapping of str to object
        Label -> value (model, version, training run, fingerprints, calibration version...);
        None or empty values are left out.
    command : str
        The shell command that reproduces the audit.
    command_note : str, optional
        Said in its place before the command where the command cannot rerun the audit as it is (its query file
        was temporary); by default the command is introduced as the exact one.
    references : mapping of str to mapping of str to ndarray, optional
        Reference label (e.g. ``members``, ``non-members``) -> score name -> the reference
        samples' scores, drawn beside the query's where the names match.
    warnings : sequence of str, optional
        Every warning of the audit; by default the results' own (``thresholds["warnings"]``).
    title : str, optional
    vocabulary : mapping of str to Metric, optional
        Metric key -> what it is (:func:`ema.workflows.methods.metric_vocabulary`): which numbers
        are p-values compared with alpha, checks or power, and what each means. A metric not in
        it is a p-value when named ``p_*``, else listed under its own name.
    draw_figures : bool, default True
        False: no figure is drawn; the page says so where they would be.
    query_kind : {"image", "table"}, optional
        What the query holds: a table's page suggests no shifted queries, which apply to images only.

    Returns
    -------
    AuditReport

    Raises
    ------
    InputError
        If ``results`` is empty.
    """
    if not results:
        raise InputError("expected at least one audit result to report, got none")
    curves = attack_curves(results)
    figures = _figures(results, curves, query, references) if draw_figures else {}
    vocabulary = vocabulary or {}
    warned = _warning_items(results, warnings)
    body = "".join(
        (
            _verdict_section(results, warned),
            certification_section(results, query_kind),
            section("p-values", _pvalues(results, vocabulary), anchor="pvalues"),
            section("Power", _power(results, vocabulary), anchor="power"),
            section("All numbers", _numbers(results, vocabulary), anchor="numbers"),
            section(
                "Score distributions",
                _distributions(results, figures, query, references) if draw_figures else NOT_DRAWN,
                anchor="distributions",
            ),
            section(
                "Attack strength",
                attack_section(curves, figures) + ("" if draw_figures or not curves else NOT_DRAWN),
                anchor="attack",
            ),
            section("Thresholds and flag rate", _thresholds(results), anchor="thresholds"),
            section("Warnings", _warnings(warned), anchor="warnings"),
            section("Assumptions", _assumptions(results), anchor="assumptions"),
            section("Lineage", key_value_table(_present(lineage)), anchor="lineage"),
            section(
                "Reproduce",
                f"<p>{esc(command_note or EXACT_COMMAND)}</p><pre><code>{esc(command)}</code></pre>",
                anchor="reproduce",
            ),
        )
    )
    return AuditReport(page(title or f"Audit of {query}", body), figures)


def _present(items: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in items.items() if v is not None and v != ""}


def _alpha_words(result: AuditResult) -> str:
    if math.isfinite(result.alpha):
        return f"at significance level alpha = {result.alpha:g}"
    return "by the method's own threshold (it has no significance level)"


def _verdict_section(results: Mapping[str, AuditResult], warnings: Sequence[str]) -> str:
    """The headline: the run's verdict, amber with the warnings inside when a gate fired or the methods disagree."""
    method, primary = next(iter(results.items()))
    heading, sentence = VERDICT_WORDS.get(primary.verdict, (primary.verdict, ""))
    others = [f"{m}: {VERDICT_WORDS.get(r.verdict, (r.verdict,))[0]}" for m, r in list(results.items())[1:]]
    disagree = len({r.verdict for r in results.values()}) > 1
    css = primary.verdict if primary.verdict in VERDICT_WORDS else "unknown"
    caveats = []
    if warnings:
        caveats.append(
            f"<p><b>Not to be relied on as it stands: {len(warnings)} warning(s)</b> say the audit cannot be trusted "
            "until they are resolved.</p>" + _warnings(warnings)
        )
    if disagree:
        said = "; ".join(f"{m} says {VERDICT_WORDS.get(r.verdict, (r.verdict,))[0]}" for m, r in results.items())
        caveats.append(f'<p class="disagreement"><b>The methods disagree</b>: {esc(said)}.</p>')
    elif others:
        caveats.append(f"<p>Other methods in this run: {esc('; '.join(others))}.</p>")
    if warnings or disagree:
        css, heading = "warned", f"{heading} (with caveats)"
        sentence = f"What {method} found, not yet evidence: {sentence[:1].lower()}{sentence[1:]}"
    return (
        f'<div class="verdict {esc(css)}" id="verdict"><div class="word">Verdict: {esc(heading)}</div>'
        f"<p>{esc(sentence)}</p><p>Decided by method <b>{esc(method)}</b> {esc(_alpha_words(primary))} on "
        f"{primary.n_query} query samples (verdict tag: <code>{esc(primary.verdict)}</code>).</p>"
        f"{''.join(caveats)}</div>"
    )


def _meaning(name: str, vocabulary: Mapping[str, Metric]) -> str:
    return vocabulary[name].meaning if name in vocabulary else ""


def _pvalues(results: Mapping[str, AuditResult], vocabulary: Mapping[str, Metric]) -> str:
    rows = [
        (
            method,
            name,
            number(value),
            _versus_alpha(value, result.alpha) if metric_kind(name, vocabulary) == PVALUE else "",
            _meaning(name, vocabulary),
        )
        for method, result in results.items()
        for name, value in result.metrics.items()
        if metric_kind(name, vocabulary) in PVALUE_KINDS
    ]
    if not rows:
        return '<p class="muted">This method reports no p-value; its verdict compares a statistic with a threshold.</p>'
    return table(("method", "p-value", "value", "compared with alpha", "meaning"), rows, numeric=(2,))


def _versus_alpha(value: float, alpha: float) -> str:
    if not (math.isfinite(value) and math.isfinite(alpha)):
        return ""
    return f"<= {alpha:g}" if value <= alpha else f"> {alpha:g}"


def _power(results: Mapping[str, AuditResult], vocabulary: Mapping[str, Metric]) -> str:
    rows = [
        (method, name, number(value, undefined_text(name, vocabulary)), _meaning(name, vocabulary))
        for method, result in results.items()
        for name, value in result.metrics.items()
        if metric_kind(name, vocabulary) == POWER
    ]
    if not rows:
        return '<p class="muted">Not reported by this audit\'s method (no power, no minimum detectable fraction).</p>'
    return table(("method", "metric", "value", "meaning"), rows, numeric=(2,))


def _numbers(results: Mapping[str, AuditResult], vocabulary: Mapping[str, Metric]) -> str:
    rows = [
        (method, name, number(value, undefined_text(name, vocabulary)), _meaning(name, vocabulary))
        for method, result in results.items()
        for name, value in result.metrics.items()
    ]
    return table(("method", "metric", "value", "meaning"), rows, numeric=(2,))


def _single_threshold(result: AuditResult, signal: str) -> float | None:
    """The one cut-off a signal was flagged against, when there is one (not per class)."""
    entry = result.thresholds.get("signals", {}).get(signal)
    if isinstance(entry, dict) and result.thresholds.get("mode", "global") == "global":
        value = entry.get("global")
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _score_figure(
    method: str, result: AuditResult, query: str, references: Mapping[str, Mapping[str, np.ndarray]] | None
) -> bytes:
    distributions = {f"query {query}": result.scores}
    for label, scores in (references or {}).items():
        shared = {name: values for name, values in scores.items() if name in result.scores}
        if shared:
            distributions[label] = shared
    return score_distributions(
        distributions,
        thresholds={signal: _single_threshold(result, signal) for signal in result.scores},
        title=f"{method}: membership scores of {query}",
    )


def _distributions(
    results: Mapping[str, AuditResult],
    figures: Mapping[str, bytes],
    query: str,
    references: Mapping[str, Mapping[str, np.ndarray]] | None,
) -> str:
    beside = (
        f"beside the references ({', '.join(references)})"
        if references
        else "(no member or non-member reference scores were given to this report)"
    )
    parts = [
        f"<p>Histograms (left) and ECDFs (right) of each score on the query set {esc(beside)}; "
        "a dashed vertical line marks a single threshold.</p>"
    ]
    for method in results:
        name = _figure_name(method)
        if name in figures:
            parts.append(
                image(
                    figures[name],
                    alt=f"{method} score distributions of {query}",
                    caption=f"{method}: figures/{name}",
                    mime=svg.MIME,
                )
            )
        else:
            parts.append(
                f'<p class="muted">{esc(method)}: the query\'s per-sample scores stayed where they were computed '
                "(an audit on Spark keeps them in its membership table), so they are not drawn.</p>"
            )
    return "".join(parts)


def _figures(
    results: Mapping[str, AuditResult],
    curves: Mapping[str, AttackStrength],
    query: str,
    references: Mapping[str, Mapping[str, np.ndarray]] | None,
) -> dict[str, bytes]:
    """Each method's score figure (where its query scores are here) and the ROC figure, by file name."""
    figures = {
        _figure_name(method): _score_figure(method, result, query, references)
        for method, result in results.items()
        if result.scores
    }
    return figures | roc_figure(curves, query)


def _figure_name(method: str) -> str:
    """The file name of a method's score figure, under ``figures/``."""
    return f"{UNSAFE.sub('-', method)}_scores.svg"


def _thresholds(results: Mapping[str, AuditResult]) -> str:
    parts = []
    for method, result in results.items():
        rows = []
        signals = result.thresholds.get("signals", {})
        flags = result.flags or {f"flag_{signal}": np.zeros(0) for signal in signals}  # counted elsewhere (Spark)
        for name, flagged in flags.items():
            signal = name.removeprefix("flag_")
            entry = signals.get(signal, {})
            rows.append(
                (name, _threshold_text(result, signal, entry), number(np.mean(flagged)) if flagged.size else "")
            )
        mode = result.thresholds.get("mode", "")
        parts.append(
            f"<h3>{esc(method)}</h3><p>{f'Threshold mode: {esc(mode)}; ' if mode else ''}flag rate (share of M = 1): "
            f"<b>{esc(number(result.flag_rate))}</b> ({round(result.flag_rate * result.n_query)} of {result.n_query} "
            "samples).</p>"
            + table(("flag", "threshold", "flag rate"), rows, numeric=(2,))
            + "<details><summary>All thresholds, as logged in calibration.json</summary>"
            f"<pre>{esc(json.dumps(result.thresholds, indent=1, sort_keys=True, default=str))}</pre></details>"
        )
    return "".join(parts)


def _threshold_text(result: AuditResult, signal: str, entry: object) -> str:
    single = _single_threshold(result, signal)
    if single is not None:
        return number(single)
    if isinstance(entry, dict):
        for key in ("per_class", "cutoffs"):
            if key in entry:
                return f"{key}: {_short(entry[key])}"
    if "threshold" in result.thresholds:
        return f"rule threshold {result.thresholds['threshold']}"
    return ""


def _short(values: object, limit: int = 12) -> str:
    flat = np.asarray(values, dtype=float).ravel()
    text = ", ".join(number(v) for v in flat[:limit])
    return f"[{text}{', ...' if flat.size > limit else ''}]"


def _warning_items(results: Mapping[str, AuditResult], given: Sequence[str] | None) -> list[str]:
    """Every warning of the audit: as given, else the results' own (prefixed by method when there are several)."""
    if given is not None:
        return list(given)
    several = len(results) > 1
    return [
        f"{method}: {warning}" if several else str(warning)
        for method, result in results.items()
        for warning in result.thresholds.get("warnings", []) or []
    ]


def _warnings(items: Sequence[str]) -> str:
    if not items:
        return '<p class="muted">None.</p>'
    return "".join(f'<div class="warning">{esc(item)}</div>' for item in items)


def _assumptions(results: Mapping[str, AuditResult]) -> str:
    parts = []
    for method, result in results.items():
        stated = result.thresholds.get("assumptions")
        if not stated:
            continue
        heading = f"<h3>{esc(method)}</h3>" if len(results) > 1 else ""
        if isinstance(stated, Mapping):
            parts.append(heading + table(("number", "relies on"), stated.items()))
        elif isinstance(stated, (list, tuple)):
            parts.append(heading + bullet_list(stated))
        else:
            parts.append(f"{heading}<p>{esc(stated)}</p>")
    if not parts:
        return '<p class="muted">This method states no assumptions beyond the paper\'s setting.</p>'
    return "".join(parts)
