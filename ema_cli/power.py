"""`ema power`: how large a query set the calibrated auditor needs to tell members apart, or to certify removal."""

import json
import math

import click

from ema_cli.options import (
    allow_missing_option,
    alpha_option,
    augment_option,
    cal_seed_option,
    certify_level_option,
    k_option,
    label_column_option,
    max_query_option,
    model_option,
    progress_option,
    recipe_option,
    workflow_command,
)
from ema_cli.supplied_calibration import supplied_calibration, supplied_calibration_options

#: The least --power that --certify plans for: ``ema.stats.certify.MIN_CERTIFY_PROBABILITY``, stated here so that
#: --help imports no scipy (a test holds the two equal).
MIN_CERTIFY_POWER = 0.5
CERTIFY_POWER_RANGE = f"{MIN_CERTIFY_POWER}<=x<1"


@click.command("power")
@model_option
@click.option(
    "--power",
    "target_power",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.9,
    show_default=True,
    help=(
        "Wanted probability of calling a member set memorized; with --certify, of certifying a removed set, then "
        f"{CERTIFY_POWER_RANGE}."
    ),
)
@alpha_option
@k_option
@cal_seed_option
@recipe_option
@supplied_calibration_options
@click.option(
    "--reference",
    "reference_file",
    type=click.Path(dir_okay=False),
    help="A set file (.npz, .csv, .parquet) of data the target never saw (default: the calibration set).",
)
@click.option(
    "--certify",
    is_flag=True,
    help=(
        "Instead: the query and non-member reference sizes that certify --margin (not_memorized) with "
        "probability --power when the query was removed, from a member reference scored on the target."
    ),
)
@click.option(
    "--margin",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="With --certify: the retained share to certify.",
)
@certify_level_option
@click.option(
    "--members",
    "members_file",
    type=click.Path(dir_okay=False),
    help=(
        "A set file of samples the target was trained on (default: a workbench target's training data); the plan is "
        "then the member-reference auditor's, as `ema audit --method calibrated` runs it."
    ),
)
@click.option(
    "--max-reference",
    type=click.IntRange(min=1),
    default=None,
    help="With --certify: the most non-member samples you could gather (default: the reference's size).",
)
@click.option("--json", "as_json", is_flag=True, help="With --certify: print the plan as one JSON object.")
@augment_option(
    "both references, to plan an audit with --augment shifts (images, a member reference); with --certify the "
    "plan of the identity view alone is given too"
)
@label_column_option
@allow_missing_option
@max_query_option
@progress_option
@workflow_command
def power(
    target_power,
    certify,
    margin,
    certify_level,
    members_file,
    max_reference,
    as_json,
    calibration_model,
    calibration_members,
    calibration_nonmembers,
    **options,
):
    """The smallest |D_q| at which the calibrated auditor calls a member set memorized with the given power.

    With --certify: the |D_q| and reference size at which it certifies --margin for a removed set.
    """
    calibration = supplied_calibration(calibration_model, calibration_members, calibration_nonmembers)
    if certify and calibration is not None:
        raise click.UsageError(
            "expected --calibration-model without --certify (it plans detection by transfer when no members are "
            "known), got it with --certify, which plans from a member reference scored on the target alone"
        )
    certify_only = {"--margin": margin, "--certify-level": certify_level}
    certify_only |= {"--max-reference": max_reference, "--json": as_json or None}
    if not certify:
        given = [name for name, value in certify_only.items() if value is not None]
        if given:
            raise click.UsageError(
                f"expected {', '.join(given)} with --certify (they plan a certification), got "
                f"{'it' if len(given) == 1 else 'them'} without --certify"
            )
        _detection(target_power, members_file=members_file, calibration=calibration, **options)
    elif margin is None:
        raise click.UsageError("--certify needs --margin M, the retained share to certify (e.g. 0.3)")
    elif target_power < MIN_CERTIFY_POWER:
        raise click.UsageError(
            f"expected --power in the range {CERTIFY_POWER_RANGE} with --certify (the probability of certifying a "
            f"removed set), got {target_power:g}"
        )
    else:
        _certification(margin, target_power, certify_level, members_file, max_reference, as_json, **options)


def _detection(target_power, **options):
    from ema.workflows.power import query_size_for_power

    result = query_size_for_power(power=target_power, **options)
    if result.n_required is None:
        click.echo(f"no |D_q| up to the search limit reaches power {target_power} (reached {result.power:.3f})")
    else:
        test = (
            "the member-reference auditor's test, as an audit states it in power_retained"
            if math.isnan(result.level)
            else f"transfer route, no members known: test at the reference's {result.level:.0%} quantile"
        )
        click.echo(
            f"|D_q| >= {result.n_required} separates members from non-members at alpha {result.alpha} "
            f"with power {result.power:.3f} ({test})"
        )


def _certification(
    margin, probability, certify_level, members_file, max_reference, as_json, *, progress, k, cal_seed, **options
):
    """`ema power --certify`: the plan in words or as JSON (k and the calibration seed play no part)."""
    from dataclasses import asdict

    from ema.workflows.power import certification_plan

    plan = certification_plan(
        margin=margin,
        probability=probability,
        certify_level=certify_level,
        members_file=members_file,
        max_reference=max_reference,
        **options,
    )
    if as_json:
        click.echo(json.dumps(_finite(asdict(plan)), sort_keys=True))
        return
    click.echo(f"with the shifts ({plan.views} views), {_plan_text(plan)}" if plan.views > 1 else _plan_text(plan))
    if plan.single_view is not None:
        click.echo(f"without the shifts (the identity view alone), {_plan_text(plan.single_view)}")


def _finite(value):
    """``value`` (a plan as nested dicts) with every non-finite float as None: JSON has no NaN or infinity."""
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _plan_text(plan) -> str:
    """A certification plan in one sentence: the sizes it needs, or why the margin is unreachable."""
    from ema.workflows.power import level_text

    if plan.reachable:
        return (
            f"certifying a retained share of at most {plan.margin:g} with probability {plan.probability:g} "
            f"(one-sided {level_text(plan.certify_level)} bound) needs |D_q| >= {plan.query_size} and a non-member "
            f"reference of {plan.reference_size} ({_planned_from(plan)})"
        )
    if not plan.information_lower > 0:  # NaN or 0: no size reaches any margin
        return f"margin {plan.margin:g} is unreachable on this target: {_no_margin_reachable(plan)}"
    smallest = (  # a retained share is at most 1: a floor of 1 certifies nothing
        "no margin below 1 is reachable"
        if plan.smallest_reachable_margin >= 1
        else f"the smallest reachable margin is {plan.smallest_reachable_margin:.3g}"
    )
    return (
        f"margin {plan.margin:g} is unreachable on this target: {smallest} "
        f"(with a reference of {plan.reference_size}, an unbounded query and probability {plan.probability:g}; "
        f"{_planned_from(plan)})"
    )


def _no_margin_reachable(plan) -> str:
    """Why no margin is reachable at any size (the plan's information is 0), and what would help where anything can."""
    if math.isnan(plan.information):
        return (
            "no margin is reachable, as the references carry no information about membership: their scores did not "
            "vary, so it is not estimable; a target that scores members and non-members alike cannot be certified"
        )
    if plan.information == 0:
        return (
            "no margin is reachable, as the references carry no information about membership (estimate 0): the "
            "target scores the member and non-member references alike, so no query size certifies a margin from them"
        )
    return (
        "no margin is reachable, as the references carry no information about membership that can be relied on: "
        f"the estimate, {plan.information:.3g} per sample, has a lower bound of 0; larger --members and --reference "
        "files narrow it"
    )


def _planned_from(plan) -> str:
    """What a certification plan was solved from: the information's lower bound and estimate, or none."""
    if math.isnan(plan.information):
        return "planned with no information: the references' scores did not vary, so it is not estimable"
    return (
        f"planned from the information's lower bound {plan.information_lower:.3g} per sample; estimate "
        f"{plan.information:.3g}"
    )
