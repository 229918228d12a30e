"""``ema history``'s verdict column: the run's verdict, then each other method's, in the plan's order."""

from __future__ import annotations

from ema.tracking import keys
from ema.tracking.history import verdicts_text


def tags(methods: str | None, **verdicts: str) -> dict[str, str]:
    found = {f"{keys.TAG_VERDICT}.{name.replace('_', '-')}": verdict for name, verdict in verdicts.items()}
    first = next(iter(verdicts.values()))
    return {keys.TAG_VERDICT: first, **found, **({keys.TAG_METHODS: methods} if methods else {})}


def test_both_shows_the_ks_ratio_verdict_beside_emas():
    both = tags("ema,ks-ratio", ema="memorized", ks_ratio="not_memorized")
    assert verdicts_text(both, "both") == "memorized (ks-ratio not_memorized)"


def test_a_combination_lists_its_other_methods_and_a_single_method_none():
    combined = tags("ema,calibrated", ema="memorized", calibrated="inconclusive")
    assert verdicts_text(combined, "ema+calibrated") == "memorized (calibrated inconclusive)"
    assert verdicts_text(tags("calibrated", calibrated="inconclusive"), "calibrated") == "inconclusive"


def test_a_run_logged_before_the_methods_tag_is_read_from_its_method_name():
    old = tags(None, ema="memorized", calibrated="inconclusive")
    assert verdicts_text(old, "ema+calibrated") == "memorized (calibrated inconclusive)"
