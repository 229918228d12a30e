"""What ``ema grid paper NAME`` is asked to do: the grid, its data or registered target, how it is narrowed, its seeds.

:class:`GridConfig` fills in what is unset from the grid (:meth:`GridConfig.narrowed`), checks the
options before any training (:meth:`GridConfig.validate`) and names the parent run's params.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ema.data.splits import QUERY_NAMES
from ema.errors import InputError
from ema.experiments.paper.grids import Grid, check_data, get_grid
from ema.tracking import keys
from ema.validation import check_open_unit


@dataclass(frozen=True, kw_only=True)
class GridConfig:
    """What ``ema grid paper NAME`` is asked to do.

    Attributes
    ----------
    name : str
        A grid from :data:`ema.experiments.paper.grids.GRIDS`.
    data, data_root, data_seed
        Where the target's splits come from (default: the grid's data). With ``model_uri`` they
        come from the version's tags, and ``data`` must be None or the same source.
    model_uri : str, optional
        A registered target (``models:/NAME@ALIAS``) to audit instead of training the grid's.
    ks, queries, sizes : tuple, optional
        Narrow the grid (default: all of the grid's k values, query sets and sizes).
    epochs : int, optional
        Train the grid's recipe for this many epochs instead of the paper's.
    cal_seed, alpha, sample_seed
        Calibration seed, significance level, seed of the query subsamples.
    workers : int
        Processes that audit the cells (1: this one). The cells, and ``cells.csv``, do not depend on it.
        The workers are started with ``spawn``: a script that calls :func:`run_grid` with more than
        one must do so under ``if __name__ == "__main__":``.
    """

    name: str
    data: str | None = None
    data_root: str | None = None
    data_seed: int = 0
    model_uri: str | None = None
    ks: tuple[int, ...] | None = None
    queries: tuple[str, ...] | None = None
    sizes: tuple[int | None, ...] | None = None
    epochs: int | None = None
    cal_seed: int = 0
    alpha: float = 0.1
    sample_seed: int = 0
    workers: int = 1

    @property
    def grid(self) -> Grid:
        return get_grid(self.name)

    def narrowed(self) -> GridConfig:
        """The same configuration with every unset k, query set and size filled in from the grid."""
        grid = self.grid
        return dataclasses.replace(
            self,
            ks=tuple(self.ks or grid.ks),
            queries=tuple(self.queries or QUERY_NAMES),
            sizes=tuple(self.sizes or grid.sizes),
        )

    def validate(self) -> GridConfig:
        """Check the options before any training; returns ``self``."""
        check_open_unit("alpha", self.alpha)
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise InputError(f"expected workers to be an integer >= 1, got {self.workers!r}")
        if self.model_uri is not None and self.epochs is not None:
            raise InputError("expected either --model (its recipe comes from its version tags) or --epochs, got both")
        if self.model_uri is None:
            check_data(self.grid, self.data or self.grid.default_data)
        return self

    def params(self) -> dict[str, object]:
        """The parent run's params that describe the plan."""
        return {
            keys.PARAM_GRID: self.name,
            keys.PARAM_ALPHA: self.alpha,
            keys.PARAM_CAL_SEED: self.cal_seed,
            keys.PARAM_SAMPLE_SEED: self.sample_seed,
            keys.PARAM_GRID_KS: ",".join(map(str, self.ks)),
            keys.PARAM_GRID_QUERIES: ",".join(self.queries),
            keys.PARAM_GRID_SIZES: ",".join("full" if s is None else str(s) for s in self.sizes),
            keys.PARAM_CORRUPTION: self.grid.corruption,
            keys.PARAM_WORKERS: self.workers,
        }
