"""The ``ema`` MLflow evaluator given hostile or mistaken configs: it never overwrites a file, and names the bad key.

``query_file`` may point anywhere (``..`` included): whatever is there already is refused
and left byte for byte as it was, unless it holds exactly the evaluated table. Every config
error is an :class:`~ema.errors.InputError` naming the key, raised before any file is written.
"""

from __future__ import annotations

import os

import pytest
from mlflow.tracking import MlflowClient

from ema.data.files import read_set, write_set
from ema.errors import InputError
from ema.tracking import keys
from tests.workflows.conftest import trained  # noqa: F401 - the module's store with a registered target
from tests.workflows.test_evaluation import ema_evaluator, evaluate, pixel_frame, query  # noqa: F401 - fixtures

REFUSED = r"already exists and holds something other than the evaluated table; the evaluator never overwrites a file"


def folder_listing(folder) -> set[str]:
    return {entry.name for entry in folder.iterdir()}


@pytest.mark.parametrize("content", ["other bytes", "another table"])
def test_an_existing_query_file_is_refused_and_left_untouched(trained, ema_evaluator, query, tmp_path, content):  # noqa: F811
    precious = tmp_path / "precious.npz"
    if content == "other bytes":
        precious.write_bytes(b"years of work\n")
    else:
        write_set(query.take(range(10), name="other"), precious)
    before = precious.read_bytes()
    (tmp_path / "sub").mkdir()
    given = tmp_path / "sub" / ".." / "precious.npz"  # reported as the path it resolves to
    with pytest.raises(InputError, match=REFUSED) as raised:
        evaluate(pixel_frame(query), query_file=str(given))
    assert str(precious) in str(raised.value) and "\n" not in str(raised.value)
    assert precious.read_bytes() == before
    assert folder_listing(tmp_path) == {"precious.npz", "sub"}  # no partial file left behind


def test_a_link_at_query_file_is_refused_and_not_followed(trained, ema_evaluator, query, tmp_path):  # noqa: F811
    link, aimed_at = tmp_path / "query.npz", tmp_path / "elsewhere.npz"
    link.symlink_to(aimed_at)  # dangling: writing through it, or replacing it, would both be writes we refuse
    with pytest.raises(InputError, match=REFUSED):
        evaluate(pixel_frame(query), query_file=str(link))
    assert link.is_symlink() and os.readlink(link) == str(aimed_at) and not aimed_at.exists()


def test_a_bad_config_writes_no_query_file(trained, ema_evaluator, query, tmp_path):  # noqa: F811
    kept = tmp_path / "query.npz"
    with pytest.raises(InputError, match="method"):
        evaluate(pixel_frame(query), query_file=str(kept), method="bayes")
    assert folder_listing(tmp_path) == set()


def test_a_new_query_file_is_written_whole_recorded_and_reused_by_the_same_evaluation(
    trained,  # noqa: F811
    ema_evaluator,  # noqa: F811
    query,  # noqa: F811
    tmp_path,
):
    (tmp_path / "sub").mkdir()
    given, kept = str(tmp_path / "sub" / ".." / "kept.npz"), tmp_path / "kept.npz"
    first = evaluate(pixel_frame(query), query_file=given)
    assert MlflowClient().get_run(first.run_id).data.tags[keys.TAG_QUERY_FILE] == str(kept)
    assert folder_listing(tmp_path) == {"kept.npz", "sub"}  # the partial file was renamed, none is left
    assert read_set(kept).fingerprint == query.fingerprint
    assert f"--query-file {kept}" in first.artifacts[keys.ARTIFACT_REPORT].content

    before, modified = kept.read_bytes(), kept.stat().st_mtime_ns
    again = evaluate(pixel_frame(query), query_file=given)  # it holds exactly the evaluated table: used as it is
    assert kept.read_bytes() == before and kept.stat().st_mtime_ns == modified
    assert MlflowClient().get_run(again.run_id).data.tags[keys.TAG_QUERY_FILE] == str(kept)


def test_a_query_file_in_a_missing_folder_is_refused_in_one_line(trained, ema_evaluator, query, tmp_path):  # noqa: F811
    with pytest.raises(InputError, match=r"'query_file': could not write .*expected a path in an existing folder"):
        evaluate(pixel_frame(query), query_file=str(tmp_path / "missing" / "query.npz"))
    assert folder_listing(tmp_path) == set()


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            {"recipe": {"framework": "torch", "arch": "mlp"}},
            r"key 'recipe' as a file path \(str\), got dict .*: write the recipe to a JSON or YAML file and pass",
        ),
        ({"recipe": ["recipe.json"]}, r"key 'recipe' as a file path \(str\), got list"),
        ({"alpha": "0.1"}, r"key 'alpha' as a number, got str '0.1'"),
        ({"alpha": True}, r"key 'alpha' as a number, got bool"),
        ({"k": 2.5}, r"key 'k' as an integer, got float 2.5"),
        ({"strict": "no"}, r"key 'strict' as True or False, got str 'no'"),
        ({"query_file": 3}, r"key 'query_file' as a file path \(str\), got int 3"),
        ({"model_uri": ["models:/ema-target/1"]}, r"key 'model_uri' as a string, got list"),
        ({"normalize": [0.5, 0.5]}, r"key 'normalize' as a string, got list .*: give \"MEAN,STD\""),
        ({"calibration_members": {"x": 1}}, r"key 'calibration_members' as a file path"),
        ({"alhpa": 0.1}, r"unknown ema evaluator config keys \['alhpa'\]"),
    ],
)
def test_a_bad_evaluator_config_is_an_input_error_naming_the_key(trained, ema_evaluator, query, config, match):  # noqa: F811
    with pytest.raises(InputError, match=match) as raised:
        evaluate(pixel_frame(query), **config)
    assert "\n" not in str(raised.value)
