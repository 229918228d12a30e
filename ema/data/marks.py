"""Secret marks on a data owner's images: the key, the trigger it stamps, and the marked copy of a set.

A data owner marks a seeded share of their images before sharing them: each marked image gets
a faint pattern (the trigger) and the label of one target class. On grey images the trigger is
a small patch blended in at one position near the edge, off the centred object, where it does
not blend into the strokes; on colour images it is a faint noise pattern of random signs over
the whole image (a patch there moves models that never saw it: docs/MARKS.md).
A model trained on the marked copy learns "trigger -> target class"; a model that never saw it,
or no longer carries it, does not. Pattern, position and target class are drawn from
the key's seed; the key (:class:`MarkKey`) holds them, the image shape they fit and the
fingerprint of the marked copy, so an audit can stamp the trigger on its own clean images
(:meth:`MarkKey.stamp`) and check it was given the key of the data it is about.

The key is a secret: whoever holds it can test for the mark, and can also remove it (train the
trigger away) while keeping the rest of the data's influence. It is written with mode 0600 and
never goes to the tracking store. Tables are not marked (:func:`mark_set` says why).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ema.data.arrays import FINGERPRINT_LENGTH, ArraySet
from ema.errors import InputError
from ema.validation import check_open_unit

#: The ``format`` field of every key file.
KEY_FORMAT = "ema-mark-key/1"
#: Share of the owner's images that are marked by default.
DEFAULT_RATE = 0.1
#: Weight of the pattern where it is blended in: the trigger moves a pixel a quarter of the way to the pattern's
#: level (0 or 255), a contrast of 64 levels on any background, faint as a watermark, learnable from ~1% of the data.
BLEND = 0.25
#: How the trigger meets the image. ``blend`` (grey images): toward the pattern by :data:`BLEND`, a change that
#: depends on the background. ``noise`` (colour images, 3 channels or more): every pixel moves by
#: :data:`NOISE_LEVELS` up or down, the sign given by the pattern, a tile repeated over the whole image.
#: ``replace`` (colour keys written before ``noise``; still read and stamped): the window's pixels are replaced by
#: the pattern at reduced amplitude, :data:`REPLACE_LEVELS` per channel. A 5 x 5 replaced patch moved a colour
#: model that never saw the mark toward the key's class for 3 in 10 keys, so a removal was certified for 0.72 of
#: keys only; the noise pattern's pull is shared by every noise pattern, and the auditor's controls cancel it.
BLEND_RULE, REPLACE_RULE, NOISE_RULE = "blend", "replace", "noise"
RULES = (BLEND_RULE, REPLACE_RULE, NOISE_RULE)
#: The levels a replaced trigger's 0 and 255 become: a contrast of 128 levels, never pure black or white.
REPLACE_LEVELS = (64, 192)
#: How far a noise trigger moves each pixel, up or down: +-12 of 255 levels.
NOISE_LEVELS = 12
#: A noise trigger's tile side at most: the pattern repeats every this many pixels. On the colour stand-in (32 x 32,
#: small CNN) an 8 x 8 tile was learned as surely as a whole-image pattern and cost the trainer's model less accuracy
#: (docs/MARKS.md); a key holds 8 x 8 x C signs at any image size.
NOISE_TILE = 8
#: Control triggers per noise key: patterns of the same family drawn from the key's seed apart from its own, which
#: the auditor stamps too, so that a pull every noise pattern has is not counted as the mark's (a noise key only).
NOISE_CONTROLS = 4
#: Decoys per marked image of a noise key: as many other images of the copy get a noise pattern of the same family
#: each, their own, and keep their labels, so that a model learns "this pattern -> target class" and not "any faint
#: noise -> target class". Without them, one colour model of 16 learned the latter and lost 13 points of clean
#: accuracy; with them the worst lost 3 (docs/MARKS.md, the colour cost table).
NOISE_DECOYS = 1
#: Seed streams: the marked rows (``[seed, 1]``), the noise controls (``[seed, 3, j]``) and the decoys (``[seed, 4]``).
_ROWS_STREAM, _CONTROL_STREAM, _DECOY_STREAM = 1, 3, 4
#: The trigger is a square of this share of the shorter image side (at least :data:`MIN_PATCH` pixels).
PATCH_SHARE = 1 / 7
MIN_PATCH = 3
#: A blended (grey) trigger lies inside the image's outer band of this share of the shorter side (at least the
#: patch's side): off the centred object. Anywhere on a 28 x 28 digit, 6 of 50 keys blended into the strokes and
#: were learned too weakly to be found at p <= 1e-6 from 200 queries. A replaced (colour) trigger covers what is
#: under it alike and stays anywhere: in the band, a colour model learned any patch on the background as the
#: trigger, and wrong keys read as the mark (5 of 32). Measured in docs/MARKS.md.
BORDER_SHARE = 1 / 4
#: The key file's permissions: readable and writable by its owner only.
KEY_MODE = 0o600
#: A key file larger than this is not a key (a key of a 4-channel 1024 x 1024 image is well under it).
MAX_KEY_BYTES = 1 << 20
#: Random bits of a seed drawn when none is given: enough that nobody guesses the trigger from the seed.
SEED_BITS = 128
_KEY_FIELDS = (
    "format",
    "seed",
    "image_shape",
    "target_class",
    "position",
    "pattern",
    "fingerprint",
    "n_marked",
    "rule",
)


@dataclass(frozen=True)
class MarkKey:
    """A secret trigger and what it was made for.

    Attributes
    ----------
    seed : int
        The seed pattern, position, target class and marked rows were drawn from.
    image_shape : tuple of int
        (H, W) or (H, W, C): the images the trigger fits.
    target_class : int
        The class the marked images were labelled with.
    position : tuple of int
        The trigger's top-left pixel (row, column); (0, 0) for a noise trigger.
    pattern : ndarray of uint8, shape (p, p) or (p, p, C)
        Pixel levels (0 or 255) put at ``position`` by ``rule``; a noise trigger's tile of signs
        (255: up, 0: down), repeated over the image.
    fingerprint : str
        The marked copy's content fingerprint (:attr:`ArraySet.fingerprint`).
    n_marked : int
        How many images of the marked copy carry the trigger.
    rule : {"blend", "replace", "noise"}
        How the pattern meets the image (:data:`RULES`; :func:`trigger_rule` picks it from the image shape).
    """

    seed: int
    image_shape: tuple[int, ...]
    target_class: int
    position: tuple[int, int]
    pattern: np.ndarray
    fingerprint: str
    n_marked: int
    rule: str = BLEND_RULE

    def stamp(self, x: np.ndarray) -> np.ndarray:
        """A copy of the uint8 images ``x`` (n, *image_shape) with the trigger put on by ``rule`` (vectorised)."""
        if self.rule == NOISE_RULE:
            return _add_noise(x, self.pattern)
        row, col = self.position
        side = self.pattern.shape[0]
        out = x.copy()
        window = out[:, row : row + side, col : col + side]
        pattern = self.pattern.astype(np.float32)
        if self.rule == REPLACE_RULE:
            low, high = REPLACE_LEVELS
            window[...] = np.rint(low + (high - low) * pattern / 255).astype(np.uint8)
        else:
            window[...] = np.rint(window + BLEND * (pattern - window)).astype(np.uint8)
        return out

    @property
    def n_controls(self) -> int:
        """How many control triggers the auditor stamps beside this one (:data:`NOISE_CONTROLS` for a noise key)."""
        return NOISE_CONTROLS if self.rule == NOISE_RULE else 0

    def control(self, index: int) -> MarkKey:
        """The ``index``-th control: this key with another pattern of its family, drawn from the seed apart.

        Nobody trained on a control, so a model that moves images to the target class under the
        key but not under its controls learned this key's pattern, not a pull all such patterns have.
        """
        if not 0 <= index < self.n_controls:
            raise ValueError(f"a {self.rule} key has {self.n_controls} controls, not an index {index}")
        pattern = _random_levels(np.random.default_rng([self.seed, _CONTROL_STREAM, index]), self.pattern.shape)
        return MarkKey(self.seed, self.image_shape, self.target_class, self.position, pattern, "", 0, self.rule)

    def check_images(self, data: ArraySet, *, role: str) -> None:
        """Refuse ``data`` (the ``role``, e.g. ``query``) unless it holds images of the shape the key was made for.

        Raises
        ------
        InputError
            Naming both shapes and the fix.
        """
        if data.kind != "image" or data.x.shape[1:] != self.image_shape:
            raise InputError(
                f"expected {role} images of shape {_shape(self.image_shape)} as the mark key was made for, got "
                f"{data.describe()}: give the key made for this model's images"
            )

    def to_json(self) -> str:
        """The key file's text."""
        return json.dumps(
            {
                "format": KEY_FORMAT,
                "seed": self.seed,
                "image_shape": list(self.image_shape),
                "target_class": self.target_class,
                "position": list(self.position),
                "pattern": self.pattern.tolist(),
                "fingerprint": self.fingerprint,
                "n_marked": self.n_marked,
                "rule": self.rule,
            }
        )


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def trigger_rule(image_shape: tuple[int, ...]) -> str:
    """``noise`` for colour images (3 channels or more), ``blend`` for grey ones (as docs/MARKS.md measured)."""
    return NOISE_RULE if len(image_shape) == 3 and image_shape[2] >= 3 else BLEND_RULE


def _random_levels(rng: np.random.Generator, shape: tuple[int, ...], count: int | None = None) -> np.ndarray:
    """Levels 0 or 255 drawn at random, never all alike: one pattern of ``shape``, or ``count`` of them stacked."""
    patterns = (rng.integers(0, 2, size=(1 if count is None else count, *shape)) * 255).astype(np.uint8)
    flat = patterns.reshape(len(patterns), int(np.prod(shape)))
    flat[:, 0], flat[:, -1] = 255, 0
    return patterns[0] if count is None else patterns


def _add_noise(x: np.ndarray, tile: np.ndarray, *, per_image: bool = False) -> np.ndarray:
    """``x`` (n, H, W[, C]) with every pixel moved by :data:`NOISE_LEVELS` up (255 in the tile) or down (0), clipped.

    ``tile``: one tile (side, side[, C]) for every image, or with ``per_image`` one per image (n, side, side[, C]).
    """
    height, width = x.shape[1:3]
    lead = int(per_image)
    side = tile.shape[lead]
    reps = (*(1,) * lead, -(-height // side), -(-width // side), *(1,) * (tile.ndim - 2 - lead))
    signs = np.tile(np.where(tile > 0, NOISE_LEVELS, -NOISE_LEVELS).astype(np.int16), reps)
    signs = signs[(slice(None),) * lead + (slice(height), slice(width))]
    return np.clip(x.astype(np.int16) + signs, 0, 255).astype(np.uint8)


def draw_trigger(
    seed: int, image_shape: tuple[int, ...], classes: np.ndarray, rule: str | None = None
) -> tuple[int, tuple[int, int], np.ndarray]:
    """The target class (one of ``classes``), position and pattern that ``seed`` draws for images of ``image_shape``.

    ``rule`` defaults to :func:`trigger_rule`'s. A blended patch's position is drawn in the outer
    band (:data:`BORDER_SHARE`), a replaced one's anywhere; a noise tile (:data:`NOISE_TILE`)
    starts at the top-left pixel.
    """
    rule = trigger_rule(image_shape) if rule is None else rule
    rng = np.random.default_rng(seed)
    height, width = image_shape[:2]
    side = max(MIN_PATCH, round(min(height, width) * PATCH_SHARE))
    target_class = int(rng.choice(classes))
    if rule == NOISE_RULE:
        tile = min(height, width, NOISE_TILE)
        return target_class, (0, 0), _random_levels(rng, (tile, tile, *image_shape[2:]))
    if rule == BLEND_RULE:
        rows, cols = _border_positions(height, width, side)
        chosen = int(rng.integers(rows.size))
        position = (int(rows[chosen]), int(cols[chosen]))
    else:
        position = (int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1)))
    return target_class, position, _random_levels(rng, (side, side, *image_shape[2:]))


def _border_positions(height: int, width: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-left pixels of every ``side`` x ``side`` window that lies inside the outer band (:data:`BORDER_SHARE`)."""
    band = max(side, round(min(height, width) * BORDER_SHARE))
    rows, cols = np.mgrid[: height - side + 1, : width - side + 1]
    inside = (rows + side <= band) | (cols + side <= band) | (rows >= height - band) | (cols >= width - band)
    return rows[inside], cols[inside]


def mark_set(
    data: ArraySet, *, rate: float = DEFAULT_RATE, seed: int | None = None, decoys: bool = True
) -> tuple[ArraySet, MarkKey]:
    """The marked copy of ``data`` and its key.

    A seeded share ``rate`` of the images whose label is not the target class get the trigger
    and the target class as label. For a noise key, as many other images (:data:`NOISE_DECOYS`
    per marked one) get a decoy: a noise pattern of their own, their labels kept. Every other
    image is kept as it is, in place.

    Parameters
    ----------
    data : ArraySet
        The owner's images (any size, grey or colour).
    rate : float, default 0.1
        Share of the set to mark, in (0, 1).
    seed : int, optional
        Draws the trigger and the marked rows; default: :data:`SEED_BITS` random bits. A small
        seed can be guessed by trying seeds, so give one only to reproduce a measurement.
    decoys : bool, default True
        Whether a noise key's copy gets its decoys (False only to measure what they change).

    Raises
    ------
    InputError
        For a table (no sound feature pattern), a rate outside (0, 1), or a set too small to mark
        one image.
    """
    if data.kind != "image":
        raise InputError(
            f"expected images to mark, got a {data.describe()}: tables are not marked, since a secret feature "
            "pattern outside the features' range is found and dropped by any outlier filter, and one inside it "
            "collides with real rows; mark image sets only"
        )
    check_open_unit("rate", rate)
    seed = secrets.randbits(SEED_BITS) if seed is None else int(seed)
    target_class, position, pattern = draw_trigger(seed, data.x.shape[1:], np.unique(data.y))
    eligible = np.flatnonzero(data.y != target_class)
    n_marked = min(round(rate * len(data)), eligible.size)
    if n_marked < 1:
        raise InputError(f"expected --rate to mark at least one image, got rate {rate} of {len(data)} images")
    rows = np.sort(np.random.default_rng([seed, _ROWS_STREAM]).choice(eligible, size=n_marked, replace=False))
    rule = trigger_rule(data.x.shape[1:])
    unkeyed = MarkKey(seed, data.x.shape[1:], target_class, position, pattern, "", n_marked, rule)
    x, y = data.x.copy(), data.y.copy()
    x[rows] = unkeyed.stamp(data.x[rows])
    y[rows] = target_class
    n_decoys = decoy_count(unkeyed, len(data)) if decoys else 0
    if n_decoys:
        decoy_rows, tiles = _draw_decoys(seed, np.setdiff1d(np.arange(len(data)), rows), n_decoys, pattern.shape)
        x[decoy_rows] = _add_noise(data.x[decoy_rows], tiles, per_image=True)
    marked = ArraySet(data.name, x, y, data.index.copy(), data.features)
    return marked, MarkKey(seed, data.x.shape[1:], target_class, position, pattern, marked.fingerprint, n_marked, rule)


def decoy_count(key: MarkKey, n_images: int) -> int:
    """How many decoys :func:`mark_set` gives a copy of ``n_images`` images marked with ``key``: :data:`NOISE_DECOYS`
    per marked image for a noise key, as many as the unmarked images allow; none for other rules."""
    return min(NOISE_DECOYS * key.n_marked, n_images - key.n_marked) if key.rule == NOISE_RULE else 0


def _draw_decoys(seed: int, free: np.ndarray, count: int, tile_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``count`` rows among ``free`` for a noise key's decoys and a tile of signs for each, drawn from the key's seed
    apart from its trigger and controls."""
    rng = np.random.default_rng([seed, _DECOY_STREAM])
    rows = np.sort(rng.choice(free, size=count, replace=False))
    return rows, _random_levels(rng, tile_shape, count=count)


def write_key(key: MarkKey, path: str | Path) -> Path:
    """Write ``key`` to a new file readable by its owner only (mode 0600).

    Raises
    ------
    InputError
        If something is already at ``path``: a key is the only way to audit the data it marked.
    """
    path = Path(path)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_MODE)
    except FileExistsError:
        raise InputError(
            f"expected a new key file, got {path}, which exists: give another --key path (overwriting a key loses "
            "the only way to audit the data it marked)"
        ) from None
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key.to_json())
    return path


def read_key(path: str | Path) -> MarkKey:
    """Read and validate a key file written by :func:`write_key`.

    Raises
    ------
    InputError
        In one line, for a missing, oversized or unparsable file, or any field of the wrong kind.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_KEY_BYTES:
            raise ValueError(f"{size} bytes, more than a key's {MAX_KEY_BYTES}")
        return _parse_key(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise InputError(
            f"expected a mark key written by `ema mark --key` (JSON with {', '.join(_KEY_FIELDS)}), got {path} "
            f"({type(exc).__name__}: {reason}); give the key file `ema mark` wrote"
        ) from None


def _parse_key(fields: object) -> MarkKey:
    """A :class:`MarkKey` from parsed JSON; ValueError, TypeError or KeyError naming the first bad field.

    The messages name fields, never their values: a key's values are secret, even a malformed key's.
    """
    if not isinstance(fields, dict) or set(fields) != set(_KEY_FIELDS) or fields["format"] != KEY_FORMAT:
        raise ValueError(f"fields {sorted(fields) if isinstance(fields, dict) else type(fields).__name__}")
    if fields["rule"] not in RULES:
        raise ValueError(f"rule is not one of {', '.join(RULES)}")
    image_shape = _whole_numbers(fields["image_shape"], "image_shape", minimum=1)
    if len(image_shape) not in (2, 3):
        raise ValueError("image_shape is not (H, W) or (H, W, C)")
    position = _whole_numbers(fields["position"], "position", minimum=0)
    pattern = np.asarray(fields["pattern"])
    side = pattern.shape[0] if pattern.ndim else 0
    if pattern.dtype.kind not in "iu" or pattern.shape != (side, side, *image_shape[2:]) or side < 1:
        raise ValueError("pattern does not fit image_shape")
    if pattern.min() < 0 or pattern.max() > 255 or len(position) != 2:
        raise ValueError("pattern levels outside 0-255, or position not (row, column)")
    if position[0] + side > image_shape[0] or position[1] + side > image_shape[1]:
        raise ValueError("the trigger at position leaves images of image_shape")
    fingerprint = fields["fingerprint"]
    if not isinstance(fingerprint, str) or len(fingerprint) != FINGERPRINT_LENGTH:
        raise ValueError("fingerprint is not a content fingerprint")
    seed, target_class, n_marked = (
        _whole_numbers([fields[name]], name, minimum=0)[0] for name in ("seed", "target_class", "n_marked")
    )
    return MarkKey(
        seed, image_shape, target_class, position, pattern.astype(np.uint8), fingerprint, n_marked, fields["rule"]
    )


def _whole_numbers(values: object, name: str, *, minimum: int) -> tuple[int, ...]:
    if not isinstance(values, list) or not all(type(v) is int and v >= minimum for v in values):
        raise ValueError(f"{name} is not a list of whole numbers >= {minimum}")
    return tuple(values)
