"""``python -m benchmarks.matching``: leaving a query's rows out of a reference table (``without_query``), keyed as
now (numbers by their float64 bytes, text by codes) against every cell as text (as before), interleaved in one
process (the machine is shared: only the two compared in one run count).

The default table holds ``--rows`` rows of 30 numbers (1% missing) and 3 text columns of 50 categories, with labels
0 or 1; the reference holds as many, a quarter of them the query's. ``--pool FILE --query FILE`` matches two set
files instead (any ``ema audit --query-file`` reads, labels in ``label``; the pool laid out as the query). Each
repeat checks that both keep the same rows.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ema.data.arrays import ArraySet, canonical_nan, in_query_layout
from ema.data.files import read_set
from ema.inputs import cells_as_text
from ema.workflows.references import without_query

N_NUMBERS, N_TEXT, N_CATEGORIES = 30, 3, 50
MISSING_SHARE = 0.01


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.matching", description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000, help="Rows of each default table (default: 20,000).")
    parser.add_argument("--repeats", type=int, default=5, help="Interleaved repeats of each (default: 5).")
    parser.add_argument("--pool", help="A reference set file (default: the generated table).")
    parser.add_argument("--query", help="A query set file (default: the generated table).")
    return parser.parse_args(argv)


def generated(n: int, rng: np.random.Generator, name: str, shared: ArraySet | None = None) -> ArraySet:
    """``n`` rows of numbers and text categories; the first quarter ``shared``'s rows when given."""
    numbers = rng.normal(size=(n, N_NUMBERS))
    numbers[rng.random(numbers.shape) < MISSING_SHARE] = np.nan
    x = np.column_stack([numbers.astype(object), rng.choice([f"cat{k}" for k in range(N_CATEGORIES)], (n, N_TEXT))])
    y = rng.integers(0, 2, size=n).astype(np.int64)
    if shared is not None:
        x[: n // 4], y[: n // 4] = shared.x[: n // 4], shared.y[: n // 4]
    return ArraySet(name, x, y, np.arange(n, dtype=np.int64), tuple(f"c{i}" for i in range(x.shape[1])))


def as_text_without_query(pool: ArraySet, query: ArraySet) -> ArraySet:
    """The baseline: ``pool`` minus ``query``'s rows, every cell of both as text (two sets of one layout)."""
    texts = [cells_as_text(data.x) for data in (pool, query)]
    width = np.result_type(*texts)
    keys = []
    for text, data in zip(texts, (pool, query), strict=True):
        cells = canonical_nan(np.ascontiguousarray(text, dtype=width)).reshape(len(data), -1).view(np.uint8)
        rows = np.concatenate([cells, data.y.astype("<i8").view(np.uint8).reshape(len(data), -1)], axis=1)
        keys.append(rows.view(np.dtype((np.void, rows.shape[1]))).ravel())
    return pool.take(np.flatnonzero(~np.isin(keys[0], keys[1])))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.pool and args.query:
        query = read_set(args.query, max_images=10**9)
        pool = in_query_layout(read_set(args.pool, max_images=10**9), query, role="pool")
    else:
        rng = np.random.default_rng(0)
        query = generated(args.rows, rng, "query")
        pool = generated(args.rows, rng, "pool", shared=query)
    times: dict[str, list[float]] = {"bytes and codes": [], "as text": []}
    for _ in range(args.repeats):
        kept = {}
        for label, function in (("as text", as_text_without_query), ("bytes and codes", without_query)):
            start = time.perf_counter()
            kept[label] = function(pool, query).index
            times[label].append(time.perf_counter() - start)
        assert np.array_equal(kept["as text"], kept["bytes and codes"]), "the two kept different rows"
    print(f"pool {pool.x.shape} {pool.x.dtype}, query {query.x.shape}: {len(kept['as text'])} rows kept by both")
    for label, seconds in times.items():
        print(f"{label:>15}: median {statistics.median(seconds):.3f} s of {', '.join(f'{s:.3f}' for s in seconds)}")
    ratio = statistics.median(times["as text"]) / statistics.median(times["bytes and codes"])
    print(f"as text / bytes and codes: {ratio:.1f}")


if __name__ == "__main__":
    main()
