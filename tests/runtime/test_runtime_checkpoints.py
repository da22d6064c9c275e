"""Local checkpoints (commit, prune, bytes) and their sync with a local-folder store, in process."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from costaware_runtime import (
    CheckpointChangedError,
    ContractError,
    StoreError,
    checkpoint_folder,
    clear_checkpoints,
    commit,
    latest_step,
    load_bytes,
    prune,
    push,
    restore,
    save_bytes,
)
from costaware_runtime.checkpoints import SAVE_HISTORY, parse_marker, read_marker
from costaware_runtime.errors import StoreStalledError
from costaware_runtime.stores import LocalStore, Store
from costaware_runtime.sync import STALE_FOLDER_SECONDS, CheckpointSync


@pytest.fixture
def local(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints"


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return tmp_path / "remote"


#: When an earlier attempt wrote its checkpoint, in the tests that set the sync's clock.
EARLIER = 1_800_000_000.0


def steps_held(remote: Path) -> list[int]:
    """The steps of the remote's step folders (each push has a folder ``step-<n>-<random>`` of its own)."""
    return sorted(int(path.name.split("-")[1]) for path in remote.glob("step-*"))


def folder_of(remote: Path, step: int) -> Path:
    (folder,) = remote.glob(f"step-{step}-*")
    return folder


def test_commit_writes_the_marker_last_listing_every_file(local: Path) -> None:
    folder = checkpoint_folder(7, local)
    (folder / "model.pt").write_bytes(b"m" * 10)
    (folder / "nested").mkdir()
    (folder / "nested" / "optim.pt").write_bytes(b"o")
    (folder / ".model.pt.abc.tmp").write_bytes(b"half-written by someone")

    marker = commit(local, 7, [folder])

    data = json.loads((local / "_costaware_checkpoint.json").read_text())
    assert data["step"] == 7 and data["saved_at"] == marker.saved_at
    assert [(f["path"], f["bytes"]) for f in data["files"]] == [
        ("checkpoint-7/model.pt", 10),
        ("checkpoint-7/nested/optim.pt", 1),
    ]
    assert latest_step(local) == 7


@pytest.mark.parametrize(
    ("step", "files", "message"),
    [
        (3, ["missing.bin"], "checkpoint file 'missing.bin' does not exist in"),
        (3, ["../outside.bin"], "outside.bin' is outside"),
        (3, [], "the checkpoint of step 3 in"),
        (-1, ["present.bin"], "step=-1 is not a step number: use a whole number >= 0"),
        (True, ["present.bin"], "step=True is not a step number"),
    ],
)
def test_commit_refuses_bad_input_and_writes_nothing(
    local: Path, step: int, files: list[str], message: str
) -> None:
    local.mkdir()
    (local / "present.bin").write_bytes(b"x")
    (local.parent / "outside.bin").write_bytes(b"x")
    with pytest.raises(ContractError) as caught:
        commit(local, step, files)
    assert message in str(caught.value)
    assert not (local / "_costaware_checkpoint.json").exists()


def test_save_and_load_bytes_keep_the_two_newest(local: Path) -> None:
    assert load_bytes(directory=local) is None
    for step in (1, 2, 3):
        save_bytes(f"s{step}".encode(), step=step, directory=local)
    assert load_bytes(directory=local) == (3, b"s3")
    assert sorted(path.name for path in local.iterdir()) == [
        "_costaware_checkpoint.json",
        "checkpoint-2",
        "checkpoint-3",
    ]


def test_loading_a_name_the_checkpoint_does_not_hold_is_refused(local: Path) -> None:
    # Returning None here made a job train from step 0 although the launcher had restored a later step.
    save_bytes(b"weights", step=84, directory=local)  # the default name, state.bin
    with pytest.raises(ContractError, match=r"checkpoint step 84 in .* holds 'state.bin', not 'state.pt'"):
        load_bytes("state.pt", directory=local)
    assert load_bytes(directory=local) == (84, b"weights")


def test_prune_drops_abandoned_newer_folders(local: Path) -> None:
    save_bytes(b"a", step=5, directory=local)
    checkpoint_folder(9, local)  # a save that died before its commit
    assert [path.name for path in prune(local)] == ["checkpoint-9"]
    with pytest.raises(ValueError, match="keep=0 would delete the committed checkpoint"):
        prune(local, keep=0)


def test_the_environment_names_the_default_folder(local: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COSTAWARE_CHECKPOINT_DIR", raising=False)
    with pytest.raises(ContractError, match="COSTAWARE_CHECKPOINT_DIR is not set: run the job under"):
        latest_step()
    monkeypatch.setenv("COSTAWARE_CHECKPOINT_DIR", str(local))
    save_bytes(b"x", step=4)
    assert latest_step() == 4


def test_push_then_restore_into_an_empty_folder(local: Path, remote: Path, tmp_path: Path) -> None:
    save_bytes(b"weights", step=12, directory=local)
    assert push(local, str(remote)) == 12

    latest = json.loads((remote / "LATEST.json").read_text())
    assert (latest["step"], latest["prefix"]) == (12, folder_of(remote, 12).name)
    assert latest["files"] == [{"path": "checkpoint-12/state.bin", "bytes": 7}]
    assert (folder_of(remote, 12) / "_costaware_checkpoint.json").exists()

    fresh = tmp_path / "fresh"
    assert restore(f"file://{remote}", fresh) == 12
    assert load_bytes(directory=fresh) == (12, b"weights")
    assert restore(str(remote), fresh) == 12  # the same commit is not downloaded again


def test_push_keeps_the_new_step_and_the_one_before(local: Path, remote: Path) -> None:
    for step in (1, 2, 3):
        save_bytes(b"x", step=step, directory=local)
        push(local, str(remote))
    assert steps_held(remote) == [2, 3] and (remote / "LATEST.json").exists()


def backdate(folder: Path, when: float) -> None:
    """Set the times of ``folder`` and of everything in it to ``when``, as if last written then."""
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (when, when))


def test_a_job_that_went_back_never_deletes_the_later_steps(
    local: Path, remote: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    save_bytes(b"step 84", step=84, directory=tmp_path / "earlier attempt")
    push(tmp_path / "earlier attempt", str(remote))
    earlier = folder_of(remote, 84)
    backdate(earlier, EARLIER)
    # The next attempt started over instead of loading step 84, and pushes as it trains.
    now = EARLIER + 60.0
    sync = CheckpointSync(str(remote), local, clock=lambda: now)
    for step in (33, 65):
        save_bytes(f"step {step}".encode(), step=step, directory=local)
        sync.push_changed()
    # Its own folders go as it moves on, as usual; LATEST.json never goes back, a resume gets step 84.
    assert steps_held(remote) == [65, 84]
    assert (earlier / "checkpoint-84" / "state.bin").read_bytes() == b"step 84"
    assert json.loads((remote / "LATEST.json").read_text())["prefix"] == earlier.name
    assert "checkpoint step 33 is older than step 84" in caplog.text
    # Reaching step 84 again writes a folder of its own, never into the kept one (the two saves would mix).
    save_bytes(b"step 84 again", step=84, directory=local)
    sync.push_changed()
    again = json.loads((remote / "LATEST.json").read_text())["prefix"]
    assert again.startswith("step-84-") and again != earlier.name
    assert (remote / again / "checkpoint-84" / "state.bin").read_bytes() == b"step 84 again"
    # The earlier attempt's save is another writer's, written a minute ago: kept. The job's own step 65 goes.
    assert steps_held(remote) == [84, 84] and earlier.exists()
    # Once the job is past them, the old steps are pruned as usual, the other writer's once it is stale.
    now = EARLIER + STALE_FOLDER_SECONDS + 1
    save_bytes(b"step 90", step=90, directory=local)
    sync.push_changed()
    assert sorted(path.name for path in remote.glob("step-*")) == sorted([again, folder_of(remote, 90).name])


def test_a_leftover_writer_behind_never_moves_latest_back(
    remote: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A pod on a lost node still training pushed step 101 after the next attempt pushed step 300: the resume
    # after that restored step 101, and the 199 steps between were paid for again.
    leftover = CheckpointSync(str(remote), tmp_path / "leftover")
    attempt = CheckpointSync(str(remote), tmp_path / "attempt")
    save_bytes(b"leftover 100", step=100, directory=tmp_path / "leftover")
    leftover.push_changed()
    save_bytes(b"attempt 300", step=300, directory=tmp_path / "attempt")
    attempt.push_changed()
    save_bytes(b"leftover 101", step=101, directory=tmp_path / "leftover")
    assert leftover.push_changed() == 101
    assert json.loads((remote / "LATEST.json").read_text())["step"] == 300
    assert (
        "checkpoint step 101 is older than step 300" in caplog.text and "this writer is behind" in caplog.text
    )
    assert (
        leftover.synced is not None and leftover.synced[0] == 300
    )  # what a resume gets, as the launcher says
    assert restore(str(remote), tmp_path / "resumed") == 300
    assert load_bytes(directory=tmp_path / "resumed") == (300, b"attempt 300")
    # Its folder is pushed all the same (pruned by the usual rules), and not pushed again at each call.
    pushed = folder_of(remote, 101)
    assert (pushed / "checkpoint-101" / "state.bin").read_bytes() == b"leftover 101"
    caplog.clear()
    assert leftover.push_changed() == 101 and caplog.text == "" and folder_of(remote, 101) == pushed


class AnotherWriterBetween:
    """Wrap ``store`` so that another writer's push lands right after this writer's next pointer read."""

    def __init__(self, store: Store, push_of_another: Callable[[], object]) -> None:
        self.read_versioned = store.read_versioned
        self.push_of_another: Callable[[], object] | None = push_of_another

    def __call__(self, key: str) -> tuple[bytes, str] | None:
        current = self.read_versioned(key)
        if self.push_of_another is not None:
            push_of_another, self.push_of_another = self.push_of_another, None
            push_of_another()
        return current


def test_latest_replaced_between_the_read_and_the_write_is_read_again(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leftover = CheckpointSync(str(remote), tmp_path / "leftover")
    save_bytes(b"leftover 100", step=100, directory=tmp_path / "leftover")
    leftover.push_changed()
    save_bytes(b"attempt 300", step=300, directory=tmp_path / "attempt")
    attempt = CheckpointSync(str(remote), tmp_path / "attempt")
    save_bytes(b"leftover 101", step=101, directory=tmp_path / "leftover")
    between = AnotherWriterBetween(leftover.store, attempt.push_changed)
    monkeypatch.setattr(leftover.store, "read_versioned", between)
    leftover.push_changed()
    assert between.push_of_another is None  # the other push did land between the read and the write
    assert json.loads((remote / "LATEST.json").read_text())["step"] == 300


CAS_COUNTER = """
import sys
from pathlib import Path
from costaware_runtime.stores import LocalStore

store, adds = LocalStore(Path(sys.argv[1])), int(sys.argv[2])
for _ in range(adds):
    while True:
        current = store.read_versioned("counter")
        count = 0 if current is None else int(current[0])
        if store.put_bytes_if("counter", str(count + 1).encode(), None if current is None else current[1]):
            break
"""


def test_a_folder_stores_conditional_writes_lose_no_update(tmp_path: Path) -> None:
    # Three processes adding 1 through read, then write-if-unchanged: a write between another's check and
    # its rename was lost (the pointer of a writer ahead replaced by one behind).
    script = tmp_path / "counter.py"
    script.write_text(CAS_COUNTER)
    adders = [
        subprocess.Popen([sys.executable, str(script), str(tmp_path / "store"), "150"]) for _ in range(3)
    ]
    assert [adder.wait(timeout=120) for adder in adders] == [0, 0, 0]
    assert (tmp_path / "store" / "counter").read_bytes() == b"450"


def test_a_folder_whose_age_cannot_be_read_is_kept_and_the_push_stands(
    local: Path,
    remote: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Listing another writer's folder failed (S3 credentials that may not list unfinished uploads): the push,
    # whose LATEST.json was already written, failed with it, and was retried for nothing.
    sync = CheckpointSync(str(remote), local, clock=lambda: time.time() + STALE_FOLDER_SECONDS + 1)

    def unreadable(folder: str) -> float | None:
        raise StoreError(f"could not list {folder}: AccessDenied")

    monkeypatch.setattr(sync.store, "modified", unreadable)
    save_bytes(b"mine", step=2, directory=local)
    assert sync.push_changed() == 2
    # The other writer is behind: its step 1 is never named by LATEST.json, which this sync would prune as
    # its own (a folder the pointer names is whole), so only its age could tell whether its writer is done.
    save_bytes(b"other", step=1, directory=tmp_path / "other")
    push(tmp_path / "other", str(remote))
    save_bytes(b"mine", step=3, directory=local)
    assert sync.push_changed() == 3
    assert steps_held(remote) == [1, 2, 3] and "AccessDenied" in caplog.text


def test_the_folder_resumed_from_goes_once_a_newer_one_is_pushed_and_a_half_written_one_stays(
    local: Path, remote: Path, tmp_path: Path
) -> None:
    # The step folder an attempt resumed from, its predecessor's, stayed 6 h as another writer's (billed, and
    # a third folder where the one before the latest was promised): LATEST.json names a folder only once it
    # is whole, so no writer is still writing into it.
    save_bytes(b"earlier 1", step=1, directory=tmp_path / "earlier attempt")
    push(tmp_path / "earlier attempt", str(remote))
    resumed_from = folder_of(remote, 1)
    # A live writer's push in flight: files, no marker yet, never named by LATEST.json.
    uploading = remote / "step-2-0be5"
    (uploading / "checkpoint-2").mkdir(parents=True)
    (uploading / "checkpoint-2" / "state.bin").write_bytes(b"half")
    sync = CheckpointSync(str(remote), local)
    assert sync.restore() == 1

    save_bytes(b"mine 2", step=2, directory=local)
    sync.push_changed()
    assert resumed_from.exists()  # the folder LATEST.json named before this push: a restore may read it
    save_bytes(b"mine 3", step=3, directory=local)
    sync.push_changed()
    assert not resumed_from.exists()
    assert (uploading / "checkpoint-2" / "state.bin").read_bytes() == b"half"
    # Its own step 2, the one LATEST.json named before this push, the live writer's folder, and step 3.
    assert steps_held(remote) == [2, 2, 3]
    assert json.loads((remote / "LATEST.json").read_text())["prefix"] == folder_of(remote, 3).name


def test_the_same_step_saved_again_never_overwrites_what_latest_names(local: Path, remote: Path) -> None:
    save_bytes(b"first", step=4, directory=local)
    push(local, str(remote))
    first = json.loads((remote / "LATEST.json").read_text())["prefix"]
    save_bytes(b"second", step=4, directory=local)
    push(local, str(remote))
    prefix = json.loads((remote / "LATEST.json").read_text())["prefix"]
    assert prefix.startswith("step-4-") and prefix != first
    assert (remote / prefix / "checkpoint-4" / "state.bin").read_bytes() == b"second"
    assert (remote / first / "checkpoint-4" / "state.bin").read_bytes() == b"first"


def test_a_file_changed_after_its_commit_is_not_pushed(local: Path, remote: Path) -> None:
    path = save_bytes(b"committed", step=1, directory=local)
    path.write_bytes(b"overwritten in place")
    with pytest.raises(CheckpointChangedError, match="changed after it was committed"):
        push(local, str(remote))
    assert not (remote / "LATEST.json").exists()
    path.unlink()
    with pytest.raises(CheckpointChangedError, match="is gone: a newer save replaced it"):
        push(local, str(remote))


def test_push_without_a_checkpoint_says_so(local: Path, remote: Path) -> None:
    local.mkdir()
    with pytest.raises(ContractError, match="holds no committed checkpoint to push"):
        push(local, str(remote))


def test_a_newer_local_checkpoint_is_kept_and_pushed_next(local: Path, remote: Path) -> None:
    save_bytes(b"old", step=1, directory=local)
    push(local, str(remote))
    save_bytes(b"new", step=2, directory=local)
    sync = CheckpointSync(str(remote), local)
    assert sync.restore() == 2
    assert sync.push_changed() == 2
    assert json.loads((remote / "LATEST.json").read_text())["step"] == 2


def writers_died_before_moving_latest(remote: Path, tmp_path: Path) -> bytes:
    """Push steps 100, 200, 250 and 300 as four writers; each after the first died before moving the pointer.

    Step 250's folder then lost a file (deleted in part), step 300's never got its marker (its push was cut
    short). Returns ``LATEST.json`` as the first writer left it (step 100), which the remote holds.
    """
    for step in (100, 200, 250, 300):
        save_bytes(f"step {step}".encode(), step=step, directory=tmp_path / f"writer {step}")
        push(tmp_path / f"writer {step}", str(remote))
        if step == 100:
            pointer = (remote / "LATEST.json").read_bytes()
    (folder_of(remote, 250) / "checkpoint-250" / "state.bin").unlink()
    (folder_of(remote, 300) / "_costaware_checkpoint.json").unlink()
    (remote / "LATEST.json").write_bytes(pointer)
    return pointer


def test_a_whole_step_above_latest_is_resumed_never_a_partial_one(
    remote: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The writer of step 200 pushed its folder and its marker, then died before moving LATEST.json: the
    # resume took step 100 and the 100 steps between were trained (and paid for) again.
    writers_died_before_moving_latest(remote, tmp_path)
    fresh = tmp_path / "fresh"
    sync = CheckpointSync(str(remote), fresh)
    assert sync.restore() == 200
    assert load_bytes(directory=fresh) == (200, b"step 200")
    assert (
        f"resuming from checkpoint step 200 in {folder_of(remote, 200)}, whole (its marker lists every file, "
        f"each there), newer than step 100 that {remote}/LATEST.json names: its writer pushed the whole step"
        in caplog.text
    )
    assert "not resuming from" in caplog.text and str(folder_of(remote, 250)) in caplog.text
    # LATEST.json names it now, as its writer would have, and the same checkpoint is not uploaded again.
    latest = json.loads((remote / "LATEST.json").read_text())
    assert (latest["step"], latest["prefix"]) == (200, folder_of(remote, 200).name)
    assert sync.push_changed() == 200 and steps_held(remote) == [100, 200, 250, 300]


def test_a_whole_step_is_resumed_where_no_latest_was_ever_written(
    remote: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The first writer died between its marker and its first LATEST.json: the next attempt started over.
    writers_died_before_moving_latest(remote, tmp_path)
    (remote / "LATEST.json").unlink()
    assert restore(str(remote), tmp_path / "fresh") == 200
    assert load_bytes(directory=tmp_path / "fresh") == (200, b"step 200")
    # Deleted by hand to start over, it read as a writer's death: the warning says how to start over.
    assert (
        f"{remote}/LATEST.json is missing; to start over instead, stop every writer and call " in caplog.text
    )
    assert "costaware_runtime.clear_checkpoints" in caplog.text and "was stopped before" not in caplog.text


def test_a_job_started_over_on_purpose_clears_the_location_first(
    local: Path, remote: Path, tmp_path: Path
) -> None:
    # Without it every attempt resumed the old step 84, and the new pushes never became LATEST.json.
    save_bytes(b"old 84", step=84, directory=tmp_path / "old run")
    push(tmp_path / "old run", str(remote))
    writers_died_before_moving_latest(remote, tmp_path)  # and whole and partial steps above it
    (remote / "step-7-dead").mkdir()
    (remote / "step-7-dead" / ".state.bin.1f3a.tmp").write_bytes(b"a killed copy")
    (remote / "notes.txt").write_text("not a checkpoint")
    cleared = clear_checkpoints(f"file://{remote}")
    assert len(cleared) == 6 and sorted(path.name for path in remote.iterdir()) == ["notes.txt"]
    assert restore(str(remote), tmp_path / "fresh") is None  # the next attempt starts over
    save_bytes(b"new 33", step=33, directory=local)
    push(local, str(remote))
    assert json.loads((remote / "LATEST.json").read_text())["step"] == 33


RELATIVE = "a relative path, read against the current folder as costaware-run reads it"


@pytest.mark.parametrize(
    ("location", "message"),
    [
        # s3:// left out: read as a folder under the current one, it deleted nothing and returned [].
        (
            "bucket/runs/7/checkpoints",
            f"'bucket/runs/7/checkpoints' is not a folder (does not exist; {RELATIVE}: "
            "{tmp}/bucket/runs/7/checkpoints): no checkpoints to clear there; check the location against the "
            "job's COSTAWARE_CHECKPOINT_URI (did you mean 's3://bucket/runs/7/checkpoints'?)",
        ),
        # Not shaped like a bucket: asked whether it meant s3://./ckpts or s3://~/ckpts.
        ("./ckpts", f"'./ckpts' is not a folder (does not exist; {RELATIVE}: {{tmp}}/ckpts): no checkpoints"),
        ("~/ckpts", "'~/ckpts' is not a folder (does not exist; "),
        # A relative file: URI is refused wherever a store is opened, as a result URI's was (from 0.1.9).
        ("file:ckpts", "'file:ckpts' is a relative file: URI: give an absolute path after three slashes"),
        (
            "{tmp}/checkpoitns",
            "'{tmp}/checkpoitns' is not a folder (does not exist): no checkpoints to clear",
        ),
        ("{tmp}/notes.txt", "'{tmp}/notes.txt' is not a folder (a file): no checkpoints to clear there"),
        # An unset variable passed on: read as the current folder, whose step folders it deleted.
        ("", "'' names no location: give the job's COSTAWARE_CHECKPOINT_URI as it was set"),
        (" ", "' ' names no location"),
        # f"file://{unset}": read as the current folder too.
        ("file://", "'file://' names no location"),
        ("file:", "'file:' names no location"),
        ("file://localhost", "'file://localhost' names no location"),
    ],
)
def test_clearing_a_location_that_cannot_be_the_checkpoints_is_refused_not_an_empty_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    kept = tmp_path / "other" / "step-5-ab12"
    kept.mkdir(parents=True)
    (tmp_path / "step-3-cd").mkdir()  # the current folder's own, which an empty location deleted
    with pytest.raises(ContractError) as refused:
        clear_checkpoints(location.format(tmp=tmp_path))
    said = str(refused.value)
    assert message.format(tmp=tmp_path) in said
    assert ("s3://" in said) == location.startswith("bucket/")  # only a bucket-shaped path is asked
    assert ("'~' is not expanded" in said) == location.startswith("~")
    assert kept.is_dir() and (tmp_path / "step-3-cd").is_dir() and (tmp_path / "notes.txt").exists()


@pytest.mark.parametrize("location", ["ckstore", "./ckstore", "bucket/runs/7/checkpoints"])
def test_a_relative_location_the_launcher_pushes_to_is_cleared(
    local: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str
) -> None:
    # costaware-run reads a relative COSTAWARE_CHECKPOINT_URI against the current folder and pushes there;
    # clear_checkpoints refused it ("did you mean 's3://ckstore'?"), its own advice included.
    monkeypatch.chdir(tmp_path)
    save_bytes(b"old 84", step=84, directory=local)
    push(local, location)
    folder = tmp_path / location
    (pushed,) = folder.glob("step-84-*")
    assert clear_checkpoints(location) == [pushed.name]
    assert list(folder.iterdir()) == []


def test_a_damaged_latest_names_a_location_clear_checkpoints_takes_from_any_folder(
    local: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The advice named the relative 'ckstore' as given, which clear_checkpoints refused (and elsewhere
    # would read against another folder).
    monkeypatch.chdir(tmp_path)
    save_bytes(b"old 84", step=84, directory=local)
    push(local, "ckstore")
    (tmp_path / "ckstore" / "LATEST.json").write_text('{"step": "three"}')
    with pytest.raises(StoreError) as damaged:
        restore("ckstore", tmp_path / "fresh")
    advised = re.search(
        r"start over with costaware_runtime\.clear_checkpoints\('([^']+)'\)", str(damaged.value)
    )
    assert advised is not None, damaged.value
    assert advised.group(1) == str(tmp_path / "ckstore")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert len(clear_checkpoints(advised.group(1))) == 1
    assert list((tmp_path / "ckstore").iterdir()) == []


def test_clearing_a_folder_that_holds_no_checkpoint_returns_an_empty_list(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert clear_checkpoints(str(tmp_path)) == []
    assert (tmp_path / "notes.txt").exists()


def test_restore_without_a_remote_checkpoint_starts_fresh(local: Path, remote: Path) -> None:
    assert restore(str(remote), local) is None


def test_a_damaged_latest_is_reported(local: Path, remote: Path) -> None:
    remote.mkdir()
    (remote / "LATEST.json").write_text('{"step": "three"}')
    start_over = r"restore it, or start over with costaware_runtime\.clear_checkpoints"
    with pytest.raises(StoreError, match=rf"LATEST\.json is damaged .*: {start_over}"):
        restore(str(remote), local)


def test_a_remote_file_of_the_wrong_size_fails_the_restore(local: Path, remote: Path, tmp_path: Path) -> None:
    save_bytes(b"weights", step=1, directory=local)
    push(local, str(remote))
    (folder_of(remote, 1) / "checkpoint-1" / "state.bin").write_bytes(b"tampered with")
    fresh = tmp_path / "fresh"
    with pytest.raises(StoreError, match=r"has 13 bytes, LATEST\.json says 7"):
        restore(str(remote), fresh)
    assert latest_step(fresh) is None  # no marker vouches for what was downloaded


def test_a_remote_path_cannot_escape_the_folder(local: Path, remote: Path) -> None:
    remote.mkdir()
    latest = {"step": 1, "saved_at": "x", "prefix": "step-1", "files": [{"path": "../evil", "bytes": 1}]}
    (remote / "LATEST.json").write_text(json.dumps(latest))
    with pytest.raises(StoreError, match=r"'\.\./evil' is not a relative file path"):
        restore(str(remote), local)
    assert not (local.parent / "evil").exists()


def test_commit_records_size_and_mtime(local: Path) -> None:
    path = save_bytes(b"abc", step=1, directory=local)
    entry = json.loads((local / "_costaware_checkpoint.json").read_text())["files"][0]
    assert (entry["bytes"], entry["mtime_ns"]) == (3, path.stat().st_mtime_ns)


def test_timed_saves_reach_the_marker_latest_json_and_a_restored_folder(
    local: Path, remote: Path, tmp_path: Path
) -> None:
    # Counted from started_at (before the state was serialized), not from the write.
    save_bytes(b"a", step=1, directory=local, started_at=time.monotonic() - 2.0)
    first = read_marker(local)
    assert first is not None and len(first.save_seconds) == 1 and 2.0 <= first.save_seconds[0] < 60
    commit(local, 1, [local / "checkpoint-1"])  # not timed: the history is carried, nothing added
    assert read_marker(local).save_seconds == first.save_seconds  # type: ignore[union-attr]
    for step in range(2, SAVE_HISTORY + 4):
        (checkpoint_folder(step, local) / "f").write_bytes(b"x")
        commit(local, step, [checkpoint_folder(step, local)], save_seconds=float(step))
    marker = read_marker(local)
    assert marker is not None and marker.save_seconds == tuple(float(s) for s in range(4, SAVE_HISTORY + 4))

    push(local, str(remote))
    latest = json.loads((remote / "LATEST.json").read_text())
    assert latest["save_seconds"] == list(marker.save_seconds)
    fresh = tmp_path / "fresh"
    restore(str(remote), fresh)  # the next attempt's folder: its first save appends to the training's
    assert read_marker(fresh).save_seconds == marker.save_seconds  # type: ignore[union-attr]
    save_bytes(b"b", step=20, directory=fresh)
    after = read_marker(fresh)
    assert after is not None and after.save_seconds[:-1] == marker.save_seconds[1:]


@pytest.mark.parametrize("seconds", [-1.0, math.nan, math.inf])
def test_a_save_time_that_is_not_a_duration_is_refused_and_nothing_committed(
    local: Path, seconds: float
) -> None:
    local.mkdir()
    (local / "present.bin").write_bytes(b"x")
    with pytest.raises(ContractError, match=f"save_seconds={seconds!r} is not a duration"):
        commit(local, 3, ["present.bin"], save_seconds=seconds)
    assert not (local / "_costaware_checkpoint.json").exists()


def test_a_marker_without_save_times_reads_as_none_measured_and_a_bad_one_is_refused() -> None:
    old = {"step": 2, "saved_at": "t", "files": [{"path": "checkpoint-2/state.bin", "bytes": 1}]}
    assert parse_marker(json.dumps(old).encode(), "old").save_seconds == ()
    with pytest.raises(ContractError, match=r"bad holds save_seconds \[-3.0\]: each must be seconds >= 0"):
        parse_marker(json.dumps({**old, "save_seconds": [-3]}).encode(), "bad")


def test_a_file_named_with_a_backslash_is_refused_at_commit_not_at_every_later_read(local: Path) -> None:
    # commit() wrote a marker naming it that read_marker() then refused: every later read raised, and a
    # preemption after a real checkpoint was reported as one before any (77).
    folder = checkpoint_folder(1, local)
    (folder / "a\\b.bin").write_bytes(b"x")
    with pytest.raises(
        ContractError, match=r"checkpoint file '.*a\\\\b\.bin' cannot be committed: .*rename it"
    ):
        commit(local, 1, [folder])
    assert read_marker(local) is None
    # A marker that names one anyway (written by hand, or by an older runtime) is named when read.
    bad = {"step": 2, "saved_at": "t", "files": [{"path": "checkpoint-2/a\\b.bin", "bytes": 1}]}
    with pytest.raises(ContractError, match=r"^marker.json is not a checkpoint marker \(ContractError"):
        parse_marker(json.dumps(bad).encode(), "marker.json")


def test_a_relative_checkpoint_folder_saves_and_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # save_bytes(..., directory="ckpt") (or COSTAWARE_CHECKPOINT_DIR=ckpt, a local try) failed: "checkpoint
    # file 'ckpt/checkpoint-1/state.bin' does not exist in .../ckpt", the path joined onto the folder twice.
    from costaware_runtime import load_bytes, save_bytes

    monkeypatch.chdir(tmp_path)
    save_bytes(b"weights", step=1, directory="ckpt")
    assert load_bytes(directory="ckpt") == (1, b"weights")
    monkeypatch.setenv("COSTAWARE_CHECKPOINT_DIR", "other")
    save_bytes(b"more", step=2)
    assert load_bytes() == (2, b"more") and (tmp_path / "other" / "checkpoint-2" / "state.bin").exists()


def test_a_marker_whose_file_did_not_come_back_whole_is_named(tmp_path: Path) -> None:
    # SageMaker syncs the folder file by file: the marker can arrive without the file it names, and the
    # load died with a FileNotFoundError traceback (exit 1, read as a code error, without a word of why).
    from costaware_runtime import ContractError, load_bytes, save_bytes

    save_bytes(b"weights" * 100, step=4, directory=tmp_path)
    state = tmp_path / "checkpoint-4" / "state.bin"
    state.write_bytes(b"weig")  # cut short
    with pytest.raises(ContractError, match=r"step 4's file 'checkpoint-4/state.bin' has 4 bytes of the 700"):
        load_bytes(directory=tmp_path)
    state.unlink()
    with pytest.raises(ContractError, match=r"'checkpoint-4/state.bin' is missing in"):
        load_bytes(directory=tmp_path)


CONCURRENT_WRITER = """
import sys
from pathlib import Path
from costaware_runtime import StoreError, save_bytes
from costaware_runtime.sync import CheckpointSync

local, remote, first, last, every = Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:])
sync = CheckpointSync(remote, local)
for step in range(first, last + 1, every):
    save_bytes(f"{local.name} {step}".encode(), step=step, directory=local)
    try:
        sync.push_changed()
    except StoreError as e:
        print(f"push of step {step} failed: {e}")
"""


def test_two_writers_at_once_never_leave_latest_naming_pruned_files(tmp_path: Path) -> None:
    # A leftover attempt and the next one (or a launcher per rank) pushing to one location: each pruned the
    # step the other had just pointed LATEST.json at, or was uploading, and a resume found its files gone;
    # and the one behind pointed LATEST.json back at its lower step.
    remote = tmp_path / "remote"
    script = tmp_path / "writer.py"
    script.write_text(CONCURRENT_WRITER)
    broken: list[str] = []
    steps_seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                raw = (remote / "LATEST.json").read_text()
            except FileNotFoundError:
                continue
            latest = json.loads(raw)
            if not steps_seen or steps_seen[-1] != latest["step"]:
                steps_seen.append(latest["step"])
            missing = [
                f["path"] for f in latest["files"] if not (remote / latest["prefix"] / f["path"]).is_file()
            ]
            with contextlib.suppress(FileNotFoundError):
                if missing and (remote / "LATEST.json").read_text() == raw:  # still the pointer: not a race
                    broken.append(f"{latest['prefix']} lacks {missing}")

    watcher = threading.Thread(target=watch)
    watcher.start()
    writers = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / name), str(remote), *map(str, steps)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, steps in (("leftover", (1, 40, 1)), ("next", (1, 40, 2)))
    ]
    failures = [writer.communicate(timeout=120)[0] for writer in writers]
    done.set()
    watcher.join()
    assert [writer.returncode for writer in writers] == [0, 0]
    assert broken == []
    assert len(steps_seen) > 1 and steps_seen == sorted(steps_seen)  # LATEST.json never went back
    assert json.loads((remote / "LATEST.json").read_text())["step"] == 40
    assert failures == ["", ""]  # neither took the other's folder from under its upload
    step = restore(str(remote), tmp_path / "resumed")
    assert step is not None and load_bytes(directory=tmp_path / "resumed") is not None


def test_a_local_store_checks_that_its_folder_can_be_written(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ContractError, match=r"a-file is a file, not a folder: give a folder's path"):
        LocalStore(tmp_path / "a-file").check()
    with pytest.raises(ContractError, match=r"deep/store is under .*a-file, a file, not a folder"):
        LocalStore(tmp_path / "a-file" / "deep" / "store").check()
    LocalStore(tmp_path / "not yet" / "made").check()  # made at the first write, not by the check
    assert not (tmp_path / "not yet").exists() and sorted(tmp_path.iterdir()) == [tmp_path / "a-file"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder whatever its mode")
def test_a_local_store_in_a_folder_it_may_not_write_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(ContractError, match=r"locked/store cannot be written: .*locked \(where"):
            LocalStore(locked / "store").check()
    finally:
        locked.chmod(0o700)


def _failing(monkeypatch: pytest.MonkeyPatch, folder: Path, name: str, code: int) -> None:
    """Make ``os.<name>`` of a path in ``folder`` fail with ``code``, as a mount's filesystem answers."""
    real = getattr(os, name)

    def fake(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).parent == folder:
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, name, fake)


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV])
def test_a_local_store_on_a_mount_that_cannot_rename_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # Mountpoint for S3 answers ENOSYS to a rename: a StoreError (exit 74, retried, each retry billed) where
    # no retry can help, since a store renames every file it writes into place.
    _failing(monkeypatch, tmp_path, "rename", code)
    with pytest.raises(ContractError) as caught:
        LocalStore(tmp_path).check()
    assert str(caught.value) == (
        f"{tmp_path} cannot be a store: {tmp_path} takes new files but refuses to rename them "
        f"({os.strerror(code)}), and a store renames and deletes files; give a folder that allows both (a "
        "Mountpoint for S3 renames no file: give the bucket's s3:// URI instead)"
    )
    assert list(tmp_path.iterdir()) == []  # the probe was deleted


def test_a_local_store_whose_check_failed_names_the_probe_it_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mount that did not answer (an I/O error) is retried, but its write check stayed there unnamed.
    _failing(monkeypatch, tmp_path, "rename", errno.EIO)
    _failing(monkeypatch, tmp_path, "unlink", errno.EIO)
    with pytest.raises(StoreError) as caught:
        LocalStore(tmp_path).check()
    (probe,) = tmp_path.iterdir()
    assert str(caught.value).startswith(f"could not rename a file in {tmp_path} for {tmp_path}: [Errno 5] ")
    assert str(caught.value).endswith(f"; its write check {str(probe)!r} stays there")


@pytest.mark.parametrize(
    ("name", "refused"),
    [("open", "refuses a new file (no write under this policy); "), ("rename", "refuses to rename them (")],
)
def test_a_refusal_with_no_errno_is_said_in_its_own_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, refused: str
) -> None:
    # A PermissionError raised by a layer above the OS (a FUSE client, a sandbox) has no errno and no
    # strerror: "refuses a new file (None)" said nothing of why.
    real = getattr(os, name)

    def fake(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).parent == tmp_path:
            raise PermissionError("no write under this policy")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, name, fake)
    with pytest.raises(ContractError) as caught:
        LocalStore(tmp_path).check()
    said = str(caught.value)
    assert refused in said and "no write under this policy" in said and "(None)" not in said
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def hung_mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder whose files cannot be opened: ``os.open`` there blocks, as on an NFS mount that stopped
    answering, until the test ends (at most 60 s: a check with no bound fails its test, not the run)."""
    folder = tmp_path / "nfs" / "ckpt"
    folder.mkdir(parents=True)
    released = threading.Event()
    real_open = os.open

    def blocking_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if Path(path).parent == folder:
            released.wait(60)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", blocking_open)
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "0.5")
    yield folder
    released.set()  # the given-up check's thread ends


@pytest.mark.timeout(30)
def test_a_local_store_on_a_hung_mount_fails_its_check_within_the_stall_bound(hung_mount: Path) -> None:
    # The S3 store's HeadBucket was bounded, the local store's write check was not: a hung NFS mount held
    # the launcher before the job started, and the machine billed, for good.
    started = time.monotonic()
    with pytest.raises(StoreStalledError) as caught:
        LocalStore(hung_mount).check()
    assert time.monotonic() - started < 10
    assert str(caught.value).startswith(
        f"the write check of {hung_mount} (a file made, renamed and deleted there) has moved nothing for "
        "0.5 s (COSTAWARE_STORE_STALL_SECONDS sets how long), begun "
    )
    assert str(caught.value).endswith(
        f"; check that the filesystem holding {hung_mount} answers (a hung NFS or other network mount): "
        "remount it, or give a folder on another filesystem"
    )


def test_only_rank_0_saves_in_a_multi_process_training(local: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every rank saving into the one folder: a rank a step behind replaced rank 0's file with its own, set
    # the marker back to its step and pruned the newer step rank 0 had committed.
    monkeypatch.setenv("RANK", "0")
    save_bytes(b"rank 0 at 1", step=1, directory=local)
    save_bytes(b"rank 0 at 2", step=2, directory=local)
    monkeypatch.setenv("RANK", "1")
    assert save_bytes(b"rank 1 at 1", step=1, directory=local) is None
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("LOCAL_RANK", "3")  # only the local one set
    assert save_bytes(b"local rank 3 at 1", step=1, directory=local) is None
    assert load_bytes(directory=local) == (2, b"rank 0 at 2")
    assert sorted(path.name for path in local.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (local / "checkpoint-1" / "state.bin").read_bytes() == b"rank 0 at 1"


@pytest.mark.parametrize(("name", "other"), [("RANK", "LOCAL_RANK"), ("LOCAL_RANK", "RANK")])
def test_rank_minus_1_is_a_single_process_that_saves(
    local: Path, monkeypatch: pytest.MonkeyPatch, name: str, other: str
) -> None:
    # Hugging Face (local_rank=-1) and older DDP scripts export -1 for "not distributed": it was refused,
    # and the job failed at its first save.
    monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "-1")
    assert save_bytes(b"single", step=1, directory=local) is not None
    assert load_bytes(directory=local) == (1, b"single")


@pytest.mark.parametrize("value", ["one", "-2", "0.5", "²"])
def test_a_rank_that_is_not_a_number_is_refused(
    local: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("RANK", value)
    with pytest.raises(
        ContractError,
        match=rf"RANK='{value}' is not a process rank: unset it, or set a whole number >= 0 \(-1 for a",
    ):
        save_bytes(b"x", step=1, directory=local)
    assert not local.exists()


@pytest.mark.parametrize("location", ["/", "//", "/.", "file:///.", "."])
def test_clearing_the_root_is_refused(location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # "$UNSET/" cleared the machine's root: its LATEST.json and step-* folders were deleted. Nothing here may
    # delete anything, whether the clear is refused or not.
    monkeypatch.chdir("/")  # "." read against it
    deleted: list[object] = []
    monkeypatch.setattr(LocalStore, "delete", lambda self, keys: deleted.append(keys))
    monkeypatch.setattr(LocalStore, "delete_folder", lambda self, folder: deleted.append(folder))
    # "." is told it is a relative path read against /, not blamed on an unset variable.
    own = "give an absolute path" if location == "." else "give a folder of its own"
    with pytest.raises(ContractError, match=rf"the root, /, of the whole machine.*{own}"):
        clear_checkpoints(location)
    assert deleted == []


def test_clearing_no_location_at_all_is_refused_as_an_empty_one() -> None:
    # os.environ.get of an unset variable: an AttributeError on None.strip said nothing of what to do.
    with pytest.raises(ContractError, match="None names no location"):
        clear_checkpoints(None)  # type: ignore[arg-type]


@pytest.fixture
def hanging_step_transfers(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Local stores whose transfers of step folders' files hang (a hung mount) until the test ends.

    At most 20 s: a push or restore that waits for them all along fails its test instead of hanging it.
    """
    release = threading.Event()
    put, download = LocalStore.put, LocalStore.download

    def hanging_put(self: LocalStore, key: str, source: Any, progress: Any = None) -> None:
        if key.startswith("step-"):
            release.wait(20)
        put(self, key, source, progress)

    def hanging_download(self: LocalStore, key: str, destination: Path, progress: Any = None) -> None:
        if key.startswith("step-"):
            release.wait(20)
        download(self, key, destination, progress)

    monkeypatch.setattr(LocalStore, "put", hanging_put)
    monkeypatch.setattr(LocalStore, "download", hanging_download)
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "0.5")
    yield release
    release.set()  # the given-up transfer's thread ends


def test_a_jobs_own_push_to_a_store_that_hangs_is_given_up(
    local: Path, remote: Path, hanging_step_transfers: threading.Event
) -> None:
    # push() a job called itself ran with no bound: a store that hung held the job, and its machine, for good.
    save_bytes(b"weights", step=3, directory=local)
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"has moved nothing for 0.5 s \(COSTAWARE_STORE_STALL_SECONDS") as e:
        push(local, str(remote))
    assert time.monotonic() - started < 10
    assert str(e.value).startswith(f"the checkpoint push to {remote} has moved nothing")
    assert not (remote / "LATEST.json").exists()


def test_a_jobs_own_restore_from_a_store_that_hangs_is_given_up(
    tmp_path: Path, local: Path, remote: Path, hanging_step_transfers: threading.Event
) -> None:
    save_bytes(b"weights", step=3, directory=tmp_path / "writer")
    hanging_step_transfers.set()  # the push goes through; the restore below hangs once released again
    push(tmp_path / "writer", str(remote))
    hanging_step_transfers.clear()
    started = time.monotonic()
    with pytest.raises(
        StoreError, match=f"the restore from {re.escape(str(remote))} has moved nothing for 0.5 s"
    ):
        restore(str(remote), local)
    assert time.monotonic() - started < 10
    assert latest_step(local) is None


def test_a_jobs_own_push_with_a_bad_stall_bound_fails_naming_it(
    local: Path, remote: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_bytes(b"weights", step=3, directory=local)
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "soon")
    with pytest.raises(
        ContractError, match="COSTAWARE_STORE_STALL_SECONDS='soon' is not a number of seconds"
    ):
        push(local, str(remote))
    assert not remote.exists()
