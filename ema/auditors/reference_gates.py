"""Gates on a target and its references: warnings that no verdict can be trusted as things stand.

They come from the target's accuracy on both references and from how well its scores separate
members from non-members; the member-reference auditor carries them on every audit, and the
audit workflow applies them to every method (:mod:`ema.workflows.audit_gates`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from ema.thresholds import select_threshold

#: Reference accuracy at most chance (the commonest class's share, at least 1 / n_classes) plus this is "near chance".
CHANCE_MARGIN = 0.1
#: An accuracy below another (the recorded held-out one, or the reference's for the query) by more than this is
#: "far below". Not the members' accuracy: a gap between members and non-members is what memorization is.
ACCURACY_GAP_LIMIT = 0.2
#: Balanced accuracy and AUC of members against non-members below this are "weak separation".
MIN_SEPARATION = 0.55
#: Share of non-members flagged at or above this makes flags useless.
NONMEMBER_FLAG_LIMIT = 0.95
#: What a target's accuracy far below its own on data like its training data most likely means.
INPUT_MISMATCH_HINT = (
    "inputs probably reach the model unlike training (images: try --input-scale or --normalize, and for a model that "
    "takes colour images flattened, --pixel-order hwc), or the labels are "
    "not the model's classes in the order of its outputs (output i is class i; a model fitted on text labels "
    "orders them alphabetically)"
)


def chance_accuracy(labels: np.ndarray, n_classes: int | None = None) -> float:
    """The accuracy of always answering the commonest class of ``labels`` (at least 1 / ``n_classes``).

    On imbalanced data a model that predicts one class only is right this often: a uniform
    1 / n_classes would call it better than chance.
    """
    commonest = float(np.bincount(np.asarray(labels, dtype=np.int64)).max() / len(labels)) if len(labels) else 0.0
    return max(commonest, 1.0 / n_classes if n_classes else 0.0)


def reference_gate_warnings(
    n_classes: int,
    reference_labels: np.ndarray,
    *,
    reference_accuracy: float,
    balanced_accuracy: float | None = None,
    auc: float | None = None,
    nonmember_flag_rate: float | None = None,
    separation_of: str | None = None,
) -> list[str]:
    """Warnings that no verdict on this target and reference can be trusted as it stands (for every method).

    Parameters
    ----------
    n_classes : int
        Classes of the target.
    reference_labels : ndarray of shape (n,)
        The non-member reference's labels: chance is answering their commonest class.
    reference_accuracy : float
        The target's accuracy on the non-member reference.
    balanced_accuracy, auc : float, optional
        How well the score separates members from non-members; the warning needs both below
        :data:`MIN_SEPARATION` (either one given alone suffices).
    nonmember_flag_rate : float, optional
        Share of non-members a method flags as members (EMA's flags, or this auditor's).
    separation_of : str, optional
        Whose separation ``balanced_accuracy`` and ``auc`` measure, named in the warning where two
        methods of one audit measure it apart (EMA's signals on its calibration halves).

    Returns
    -------
    list of str
        Empty when nothing is wrong.
    """
    warnings: list[str] = []
    chance = chance_accuracy(reference_labels, n_classes)
    if reference_accuracy <= chance + CHANCE_MARGIN:
        where = "below" if reference_accuracy < chance - CHANCE_MARGIN else "near"
        warnings.append(
            f"target accuracy on the non-member reference is {reference_accuracy:.3f}, {where} chance ({chance:.3f}, "
            f"always answering its commonest class): {INPUT_MISMATCH_HINT}"
        )
    # rounded: a balanced accuracy of 11/20 computes as 0.5499999999999999, which would read "0.550 < 0.55"
    separations = [round(s, 9) for s in (balanced_accuracy, auc) if s is not None]
    if separations and max(separations) < MIN_SEPARATION:
        shown = ", ".join(
            f"{name} {value:.3f}" for name, value in (("balanced accuracy", balanced_accuracy), ("AUC", auc)) if value
        )
        shown = f"{separation_of}: {shown}" if separation_of else shown
        warnings.append(
            f"members and non-members barely separate on the target ({shown} < {MIN_SEPARATION}): only large query "
            "sets can be told apart; see power_retained and min_detectable_fraction"
        )
    if nonmember_flag_rate is not None and nonmember_flag_rate >= NONMEMBER_FLAG_LIMIT:
        warnings.append(
            f"non-members are flagged at a rate of {nonmember_flag_rate:.3f} >= {NONMEMBER_FLAG_LIMIT}: the flags "
            "cannot tell members from non-members, so EMA's verdict, either way, is no evidence of membership"
        )
    return warnings


def reference_diagnostics(
    members: np.ndarray,
    nonmembers: np.ndarray,
    member_identity: np.ndarray,
    member_labels: np.ndarray,
    nonmember_identity: np.ndarray,
    nonmember_labels: np.ndarray,
    weights: np.ndarray,
    nonmember_counts: np.ndarray,
) -> dict[str, float]:
    """What the gates read (:func:`reference_gate_warnings`' keyword arguments, less ``n_classes``).

    The target's accuracy on both references (from the identity views' probabilities), the
    scores' AUC and best balanced accuracy (members against non-members), and the share of
    non-members in bins of a positive ``weights`` (the binned log-likelihood ratio).
    """
    u_statistic = stats.mannwhitneyu(members, nonmembers).statistic
    return {
        "member_accuracy": float((member_identity.argmax(axis=1) == member_labels).mean()),
        "reference_accuracy": float((nonmember_identity.argmax(axis=1) == nonmember_labels).mean()),
        "auc": float(u_statistic / (members.size * nonmembers.size)),
        "balanced_accuracy": float(select_threshold(members, nonmembers).balanced_accuracy),
        "nonmember_flag_rate": float(nonmember_counts[weights > 0].sum() / nonmembers.size),
    }


#: The one-sided binomial p-value under which a query's accuracy is too low for non-members (with the accuracy gap).
QUERY_GATE_P = 0.001


def query_accuracy_warning(correct: int, n_query: int, reference_accuracy: float) -> str | None:
    """A warning when the target classifies the query far worse than the non-member reference; else None.

    Members score at least as well as non-members and a removed set as well as them, so a query
    far below both (by more than :data:`ACCURACY_GAP_LIMIT`, and with a one-sided binomial
    p-value under :data:`QUERY_GATE_P` against the reference's accuracy) reaches the model unlike
    the references: pixels saved in another range, other preprocessing, or another domain. Every
    method then reads it as unlike members, and would call the model's own training data removed.
    """
    accuracy = correct / n_query
    if reference_accuracy - accuracy <= ACCURACY_GAP_LIMIT:
        return None
    if stats.binomtest(correct, n_query, reference_accuracy, alternative="less").pvalue >= QUERY_GATE_P:
        return None
    return (
        f"target accuracy on the query ({accuracy:.3f}) is far below its accuracy on the non-member reference "
        f"({reference_accuracy:.3f}): the query reaches the model unlike the references (pixels saved in another "
        "range, other preprocessing, or another domain), so the verdicts compare it with data it does not resemble; "
        "if it should be the model's own data, check how the query file was made"
    )


#: The accuracy another reading of the outputs as classes must add before the audit says the labels are out of order.
LABEL_ORDER_GAIN = 0.2
#: An accuracy gain at which the inputs are surely wrong (labels in another order, another scaling): with
#: :data:`DECISIVE_P`, the audit withholds its verdicts (:mod:`ema.workflows.audit_gates`).
DECISIVE_GAIN = 0.2
#: The one-sided p-value of the paired sign test under which such a gain is no accident of a small reference.
DECISIVE_P = 0.001


@dataclass(frozen=True)
class InputMismatch:
    """A warning that the inputs reach the model better read another way, the accuracy that reading adds on the
    reference, and the one-sided p-value of that gain (a sign test on the samples only one reading gets right)."""

    warning: str
    gain: float
    pvalue: float

    @property
    def decisive(self) -> bool:
        """A gain of :data:`DECISIVE_GAIN` or more, no accident (p at most :data:`DECISIVE_P`): surely wrong inputs."""
        return self.gain >= DECISIVE_GAIN and self.pvalue <= DECISIVE_P


def input_mismatch(warning: str, better: np.ndarray, given: np.ndarray) -> InputMismatch:
    """The mismatch ``warning`` reports, from which samples the better reading and the given one get right.

    The gain is tested on the samples only one of them gets right (McNemar's exact test): on a
    three-image reference one sample more is a gain of 0.33, and no evidence.
    """
    won, lost = int(np.sum(better & ~given)), int(np.sum(~better & given))
    pvalue = stats.binomtest(won, won + lost, 0.5, alternative="greater").pvalue if won + lost else 1.0
    return InputMismatch(warning, float(better.mean() - given.mean()), float(pvalue))


def label_order_warning(proba: np.ndarray, labels: np.ndarray) -> InputMismatch | None:
    """A warning when the target's outputs match ``labels`` far better read as the classes in another order; else None.

    A model fitted on text labels orders its outputs alphabetically, which need not be the
    order of the files' whole-number labels; every verdict on it is then about a model that
    looks wrong on every sample. The best order is the assignment of outputs to classes with
    the most agreements on the reference (the Hungarian method).
    """
    n_classes = proba.shape[1]
    if labels.max(initial=0) >= n_classes:
        return None
    from scipy.optimize import linear_sum_assignment

    predicted = proba.argmax(axis=1)
    agreements = np.bincount(labels * n_classes + predicted, minlength=n_classes**2)
    agreements = agreements.reshape(n_classes, n_classes)  # row: the label, column: the output
    classes, outputs = linear_sum_assignment(agreements, maximize=True)
    best, given = agreements[classes, outputs].sum() / labels.size, np.trace(agreements) / labels.size
    if best - given < LABEL_ORDER_GAIN:
        return None
    moved = ", ".join(f"output {o} as class {c}" for c, o in zip(classes, outputs, strict=True) if c != o)
    warning = (
        f"the target's outputs match the non-member reference's labels far better in another order (accuracy "
        f"{best:.3f} reading {moved}, against {given:.3f} as given): the labels are probably not the model's classes "
        "in the order of its outputs (a model fitted on text labels orders them alphabetically); write the files' "
        "labels in the model's order"
    )
    read_as = np.empty(n_classes, dtype=np.int64)
    read_as[outputs] = classes  # the class each output is read as
    return input_mismatch(warning, read_as[predicted] == labels, predicted == labels)
