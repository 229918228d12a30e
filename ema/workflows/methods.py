"""The audit methods ``--method`` offers, and which auditors each runs."""

#: What each --method runs; the first result gives the run's verdict.
METHOD_PLANS = {
    "ema": ("ema",),
    "ks-ratio": ("ks-ratio",),
    "both": ("ema", "ks-ratio"),
    "calibrated": ("calibrated",),
    "ema+calibrated": ("ema", "calibrated"),
}
METHODS = tuple(METHOD_PLANS)
