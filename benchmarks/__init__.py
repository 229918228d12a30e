"""Performance measurements of the EMA workbench, with their recorded results.

Run ``python -m benchmarks`` (all measurements), ``python -m benchmarks --quick`` (a fast
pass) or ``python -m benchmarks --only thresholds,scoring``. Each measurement is a module
with a ``measure(config) -> list[dict]`` function; every row compares our figure with a
baseline measured in the same run, so that a noisy, shared machine still gives a fair ratio.
The table is printed and written to ``benchmarks/RESULTS.md``.

Row keys (see :data:`benchmarks._common.ROW_KEYS`):

``benchmark``, ``case``
    Which measurement and which configuration (size, model, batch size...).
``ours``, ``baseline``, ``unit``, ``baseline_label``
    Medians over ``repeats``, in ``unit``; what the baseline is.
``ratio``, ``ratio_label``
    How the two compare, and how the ratio is formed (e.g. ``loop / ours``).
``goal``, ``met``
    The performance goal and whether this run reached it (``None``: no goal for the row).
``repeats``, ``note``
    How many repeats the medians are over, and anything the reader must know (extrapolated
    figures, fallbacks used because a feature did not exist yet).
``details``
    Optional Markdown written under the table (profiles, explanations).
"""

#: The measurements, in the order they run.
MEASUREMENTS = (
    "thresholds",
    "scoring",
    "image_sizes",
    "table_memory",
    "text_tables",
    "http",
    "cli",
    "training",
    "audit",
    "end_to_end",
    "memory",
    "grid_workers",
    "spark",
    "gpu",
)
