"""The job contract as the provider sees it: command, environment, locations, exit codes, the result."""

from __future__ import annotations

import math
from typing import Any

import pytest

from costaware.adapters.compute import job_contract as jc
from costaware.core.errors import ConfigurationError

OUTPUT = "s3://ml/models/_staging/train-0123456789/attempt-2/output"


def result(**changes: Any) -> dict[str, Any]:
    good: dict[str, Any] = {
        "metrics": {"rmse": 3.25, "rows": 100},
        "output_uri": OUTPUT,
        "files": 2,
        "bytes": 70,
        "attempt": 2,
        "checkpoint_step": 5,
    }
    return {**good, **changes}


def parse(data: Any) -> jc.JobResult:
    return jc.parse_result(data, job="train-0123456789-a2", where="s3://r.json", attempt=2, output_uri=OUTPUT)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("python train.py", r"must be a list of strings, got the string 'python train.py': split it, e\.g\."),
        ([], "must be a non-empty list of strings"),
        (None, "must be a non-empty list of strings"),
        (
            ["python", 3],
            r"has elements that are not non-empty strings: \[1\] 3: quote numbers \('3', not 3\)$",
        ),
        (["python", " "], r"not non-empty strings: \[1\] ' ': drop empty elements$"),
    ],
)
def test_a_command_must_be_a_list_of_strings(value: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        jc.check_command(value)


@pytest.mark.parametrize(
    ("value", "written", "said"),
    [
        # A param left empty: it said "['']; quote numbers ('3', not 3) and drop empty ones", naming
        # neither the element nor the template, and a hint about numbers where there were none.
        (
            ["/usr/bin/python", ""],
            ["/usr/bin/python", "{{ params.script }}"],
            "[1] '' rendered from '{{ params.script }}': give what it reads a value, or drop the element",
        ),
        (
            ["python", "train.py", 3, ""],
            None,
            "[2] 3; [3] '': quote numbers ('3', not 3); drop empty elements",
        ),
        (["python", None], None, "[1] None (NoneType): give each element as a string"),
        (["python", True], None, "[1] True (bool): give each element as a string"),
        (["python", ""], ["python", ""], "[1] '': drop empty elements"),  # written empty: no template
    ],
)
def test_a_bad_command_element_is_named_by_position_and_what_it_was_written_as(
    value: list[Any], written: list[Any] | None, said: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        jc.check_command(value, owner="task 'train' command", written=written)
    assert str(refused.value) == (
        f"task 'train' command {value!r} has elements that are not non-empty strings: {said}"
    ), str(refused.value)


def test_a_good_command_is_kept_as_it_is() -> None:
    assert jc.check_command(("torchrun", "--nproc-per-node", "1", "train.py")) == [
        "torchrun",
        "--nproc-per-node",
        "1",
        "train.py",
    ]


@pytest.mark.parametrize("value", [0, -1, "soon", math.inf, math.nan, None])
def test_the_grace_period_is_a_positive_number_of_seconds(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=f"preemption_grace_seconds must be .* got {value!r}"):
        jc.check_grace_seconds(value)
    assert jc.check_grace_seconds("30") == 30.0


def test_launcher_command_and_locations() -> None:
    assert jc.launcher_command(["python", "t.py"]) == ["costaware-run", "--", "python", "t.py"]
    assert jc.launcher_command(["python", "t.py"], no_sync=True)[:3] == ["costaware-run", "--no-sync", "--"]
    assert jc.builtin_command("s3://ml/spec.json", no_sync=True, python="/venv/bin/python") == [
        "costaware-run",
        "--no-sync",
        "--no-outputs",
        "--",
        "/venv/bin/python",
        "-m",
        "costaware.training.entrypoint",
        "--spec",
        "s3://ml/spec.json",
    ]
    assert jc.attempt_uris("s3://ml/models/", "train-0123456789", 2) == (
        OUTPUT,
        "s3://ml/models/_staging/train-0123456789/attempt-2/result.json",
    )
    env = jc.contract_environment(
        checkpoint_uri="s3://ml/ckpt/dag/train/run",
        output_uri=OUTPUT,
        result_uri="s3://r.json",
        attempt=2,
        market="spot",
        grace_seconds=110.0,
        work_dir="/tmp/costaware/",
        checkpoint_every_seconds=657.0,
    )
    assert env == {
        "COSTAWARE_CHECKPOINT_DIR": "/tmp/costaware/checkpoints",
        "COSTAWARE_CHECKPOINT_URI": "s3://ml/ckpt/dag/train/run",
        "COSTAWARE_OUTPUT_DIR": "/tmp/costaware/output",
        "COSTAWARE_OUTPUT_URI": OUTPUT,
        "COSTAWARE_METRICS_PATH": "/tmp/costaware/metrics.json",
        "COSTAWARE_RESULT_URI": "s3://r.json",
        "COSTAWARE_ATTEMPT": "2",
        "COSTAWARE_MARKET": "spot",
        "COSTAWARE_GRACE_SECONDS": "110",
        "COSTAWARE_CHECKPOINT_EVERY_SECONDS": "657",
    }


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (1, "the command exited 1: a code error, not retried"),
        (2, "broke the contract"),
        (76, "exited 75 (preempted) without a notice and without a committed checkpoint"),
        (127, "a program was not found (exit 127): costaware-run itself (install costaware-runtime"),
        # It had the exit-127 hint's old words: "check its first element and the image".
        (126, "the command was found but could not run (exit 126): make it executable in the image"),
        (137, "killed by signal 9"),
        (None, ""),
    ],
)
def test_exit_hints(code: int | None, hint: str) -> None:
    assert hint in jc.exit_hint(code)


@pytest.mark.parametrize(
    ("reason", "hint"),
    [
        # The launcher's own line: it ran, and the program the command names is missing.
        (
            "costaware-run: command not found: trian.py",
            "costaware-run started, and a program the command needs was not found (exit 127): install it",
        ),
        ("costaware-run: the interpreter of ./train.py was not found", "costaware-run started"),
        # The image has no launcher: the hint said to check the command's first element, which never ran.
        ("sh: 1: costaware-run: not found", "costaware-run itself was not found in the image (exit 127)"),
        ("bash: line 1: costaware-run: command not found", "costaware-run itself was not found in the image"),
        (
            'exec: "costaware-run": executable file not found in $PATH',
            "costaware-run itself was not found in the image (exit 127), so the command never started: "
            "install costaware-runtime in the image",
        ),
    ],
)
def test_exit_127_says_which_program_was_not_found(reason: str, hint: str) -> None:
    assert hint in jc.exit_hint(127, reason)


def test_a_good_result_is_parsed() -> None:
    parsed = parse(result(output_uri=OUTPUT + "/"))
    assert parsed.metrics == {"rmse": 3.25, "rows": 100}
    assert (parsed.files, parsed.bytes, parsed.attempt, parsed.checkpoint_step) == (2, 70, 2, 5)
    assert parse(result(checkpoint_step=None)).checkpoint_step is None
    assert parsed.warnings == ()  # an older launcher writes none
    assert parse(result(warnings=["the job ran 20 s without committing"])).warnings == (
        "the job ran 20 s without committing",
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "holds a list, not a JSON object"),
        (result(metrics={}), "has no metrics"),
        (result(metrics=None), "has no metrics"),
        (result(metrics={"rmse": "3.2"}), "has metric 'rmse' = '3.2', not a named finite number"),
        (result(metrics={"rmse": math.nan}), "has metric 'rmse' = nan"),
        (result(metrics={"ok": True}), "has metric 'ok' = True"),
        # JSON holds ints past a float's range: refused by name, not an OverflowError's traceback
        (result(metrics={"rmse": 10**400}), "has metric 'rmse' = an int of 401 digits, not a named finite"),
        (result(metrics={"rmse": -(10**400)}), "has metric 'rmse' = an int of 401 digits"),
        (
            result(output_uri="s3://elsewhere/out"),
            "names output_uri 's3://elsewhere/out', not this attempt's",
        ),
        (result(files=0), "lists no output files"),
        (result(files="2"), "has files = '2', not a whole number"),
        (result(bytes=-1), "has bytes = -1"),
        (result(attempt=1), "was written by attempt 1, not by attempt 2"),
        (result(checkpoint_step=-3), "has checkpoint_step = -3"),
        (result(warnings="careful"), "has warnings = 'careful', not a list of texts"),
    ],
)
def test_a_malformed_result_names_the_job_the_field_and_what_to_do(data: Any, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse(data)
    text = str(raised.value)
    assert message in text
    assert "result 's3://r.json' of training job 'train-0123456789-a2'" in text
    assert "run the command under costaware-run" in text
    assert text.endswith("; nothing was registered")  # as a missing result or one that is not JSON says


def test_the_provider_and_the_runtime_agree_on_the_contract() -> None:
    """The provider mirrors the runtime's names and codes without importing it; they must not drift."""
    runtime = pytest.importorskip("costaware_runtime.contract")
    for name in (
        "CHECKPOINT_DIR",
        "CHECKPOINT_URI",
        "OUTPUT_DIR",
        "OUTPUT_URI",
        "METRICS_PATH",
        "RESULT_URI",
        "ATTEMPT",
        "MARKET",
        "GRACE_SECONDS",
        "S3_ENDPOINT_URL",
        "EXIT_OK",
        "EXIT_CONTRACT_ERROR",
        "EXIT_SYNC_FAILED",
        "EXIT_PREEMPTED",
        "EXIT_PREEMPTED_WITHOUT_CHECKPOINT",
        "EXIT_PREEMPTED_BEFORE_CHECKPOINT",
        "DEFAULT_GRACE_SECONDS",
        "MANIFEST_NAME",
    ):
        assert getattr(jc, name) == getattr(runtime, name), name
    from costaware.adapters.model_files import MANIFEST_NAME

    assert MANIFEST_NAME == runtime.MANIFEST_NAME
