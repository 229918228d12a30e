"""Which black-box views carry membership information: ``python -m ema.experiments.errors.view_families``.

Part of the ``errors`` study (issue 26). ``--augment shifts`` queries the target with each image and its
8 one-pixel shifts, and the auditor scores the identity's log-odds minus half the other views' mean
(:mod:`ema.auditors.views`). The issue asks those views for 3x the single view's information on the
overfit target, and they give 1.6x (:mod:`ema.experiments.errors.shift_information`). This study asks
whether other views a black box can be queried with do better (:data:`FAMILIES`): shifts of up to 2
pixels, small rotations, small rescalings, seeded Gaussian pixel noise, and shifts with rotations.

Every family goes through the auditor as ``--augment shifts`` does (the same fixed contrast, the same
cross-fitted information, :func:`ema.experiments.errors.shift_information.view_information`), on the
same target and references: a family's information is comparable with the shifts' row for row.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from scipy import ndimage

from ema.data.shifts import shift_views
from ema.experiments.errors.learned_views import learned_information, view_log_odds_features
from ema.experiments.errors.reference_pools import TARGETS
from ema.experiments.errors.shift_information import GOAL_SIZE, train_with_references, view_information

#: Degrees of the rotation views (about the image's centre, bilinear, zero-filled corners).
ROTATIONS = (-9.0, -6.0, -3.0, 3.0, 6.0, 9.0)
#: Factors of the rescaling views (about the centre, bilinear; cropped or zero-padded back to the image's size).
SCALES = (0.9, 0.95, 1.05, 1.1)
#: Gaussian pixel noise of the noise views: their number, standard deviation (on 0..255) and seed.
NOISE_VIEWS, NOISE_STD, NOISE_SEED = 8, 20.0, 0
#: Every offset of at most 2 pixels along each axis, the identity first (25 views).
OFFSETS_2PX = (
    (0, 0),
    *((dy, dx) for dy in range(-2, 3) for dx in range(-2, 3) if (dy, dx) != (0, 0)),
)
COMMAND = "python -m ema.experiments.errors.view_families"


def _as_images(values: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``values`` rounded and clipped into ``like``'s pixel range and dtype (uint8 images stay uint8)."""
    if np.issubdtype(like.dtype, np.integer):
        info = np.iinfo(like.dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(like.dtype)
    return values.astype(like.dtype)


def rotation_views(x: np.ndarray, degrees: tuple[float, ...] = ROTATIONS) -> np.ndarray:
    """``x`` (n, H, W[, C]) and its rotations by each of ``degrees``: shape (1 + len(degrees), n, H, W[, C])."""
    pixels = x.astype(np.float32)
    rotated = (ndimage.rotate(pixels, angle, axes=(1, 2), reshape=False, order=1) for angle in degrees)
    return np.stack([x, *(_as_images(view, x) for view in rotated)])


def _centred(zoomed: np.ndarray, height: int, width: int) -> np.ndarray:
    """``zoomed`` (n, h, w[, C]) cropped or zero-padded about its centre to (n, height, width[, C])."""
    out = np.zeros((len(zoomed), height, width, *zoomed.shape[3:]), dtype=zoomed.dtype)
    h, w = min(height, zoomed.shape[1]), min(width, zoomed.shape[2])
    top, left = (zoomed.shape[1] - h) // 2, (zoomed.shape[2] - w) // 2
    out_top, out_left = (height - h) // 2, (width - w) // 2
    out[:, out_top : out_top + h, out_left : out_left + w] = zoomed[:, top : top + h, left : left + w]
    return out


def scale_views(x: np.ndarray, factors: tuple[float, ...] = SCALES) -> np.ndarray:
    """``x`` (n, H, W[, C]) and its rescalings by each of ``factors``: shape (1 + len(factors), n, H, W[, C])."""
    pixels = x.astype(np.float32)
    channels = (1.0,) * (x.ndim - 3)
    views = (_centred(ndimage.zoom(pixels, (1.0, f, f, *channels), order=1), *x.shape[1:3]) for f in factors)
    return np.stack([x, *(_as_images(view, x) for view in views)])


def noise_views(
    x: np.ndarray, n_views: int = NOISE_VIEWS, std: float = NOISE_STD, seed: int = NOISE_SEED
) -> np.ndarray:
    """``x`` (n, H, W[, C]) and ``n_views`` copies with seeded Gaussian noise of ``std`` added to every pixel."""
    noise = np.random.default_rng(seed).normal(0.0, std, size=(n_views, *x.shape))
    return np.concatenate([x[None], _as_images(x.astype(np.float32) + noise, x)])


def shift_and_rotation_views(x: np.ndarray) -> np.ndarray:
    """The 9 shift views and the 6 rotations (:data:`ROTATIONS`) together, the identity first (15 views)."""
    return np.concatenate([shift_views(x), rotation_views(x)[1:]])


#: The families compared, by name: images (n, H, W[, C]) -> views (n_views, n, H, W[, C]), the identity first.
FAMILIES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "shifts": shift_views,
    "shifts-2px": lambda x: shift_views(x, OFFSETS_2PX),
    "rotations": rotation_views,
    "scales": scale_views,
    "noise": noise_views,
    "shifts+rotations": shift_and_rotation_views,
}


def measure(name: str, families: tuple[str, ...], seeds: tuple[int, ...], *, learned: bool) -> dict[str, dict]:
    """Train target ``name``; every family's information and margin through the auditor (and with ``learned``, of
    the cross-fitted learned score over its views, :mod:`ema.experiments.errors.learned_views`), the shifts' first:
    they are the yardstick."""
    target = train_with_references(name)
    rows = {}
    for family in ("shifts", *(f for f in families if f != "shifts")):  # a handful of families
        started = time.perf_counter()
        member_views, nonmember_views = target.scored_views(FAMILIES[family])
        row = view_information(target, member_views, nonmember_views, seeds)
        if learned:
            row["learned"] = learned_information(
                view_log_odds_features(member_views, target.members.y),
                view_log_odds_features(nonmember_views, target.nonmembers.y),
                seeds,
            )
        rows[family] = {**row, "seconds": time.perf_counter() - started}
    return rows


def main(argv: list[str] | None = None) -> None:
    """Print every family's information and margin on every target as a Markdown table."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", choices=tuple(TARGETS), default=tuple(TARGETS))
    parser.add_argument("--families", nargs="+", choices=tuple(FAMILIES), default=tuple(FAMILIES))
    parser.add_argument("--seeds", type=int, default=5, help="Cross-fitting seeds averaged (default 5).")
    parser.add_argument(
        "--learned", action="store_true", help="Also a score learned from each family's views (minutes more)."
    )
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds: expected at least 1, got {args.seeds}")
    learned_header = " learned: information (lower) | / 1 view | margin at 200 |" if args.learned else ""
    print(
        f"| target | views | count | information (1 view: identity) | / 1 view | / shifts | "
        f"certifiable margin at {GOAL_SIZE} |{learned_header}"
    )
    print("|---" * (7 + 3 * args.learned) + "|")
    for name in args.targets:  # three targets
        rows = measure(name, tuple(args.families), tuple(range(args.seeds)), learned=args.learned)
        for family in args.families:  # a handful of families
            row = rows[family]
            learned = ""
            if args.learned:
                information, lower, margin = row["learned"]
                learned = f" {information:.3f} ({lower:.3f}) | {_ratio(information, row['single'])} | {margin:.2f} |"
            print(
                f"| {name} | {family} | {row['views']} | {row['shifts']:.3f} ({row['single']:.3f}) | "
                f"{_ratio(row['shifts'], row['single'])} | {_ratio(row['shifts'], rows['shifts']['shifts'])} | "
                f"{row['margin_shifts']:.2f} ({row['margin_single']:.2f}) |{learned}  "
                f"<!-- {row['seconds']:.0f} s -->",
                flush=True,
            )


def _ratio(value: float, base: float) -> str:
    """``value / base`` as a multiple ("inf" where ``base`` is 0: the identity alone carries nothing)."""
    return f"{value / base:.2f}x" if base > 0 else "inf"


if __name__ == "__main__":
    main()
