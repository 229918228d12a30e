"""What ``ema grid unlearning`` is asked to do, as a value the command line builds without importing the grid."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ema.auditors.reference_record import AUTO_MARGIN, DEFAULT_MARGIN
from ema.data.splits import MEMBER_NAMES
from ema.errors import InputError
from ema.tracking import keys
from ema.training.unlearn_spec import UNLEARN_METHODS
from ema.validation import check_choice, check_open_unit, check_positive_int

#: The grid's name on the command line.
UNLEARNING_GRID = "unlearning"


@dataclass(frozen=True, kw_only=True)
class UnlearningGridConfig:
    """What ``ema grid unlearning`` is asked to do.

    Attributes
    ----------
    methods : tuple of str
        Removal methods (default all; ``retrain`` is always added: it is every table's baseline).
    seeds : tuple of int
        Seeds of each method (weights of a retrained model, batch order, random labels).
    forget, retained, held_out : str
        The forget set (a training fold), a retained training fold, and held-out data.
    sizes : tuple of int
        |D_q| of the forget-set subsets the trace sweep audits.
    n_draws : int
        Seeded subsets per size, method and seed.
    model_uri : str, optional
        A registered target to unlearn from instead of the grid's benchmark target.
    epochs, data, data_root, data_seed
        The grid's own target (as for the paper's grids; ``data_seed`` None is 0); refused with ``model_uri``.
    mark_key : str, optional
        A data owner's mark key (``ema mark --key``): each version is also audited by the marks
        auditor on ``mark_queries`` held-out images. Only with ``model_uri``, a target trained on the
        key's marked copy in place of the forget set (``ema train --fold M1=FILE``).
    mark_queries : int, optional
        Held-out images the marks auditor stamps (default: ``ema audit --method marks``'s); only with ``mark_key``.
    margin : float or "auto"
        The calibrated auditor's margin in every audit of the grid (``ema audit --margin``):
        ``not_memorized`` only if the retained share's upper bound is at most it; ``"auto"``: each
        audit's own certifiable margin.
    reference_seeds : tuple of int
        Seeds of redrawn non-member references (default none): per version and seed, the whole
        forget set is audited once more by the calibrated auditor against a non-member reference
        of the usual size drawn with that seed from the never-seen pool (the usual reference and
        the held-out set together), so the forget set's verdict is tallied over (version seed,
        reference seed) pairs rather than one fixed reference.
    alpha, cal_seed, sample_seed
    """

    methods: tuple[str, ...] = UNLEARN_METHODS
    seeds: tuple[int, ...] = (0, 1, 2)
    forget: str = "M1"
    retained: str = "M2"
    held_out: str = "M6"
    sizes: tuple[int, ...] = (20, 50, 100, 200, 500)
    n_draws: int = 10
    model_uri: str | None = None
    epochs: int | None = None
    data: str | None = None
    data_root: str | None = None
    data_seed: int | None = None
    alpha: float = 0.1
    cal_seed: int = 0
    sample_seed: int = 0
    mark_key: str | None = None
    mark_queries: int | None = None
    margin: float | str = DEFAULT_MARGIN
    reference_seeds: tuple[int, ...] = ()

    def validate(self) -> UnlearningGridConfig:
        """Check the options before any training; returns the config with ``retrain`` first among the methods."""
        for method in self.methods:
            check_choice("unlearning method", method, UNLEARN_METHODS)
        if not self.methods or len(set(self.methods)) != len(self.methods):
            raise InputError(f"expected distinct unlearning methods, got {self.methods!r}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise InputError(f"expected distinct non-negative seeds, got {self.seeds!r}")
        check_choice("forget set", self.forget, MEMBER_NAMES)
        check_choice("retained fold", self.retained, tuple(m for m in MEMBER_NAMES if m != self.forget))
        if not self.sizes:
            raise InputError("expected at least one size for the trace sweep, got none")
        for size in self.sizes:
            check_positive_int("trace sweep size", size)
        check_positive_int("draws", self.n_draws)
        check_open_unit("alpha", self.alpha)
        if self.margin != AUTO_MARGIN:
            check_open_unit("margin", self.margin)
        if len(set(self.reference_seeds)) != len(self.reference_seeds) or min(self.reference_seeds, default=0) < 0:
            raise InputError(
                f"expected distinct non-negative reference seeds (--reference-seeds), got {self.reference_seeds!r}"
            )
        own_target = {
            "--epochs": self.epochs,
            "--data": self.data,
            "--root": self.data_root,
            "--data-seed": self.data_seed,
        }
        given = [f"{flag} {value}" for flag, value in own_target.items() if value is not None]
        if self.model_uri is not None and given:
            raise InputError(
                "expected either --model (its recipe and data come from its version tags) or --epochs, --data, "
                f"--root and --data-seed, got both: --model {self.model_uri} with {', '.join(given)}"
            )
        self._check_marks()
        return dataclasses.replace(self, methods=("retrain", *(m for m in self.methods if m != "retrain")))

    def _check_marks(self) -> None:
        """``--mark-key`` only with ``--model`` (the grid's own target is never trained on a marked copy);
        ``--mark-queries`` only with ``--mark-key``."""
        if self.mark_key is not None and self.model_uri is None:
            raise InputError(
                "expected --mark-key with --model, a target trained on the key's marked copy in place of the forget "
                f"set (ema train --fold {self.forget}=FILE), got --mark-key without --model: the grid's own target "
                "never saw the mark; train one on the marked copy and pass it as --model"
            )
        if self.mark_queries is not None:
            if self.mark_key is None:
                raise InputError(
                    f"expected --mark-queries only with --mark-key (the marks auditor's images), got --mark-queries "
                    f"{self.mark_queries} without it: drop --mark-queries or give --mark-key"
                )
            check_positive_int("mark queries", self.mark_queries)

    def params(self) -> dict[str, object]:
        return {
            keys.PARAM_GRID: UNLEARNING_GRID,
            keys.PARAM_METHODS: ",".join(self.methods),
            keys.PARAM_SEEDS: ",".join(map(str, self.seeds)),
            keys.PARAM_FORGET: self.forget,
            keys.PARAM_SIZES: ",".join(map(str, self.sizes)),
            keys.PARAM_N_DRAWS: self.n_draws,
            keys.PARAM_ALPHA: self.alpha,
            keys.PARAM_CAL_SEED: self.cal_seed,
            keys.PARAM_SAMPLE_SEED: self.sample_seed,
            keys.PARAM_MARGIN: self.margin,
            **({keys.PARAM_REFERENCE_SEEDS: ",".join(map(str, self.reference_seeds))} if self.reference_seeds else {}),
            # never the mark key's path or contents; the marks audits' child runs record the marked copy's fingerprint
            **({keys.PARAM_QUERIES: self.mark_queries} if self.mark_queries is not None else {}),
        }

    def logged(self) -> dict[str, object]:
        """The config as the grid's artifact records it: every field but the mark key's path."""
        return {name: value for name, value in self.__dict__.items() if name != "mark_key"}
