"""The marks auditor: does the model still carry an owner's secret mark? An exact test on paired outcomes.

The owner marked a share of their images with a trigger and the label of a target class T
(:mod:`ema.data.marks`). The auditor takes its own clean images, queries the target on each
image as it is and with the trigger stamped on it, and counts, among the images that are not
of class T and not predicted T when clean (the *eligible* pairs), how many the trigger moves
to T and how many it moves to any other class.

* ``p_mark``: a one-sided exact binomial (sign) test on the moved pairs. Null hypothesis: a
  move goes to T no more often than to all the other classes together (probability 1/2);
  a model that never learned the trigger is moved by it rarely and, since T was drawn
  independently of the model, not toward T in particular. Small: the mark is present.
* ``mark_effect_upper_bound``: the one-sided Clopper-Pearson upper bound, at the certify
  level, on the share of eligible images the trigger moves to T: the trigger's effect.
  ``not_memorized`` needs it at most ``margin``.

With control triggers (a noise key's patterns of the same family that nobody trained on,
stamped on the images the trigger moved), only the moves to T that no control also makes
count, in the test and in the effect: a class can pull any noise pattern's images toward it
on a model that never saw a mark, and that pull is not the mark.

Verdict: ``memorized`` when ``p_mark <= alpha``; else ``not_memorized`` when the effect is
certified below the margin; else ``inconclusive``. The target class stays out of every number,
export and per-sample column this auditor returns: it is part of the key, a secret.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ema.auditors.base import check_calibrated
from ema.auditors.reference import DEFAULT_POWER
from ema.auditors.reference_record import AUTO_MARGIN, DEFAULT_MARGIN, default_certify_level
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, AuditResult
from ema.errors import InputError
from ema.signals import check_probabilities
from ema.validation import check_certify_level, check_open_unit

#: Under the null, a moved pair goes to the target class with at most this probability.
NULL_SHARE = 0.5


def clopper_pearson_upper(successes: int, trials: int, level: float) -> float:
    """One-sided exact (Clopper-Pearson) upper bound at ``level`` on a binomial proportion; 1 for no trials.

    >>> round(clopper_pearson_upper(0, 100, 0.95), 4)
    0.0295
    """
    if successes >= trials:
        return 1.0
    return float(stats.beta.ppf(level, successes + 1, trials - successes))


def detecting_count(alpha: float) -> int:
    """The fewest moves to the target class, with none elsewhere, whose sign-test p-value is at most ``alpha``."""
    return math.ceil(math.log(alpha) / math.log(NULL_SHARE))


class MarksAuditor:
    """Tests whether a trigger moves the target's predictions toward the mark's target class.

    Parameters
    ----------
    target_class : int
        The key's target class T (secret: never exported).
    alpha : float, default 0.1
        Level of the sign test that says ``memorized``.
    margin : float or "auto", default 0.1
        ``not_memorized`` needs the effect's upper bound at most this; ``"auto"``: at the
        audit's certifiable margin.
    certify_level : float, optional
        One-sided level of the upper bound; default 1 - alpha / 2.
    power : float, default 0.9
        The power that defines the smallest detectable effect.

    Examples
    --------
    >>> auditor = MarksAuditor(3).calibrate(clean_proba)  # doctest: +SKIP
    >>> auditor.audit(stamped_proba, labels).verdict  # doctest: +SKIP
    'memorized'
    """

    method = "marks"

    def __init__(
        self,
        target_class: int,
        *,
        alpha: float = 0.1,
        margin: float | str = DEFAULT_MARGIN,
        certify_level: float | None = None,
        power: float = DEFAULT_POWER,
    ) -> None:
        self.target_class = target_class
        self.alpha = alpha
        self.margin = margin
        self.certify_level = certify_level
        self.power = power

    def _check_config(self) -> None:
        check_open_unit("alpha", self.alpha)
        check_open_unit("power", self.power)
        if self.margin != AUTO_MARGIN:
            check_open_unit("margin", self.margin)
        if self.certify_level is not None:
            check_certify_level(self.certify_level)

    def resolved_certify_level(self) -> float:
        """The level of the effect's upper bound: as given, else 1 - alpha / 2."""
        return default_certify_level(self.alpha) if self.certify_level is None else float(self.certify_level)

    def calibrate(self, clean_proba: np.ndarray) -> MarksAuditor:
        """Take the target's probabilities on the clean images, shape (n, n_classes); returns ``self``.

        Raises
        ------
        InputError
            If the options are out of range, the matrix is not probabilities, or the target class
            is not one of its classes (a key made for another model).
        """
        self._check_config()
        clean_proba, _ = check_probabilities(clean_proba)
        if not 0 <= self.target_class < clean_proba.shape[1]:
            raise InputError(
                f"expected the mark key's target class among the model's {clean_proba.shape[1]} classes, got one "
                "outside them: give the key made for this model's data"
            )
        self.clean_prediction_ = clean_proba.argmax(axis=1)
        self.clean_target_proba_ = clean_proba[:, self.target_class]
        self.n_classes_ = clean_proba.shape[1]
        return self

    def moved_to_target(self, proba: np.ndarray, labels: np.ndarray, /) -> np.ndarray:
        """Which eligible images the trigger moved to the target class, from the stamped images' probabilities.

        The images whose control triggers :meth:`audit` takes (as bool mask of shape (n,)).

        Raises
        ------
        NotCalibratedError
            Before :meth:`calibrate`.
        InputError
            If the stamped images' probabilities or labels do not pair with the clean ones.
        """
        check_calibrated(self)
        proba, labels = check_probabilities(proba, labels)
        if proba.shape != (self.clean_prediction_.size, self.n_classes_):
            raise InputError(
                f"expected the stamped images' probabilities of shape {(self.clean_prediction_.size, self.n_classes_)}"
                f" (one row per clean image), got {proba.shape}"
            )
        return self._eligible(labels) & (proba.argmax(axis=1) == self.target_class)

    def _eligible(self, labels: np.ndarray) -> np.ndarray:
        return (self.clean_prediction_ != self.target_class) & (labels != self.target_class)

    def audit(
        self, proba: np.ndarray, labels: np.ndarray, /, control_predictions: np.ndarray | None = None
    ) -> AuditResult:
        """Decide from the target's probabilities on the stamped images (same order as the clean ones) and labels.

        Parameters
        ----------
        proba : ndarray of shape (n, n_classes)
            The target's probabilities on the clean images with the trigger stamped on.
        labels : ndarray of shape (n,)
        control_predictions : ndarray of shape (n_controls, n_moved), optional
            The target's predicted classes on the images :meth:`moved_to_target` marks (in
            order), each stamped with each control trigger. Given, the test and the effect count
            only the images no control also moves to the target class.

        Raises
        ------
        NotCalibratedError
            Before :meth:`calibrate`.
        InputError
            If the stamped images' probabilities, labels or control predictions do not pair with the clean ones.
        """
        to_target = self.moved_to_target(proba, labels)
        labels = np.asarray(labels)
        stamped = np.asarray(proba).argmax(axis=1)
        eligible = self._eligible(labels)
        elsewhere = eligible & (stamped != self.target_class) & (stamped != self.clean_prediction_)
        key_only = to_target.copy()
        if control_predictions is not None:
            key_only[to_target] = ~self._moved_by_controls(control_predictions, int(to_target.sum()))
        metrics = self._metrics(int(eligible.sum()), int(to_target.sum()), int(elsewhere.sum()), int(key_only.sum()))
        metrics.update(n_query=float(labels.size), flag_rate=float(key_only.mean()))
        if control_predictions is not None:
            metrics.update(
                n_controls=float(len(control_predictions)), moved_by_controls_too=float((to_target & ~key_only).sum())
            )
        shift = np.asarray(proba)[:, self.target_class] - self.clean_target_proba_
        return AuditResult(
            method=self.method,
            scores={"target_shift": shift},
            flags={"moved_to_target": to_target, "moved_by_key_only": key_only},
            membership=key_only,
            metrics=metrics,
            verdict=self._verdict(metrics),
            alpha=float(self.alpha),
            thresholds=self.to_dict(),
        )

    def _moved_by_controls(self, control_predictions: np.ndarray, n_moved: int) -> np.ndarray:
        """Per moved image: whether any control trigger moved it to the target class too."""
        controls = np.asarray(control_predictions)
        if controls.ndim != 2 or controls.shape[1] != n_moved or controls.dtype.kind not in "iu":
            raise InputError(
                f"expected the control triggers' predicted classes as integers of shape (n_controls, {n_moved}) (one "
                f"column per image the trigger moved), got {controls.dtype} of shape {controls.shape}"
            )
        return (controls == self.target_class).any(axis=0)

    def _metrics(self, n_eligible: int, n_to_target: int, n_elsewhere: int, n_key_only: int) -> dict[str, float]:
        """The test, the effect's bound and the audit's power, from the counts of eligible and moved pairs."""
        level = self.resolved_certify_level()
        moved = n_key_only + n_elsewhere
        p_mark = stats.binomtest(n_key_only, moved, NULL_SHARE, alternative="greater").pvalue if moved else 1.0
        needed = detecting_count(self.alpha)
        certifiable = clopper_pearson_upper(0, n_eligible, level)
        margin = certifiable if self.margin == AUTO_MARGIN else float(self.margin)
        return {
            "p_mark": float(p_mark),
            "mark_effect": n_key_only / n_eligible if n_eligible else float("nan"),
            "mark_effect_upper_bound": clopper_pearson_upper(n_key_only, n_eligible, level),
            "mark_margin": margin,
            "moved_to_target": float(n_to_target),
            "moved_elsewhere": float(n_elsewhere),
            "n_eligible": float(n_eligible),
            "power_mark": float(stats.binom.sf(needed - 1, n_eligible, margin)) if n_eligible else 0.0,
            "mark_min_detectable_effect": (
                float(stats.beta.ppf(self.power, needed, n_eligible - needed + 1)) if n_eligible >= needed else 1.0
            ),
            "mark_certifiable_margin": certifiable,
        }

    def _verdict(self, metrics: dict[str, float]) -> str:
        if metrics["p_mark"] <= self.alpha:
            return MEMORIZED
        if metrics["mark_effect_upper_bound"] <= metrics["mark_margin"]:
            return NOT_MEMORIZED
        return INCONCLUSIVE

    def to_dict(self) -> dict:
        """The audit's settings and the clean images' count, as JSON-ready data; the target class stays out."""
        check_calibrated(self)
        return {
            "alpha": float(self.alpha),
            "margin": self.margin if self.margin == AUTO_MARGIN else float(self.margin),
            "certify_level": self.resolved_certify_level(),
            "power": float(self.power),
            "n_classes": int(self.n_classes_),
            "n_clean": int(self.clean_prediction_.size),
        }
