"""The paper's grids as values: which cells each audits and which tables it prints.

==============  ============================================  ===================================
grid            cells                                         tables
==============  ============================================  ===================================
``benchmark``   k x {M1..M5, M6, S}, method ``both``          Table 2 (a) rho_KS, (b) rho_EMA
``ks-vs-t``     k x {M1..M5, M6, S}, method ``ema``           Table 4 (a) KS test, (b) t-test
``query-size``  |D_q| x k x {M1..M5, M6, S}, method ``ema``   Table 5, one per |D_q|
``medical``     k x {C1..C5, C6, R}: ``ema`` and              Tables 3 (a) (b), 4 (c), and 6,
                ``ks-ratio``; |D_q| x k x queries, ``ema``    one per |D_q|
==============  ============================================  ===================================

A cell is one audit: (k, query set, method, |D_q|). Both p-values of EMA (t-test and KS
test) come from the same audit, so Table 4 needs no extra runs. The medical grid labels the
query sets as the paper does (C1..C5, C6, R) and uses the medical protocol's calibration
quality: (100 - k)% of the calibration images get Gaussian noise, none are rotated.
"""

from __future__ import annotations

from dataclasses import dataclass

from ema.auditors.ema import EMAAuditor
from ema.auditors.ks_ratio import KSRatioAuditor
from ema.data.presets import BINARY_SOURCES
from ema.data.splits import MEMBER_NAMES, QUERY_NAMES
from ema.errors import InputError
from ema.experiments.common import BENCHMARK_RECIPE
from ema.experiments.paper.tables import FULL, RULE_KS_RATIO, RULE_PVALUE, TableSpec, size_label
from ema.training.spec import TrainSpec
from ema.validation import check_choice
from ema.workflows.methods import methods_running

#: Calibration quality as in the benchmark: half of the corrupted images noised, half rotated.
CORRUPTION_PAPER = "noise+rotation"
#: Calibration quality as in the medical experiment: every corrupted image noised.
CORRUPTION_NOISE = "noise"

#: k values of Tables 2, 4 and 5.
PAPER_KS = (100, 90, 80, 70, 60, 50)
#: k values of Table 3 (the medical grid).
MEDICAL_KS = (100, 90, 80, 70, 60)
#: |D_q| of Tables 5 and 6; None is the whole query set (2,000 or 800 in the paper).
QUERY_SIZES: tuple[int | None, ...] = (None, 500, 200, 50, 20, 5)

#: The paper's medical recipe (Adam, lr 2e-5, weight decay 1e-7, 30 epochs) on our small CNN:
#: ResNet-18 is not available here (see ``ema.training.architectures``).
MEDICAL_RECIPE = TrainSpec(arch="cnn", optimizer="adam", lr=2e-5, momentum=0.0, weight_decay=1e-7, epochs=30)
#: The paper's names of the medical query sets.
MEDICAL_LABELS = {**{f"M{i}": f"C{i}" for i in range(1, 6)}, "M6": "C6", "S": "R"}

#: The audit methods whose runs carry EMA's rho values, and the KS ratio's (from the method table).
METHODS_EMA = methods_running(EMAAuditor.method)
METHODS_KS_RATIO = methods_running(KSRatioAuditor.method)


@dataclass(frozen=True)
class Cell:
    """One audit of a grid.

    Attributes
    ----------
    k : int
        Calibration quality (percent clean).
    query : str
        Query set name (M1..M5, M6, S).
    method : str
        ``--method`` of the audit (``both``, ``ema`` or ``ks-ratio``).
    size : int or None
        |D_q| of a seeded subsample; None for the whole query set.
    """

    k: int
    query: str
    method: str
    size: int | None = None

    @property
    def size_label(self) -> str:
        return size_label(self.size)


@dataclass(frozen=True, kw_only=True)
class Grid:
    """A grid of the paper.

    Attributes
    ----------
    name, description : str
    ks : tuple of int
        Default k values.
    full_methods : tuple of str
        Methods audited on the whole query sets.
    sized_method : str or None
        Method audited on subsamples of each size; None when the grid has no sizes.
    sizes : tuple
        Default query sizes (None = whole set); ``(None,)`` when the grid has none.
    corruption : str
        :data:`CORRUPTION_PAPER` or :data:`CORRUPTION_NOISE`.
    recipe : TrainSpec
        How the grid trains its target (and, with it, every calibration model).
    default_data : str
    binary_only : bool
        Only the binary (medical) sources fit the grid.
    labels : dict
        Display names of the query sets.
    """

    name: str
    description: str
    ks: tuple[int, ...]
    full_methods: tuple[str, ...]
    sized_method: str | None
    sizes: tuple[int | None, ...]
    corruption: str
    recipe: TrainSpec
    default_data: str
    binary_only: bool = False
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def has_sizes(self) -> bool:
        return self.sized_method is not None

    @property
    def has_ks_ratio(self) -> bool:
        return any(m in METHODS_KS_RATIO for m in self.full_methods)

    def cells(self, ks, queries, sizes) -> list[Cell]:
        """Cells in audit order: by k (each calibration trained once, first), then method, size, query."""
        planned = []
        for k in ks:
            if None in sizes or not self.has_sizes:
                planned += [Cell(k, q, m) for m in self.full_methods for q in queries]
            if self.has_sizes:
                planned += [Cell(k, q, self.sized_method, s) for s in sizes if s is not None for q in queries]
        return planned

    def tables(self, sizes) -> list[TableSpec]:
        """The tables this grid prints for the chosen sizes."""
        return TABLES[self.name](sizes)


def _benchmark_tables(sizes) -> list[TableSpec]:
    return [
        TableSpec(
            "table2a",
            "Table 2(a): rho_KS of Liu & Tsaftaris (KS ratio), benchmark",
            "rho_ks",
            RULE_KS_RATIO,
            METHODS_KS_RATIO,
        ),
        TableSpec("table2b", "Table 2(b): rho_EMA of EMA (t-test), benchmark", "rho_ema", RULE_PVALUE, METHODS_EMA),
    ]


def _ks_vs_t_tables(sizes) -> list[TableSpec]:
    return [
        TableSpec(
            "table4a", "Table 4(a): rho_EMA using the KS test, benchmark", "rho_ema_ks", RULE_PVALUE, METHODS_EMA
        ),
        TableSpec("table4b", "Table 4(b): rho_EMA using the t-test, benchmark", "rho_ema", RULE_PVALUE, METHODS_EMA),
    ]


def _size_title(size: int | None) -> str:
    return "whole query sets" if size is None else f"|D_q| = {size}"


def _query_size_tables(sizes) -> list[TableSpec]:
    return [
        TableSpec(
            f"table5_{size_label(s)}",
            f"Table 5: rho_EMA (t-test), {_size_title(s)}, benchmark",
            "rho_ema",
            RULE_PVALUE,
            METHODS_EMA,
            size_label(s),
        )
        for s in sizes
    ]


def _medical_tables(sizes) -> list[TableSpec]:
    tables = []
    if None in sizes:
        tables += [
            TableSpec(
                "table3a",
                "Table 3(a): rho_KS of Liu & Tsaftaris (KS ratio), chest X-ray",
                "rho_ks",
                RULE_KS_RATIO,
                METHODS_KS_RATIO,
            ),
            TableSpec(
                "table3b",
                "Table 3(b): rho_EMA of EMA (t-test), chest X-ray; also Table 4(d)",
                "rho_ema",
                RULE_PVALUE,
                METHODS_EMA,
            ),
            TableSpec(
                "table4c", "Table 4(c): rho_EMA using the KS test, chest X-ray", "rho_ema_ks", RULE_PVALUE, METHODS_EMA
            ),
        ]
    tables += [
        TableSpec(
            f"table6_{size_label(s)}",
            f"Table 6: rho_EMA (t-test), {_size_title(s)}, chest X-ray",
            "rho_ema",
            RULE_PVALUE,
            METHODS_EMA,
            size_label(s),
        )
        for s in sizes
    ]
    return tables


TABLES = {
    "benchmark": _benchmark_tables,
    "ks-vs-t": _ks_vs_t_tables,
    "query-size": _query_size_tables,
    "medical": _medical_tables,
}

#: Every grid, by name.
GRIDS: dict[str, Grid] = {
    grid.name: grid
    for grid in (
        Grid(
            name="benchmark",
            description="Table 2: EMA vs the KS ratio of Liu & Tsaftaris on the benchmark",
            ks=PAPER_KS,
            full_methods=("both",),
            sized_method=None,
            sizes=(None,),
            corruption=CORRUPTION_PAPER,
            recipe=BENCHMARK_RECIPE,
            default_data="mnist-embedded",
        ),
        Grid(
            name="ks-vs-t",
            description="Table 4 (a, b): EMA with the KS test vs the t-test on the benchmark",
            ks=PAPER_KS,
            full_methods=("ema",),
            sized_method=None,
            sizes=(None,),
            corruption=CORRUPTION_PAPER,
            recipe=BENCHMARK_RECIPE,
            default_data="mnist-embedded",
        ),
        Grid(
            name="query-size",
            description="Table 5: EMA on query sets of different sizes, benchmark",
            ks=PAPER_KS,
            full_methods=("ema",),
            sized_method="ema",
            sizes=QUERY_SIZES,
            corruption=CORRUPTION_PAPER,
            recipe=BENCHMARK_RECIPE,
            default_data="mnist-embedded",
        ),
        Grid(
            name="medical",
            description="Tables 3, 4 (c, d) and 6: chest X-rays, binary labels, noise-only calibration quality",
            ks=MEDICAL_KS,
            full_methods=("ema", "ks-ratio"),
            sized_method="ema",
            sizes=QUERY_SIZES,
            corruption=CORRUPTION_NOISE,
            recipe=MEDICAL_RECIPE,
            default_data="pneumoniamnist",
            binary_only=True,
            labels=tuple(MEDICAL_LABELS.items()),
        ),
    )
}
GRID_NAMES = tuple(GRIDS)


def get_grid(name: str) -> Grid:
    return GRIDS[check_choice("grid", name, GRIDS)]


def parse_ks(text: str | None, grid: Grid) -> tuple[int, ...]:
    """``"100,60"`` -> (100, 60); ``None`` or ``"all"`` -> the grid's k values."""
    if text is None or text.strip().lower() == "all":
        return grid.ks
    try:
        ks = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise InputError(
            f"expected k values as comma-separated integers in 0..100 (e.g. 100,60) or 'all', got {text!r}"
        ) from exc
    bad = [k for k in ks if not 0 <= k <= 100]
    if not ks or bad or len(set(ks)) != len(ks):
        raise InputError(f"expected distinct k values in 0..100 (e.g. 100,60) or 'all', got {text!r}")
    return ks


def parse_queries(text: str | None) -> tuple[str, ...]:
    """``"M1,M6"`` -> ("M1", "M6") in the paper's column order; ``None`` or ``"all"`` -> every query set."""
    if text is None or text.strip().lower() == "all":
        return QUERY_NAMES
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in QUERY_NAMES]
    if not names or unknown:
        raise InputError(f"expected query sets from {list(QUERY_NAMES)} (comma-separated) or 'all', got {text!r}")
    return tuple(q for q in QUERY_NAMES if q in names)


def parse_sizes(text: str | None, grid: Grid) -> tuple[int | None, ...]:
    """``"full,50,5"`` -> (None, 50, 5); ``None`` or ``"all"`` -> the grid's sizes."""
    if text is None or text.strip().lower() == "all":
        return grid.sizes
    if not grid.has_sizes:
        raise InputError(f"grid {grid.name!r} audits whole query sets only; --sizes applies to query-size and medical")
    sizes: list[int | None] = []
    for value in (v.strip().lower() for v in text.split(",") if v.strip()):
        if value == FULL:
            sizes.append(None)
            continue
        try:
            size = int(value)
        except ValueError as exc:
            raise InputError(f"expected sizes as 'full' or positive integers, comma-separated, got {text!r}") from exc
        if size < 1:
            raise InputError(f"expected query sizes >= 1, got {size}")
        sizes.append(size)
    if not sizes or len(set(sizes)) != len(sizes):
        raise InputError(f"expected distinct sizes ('full' or positive integers), got {text!r}")
    return tuple(sizes)


def check_data(grid: Grid, data: str) -> None:
    """Refuse a data source the grid does not fit (the medical grid needs a binary chest X-ray source)."""
    if grid.binary_only and data not in BINARY_SOURCES:
        raise InputError(
            f"grid {grid.name!r} expects a binary chest X-ray source from {list(BINARY_SOURCES)} "
            f"(e.g. --data pneumoniamnist --root DIR), got {data!r}"
        )


def member_query(queries) -> str:
    """The first member set among ``queries`` (for the figures), else the first query set."""
    return next((q for q in queries if q in MEMBER_NAMES), queries[0])
