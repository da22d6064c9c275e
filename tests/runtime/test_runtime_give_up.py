"""What follows a store transfer given up past ``COSTAWARE_STORE_STALL_SECONDS``: the exit, the next push."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from costaware_runtime import (
    ContractError,
    StoreError,
    checkpoints,
    download_outputs,
    push,
    read_manifest,
    save_bytes,
)
from costaware_runtime.outputs import upload_outputs
from costaware_runtime.stores import LocalStore

#: A store whose uploads hang as boto3's do on a stalled connection: the transfer runs in a worker thread
#: that the interpreter joins at exit (concurrent.futures joins its workers, daemons or not), which never
#: ends; the caller waits on it.
STUCK_UPLOADS = """
import threading
from costaware_runtime.stores import LocalStore

def stuck_put(self, key, source, progress=None):
    worker = threading.Thread(target=threading.Event().wait, name="stuck-transfer-worker", daemon=False)
    worker.start()
    worker.join()

LocalStore.put = stuck_put
"""


#: A store whose first upload stalls past the bound (0.5 s) and then ends, the store answering again; the
#: script waits, with ``wait_for_the_given_up_transfer()``, until it has.
STALLING_ONCE_UPLOADS = """
import threading, time
from costaware_runtime.stores import LocalStore

real_put = LocalStore.put
stalled = []

def put_stalling_once(self, key, source, progress=None):
    if not stalled:
        stalled.append(key)
        time.sleep(1.5)
    real_put(self, key, source, progress)

def wait_for_the_given_up_transfer():
    deadline = time.monotonic() + 15
    while any(t.name == "costaware-store-transfer" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the given-up transfer still runs 15 s on"
        time.sleep(0.05)

LocalStore.put = put_stalling_once
"""


def run_script(
    body: str, tmp_path: Path, *, store: str = STUCK_UPLOADS, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``body`` (after ``store``'s code) in a fresh interpreter; fail if it runs 30 s."""
    script = tmp_path / "script.py"
    script.write_text(store + textwrap.dedent(body))
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        env=os.environ | {"COSTAWARE_STORE_STALL_SECONDS": "0.5", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"still running 30 s on, held by its given-up transfer:\n{out}\n{err}")
    assert time.monotonic() - started < 20
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_a_jobs_exit_preempted_after_its_own_push_gave_up_is_not_held_by_the_transfer(
    tmp_path: Path,
) -> None:
    # The job's cr.push() gave up; its exit 75 then waited on the transfer's thread (boto3's: botocore's
    # read timeout at each retry) past the grace period, until the launcher's SIGKILL.
    done = run_script(
        """
        import sys
        from pathlib import Path
        import costaware_runtime as cr

        root = Path(sys.argv[1])
        cr.save_bytes(b"state", step=1, directory=root / "ckpt")
        try:
            cr.push(root / "ckpt", str(root / "remote"))
        except cr.StoreError as e:
            print("gave up:", e, flush=True)
        cr.exit_preempted()
        """,
        tmp_path,
    )
    assert done.returncode == 75, done.stderr
    assert "gave up: the checkpoint push to" in done.stdout
    assert "has moved nothing for 0.5 s (COSTAWARE_STORE_STALL_SECONDS sets how long)" in done.stdout


def test_a_jobs_exit_preempted_after_a_given_up_push_has_finished_runs_its_finally_and_atexit(
    tmp_path: Path,
) -> None:
    # Once any transfer was given up, exit_preempted() left by os._exit, even after that transfer had
    # finished and held nothing: the job's finally blocks and atexit handlers (W&B's finish) never ran.
    done = run_script(
        """
        import atexit, sys
        from pathlib import Path
        import costaware_runtime as cr

        root = Path(sys.argv[1])
        atexit.register(print, "atexit ran", flush=True)
        cr.save_bytes(b"state", step=1, directory=root / "ckpt")
        try:
            cr.push(root / "ckpt", str(root / "remote"))
        except cr.StoreError as e:
            print("gave up:", e, flush=True)
        wait_for_the_given_up_transfer()
        cr.save_bytes(b"state", step=2, directory=root / "ckpt")
        print("pushed step", cr.push(root / "ckpt", str(root / "remote")), flush=True)
        try:
            cr.exit_preempted()
        finally:
            print("finally ran", flush=True)
        """,
        tmp_path,
        store=STALLING_ONCE_UPLOADS,
    )
    assert done.returncode == 75, done.stderr
    assert "gave up: the checkpoint push to" in done.stdout
    assert done.stdout.splitlines()[-3:] == ["pushed step 2", "finally ran", "atexit ran"]


@pytest.mark.parametrize("end", ["return 3", "raise RuntimeError('a bug after the give-up')"])
def test_the_launcher_ending_after_a_given_up_transfer_has_finished_exits_as_usual(
    end: str, tmp_path: Path
) -> None:
    # main() left by os._exit after any give-up, even once the transfer had finished: atexit handlers were
    # skipped and an error of its own lost its traceback to a bare exit 1.
    done = run_script(
        f"""
        import atexit, sys
        from costaware_runtime import _command_line, launcher
        from costaware_runtime._bounded import Transfer, run_bounded
        from costaware_runtime.errors import StoreStalledError
        from costaware_runtime.stores import LocalStore

        def attempt_after_a_give_up(argv, make_attempt):
            try:
                run_bounded(
                    lambda: LocalStore(sys.argv[1]).put("x", open(__file__, "rb")), Transfer(), 0.5,
                    "the test's upload",
                )
            except StoreStalledError:
                print("gave up", flush=True)
            wait_for_the_given_up_transfer()
            {end}

        atexit.register(print, "atexit ran", flush=True)
        _command_line.run = attempt_after_a_give_up
        sys.exit(launcher.main(["--", "true"]))
        """,
        tmp_path,
        store=STALLING_ONCE_UPLOADS,
    )
    assert done.stdout.splitlines() == ["gave up", "atexit ran"], done.stderr
    if end.startswith("return"):
        assert done.returncode == 3, done.stderr
    else:
        assert done.returncode == 1, done.stderr
        assert "Traceback" in done.stderr
        assert "RuntimeError: a bug after the give-up" in done.stderr
        assert "after giving up a store transfer" not in done.stderr


@pytest.mark.parametrize(
    ("raised", "code", "said"),
    [
        ("RuntimeError('a bug after the give-up')", 1, "RuntimeError: a bug after the give-up"),
        ("SystemExit(3)", 3, ""),
    ],
)
def test_the_launcher_failing_after_a_give_up_still_exits_at_once(
    raised: str, code: int, said: str, tmp_path: Path
) -> None:
    # main() exited at once after a give-up only where the attempt returned its code: an exception of the
    # launcher's own went on to the interpreter's exit, which joined the given-up transfer's threads.
    done = run_script(
        f"""
        import sys
        from costaware_runtime import _command_line, launcher
        from costaware_runtime._bounded import Transfer, run_bounded
        from costaware_runtime.errors import StoreStalledError
        from costaware_runtime.stores import LocalStore

        def failing_attempt(argv, make_attempt):
            try:
                run_bounded(
                    lambda: LocalStore(sys.argv[1]).put("x", None), Transfer(), 0.5, "the test's upload"
                )
            except StoreStalledError:
                pass
            raise {raised}

        _command_line.run = failing_attempt
        sys.exit(launcher.main(["--", "true"]))
        """,
        tmp_path,
    )
    assert done.returncode == code, done.stderr
    assert said in done.stderr
    if code == 1:
        assert "costaware-run failed after giving up a store transfer (exit 1)" in done.stderr


def test_a_push_after_one_that_gave_up_does_not_wait_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The given-up push held its sync's lock, and the process keeps one sync per folder and store: every
    # later push of the folder waited on it, and was given up in turn, with the store answering again.
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "0.5")
    release = threading.Event()
    real_put = LocalStore.put
    stalled: list[str] = []

    def put_stalling_once(self: LocalStore, key: str, source: BinaryIO, progress: Any = None) -> None:
        if not stalled:
            stalled.append(key)
            release.wait(30)  # a connection that hung, until the test lets it go
        real_put(self, key, source, progress)

    monkeypatch.setattr(LocalStore, "put", put_stalling_once)
    folder, remote = tmp_path / "ckpt", tmp_path / "remote"
    save_bytes(b"one", step=1, directory=folder)
    with pytest.raises(StoreError, match=r"has moved nothing for 0.5 s"):
        push(folder, str(remote))
    given_up = [thread for thread in threading.enumerate() if thread.name == "costaware-store-transfer"]

    save_bytes(b"two", step=2, directory=folder)
    started = time.monotonic()
    try:
        assert push(folder, str(remote)) == 2
        assert time.monotonic() - started < 0.5  # not the bound spent waiting on the hung push
    finally:
        release.set()
    # The hung push, let go, finishes its step 1 in a folder of its own and leaves LATEST.json at step 2.
    for thread in given_up:
        thread.join(10)
    assert stalled[0].startswith("step-1-")
    assert '"step": 2' in (remote / "LATEST.json").read_text()


def test_a_given_up_push_that_ends_behind_a_later_one_says_so_and_deletes_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The given-up push, let go after the next push of the folder had moved LATEST.json on, blamed "a
    # leftover attempt still running, or a job that did not resume": the process's own later push was ahead.
    # Its folder was no later sync's own: it stayed STALE_FOLDER_SECONDS (6 h), billed, as another writer's;
    # then until the folder's next push, which never came where the push ahead of it was the job's last.
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "0.5")
    release = threading.Event()
    real_put = LocalStore.put
    stalled: list[str] = []

    def put_stalling_once(self: LocalStore, key: str, source: BinaryIO, progress: Any = None) -> None:
        if not stalled:
            stalled.append(key)
            release.wait(30)
        real_put(self, key, source, progress)

    monkeypatch.setattr(LocalStore, "put", put_stalling_once)
    folder, remote = tmp_path / "ckpt", tmp_path / "remote"
    save_bytes(b"one", step=1, directory=folder)
    with pytest.raises(StoreError):
        push(folder, str(remote))
    given_up = [thread for thread in threading.enumerate() if thread.name == "costaware-store-transfer"]
    save_bytes(b"two", step=2, directory=folder)
    try:
        assert push(folder, str(remote)) == 2
    finally:
        release.set()
    with caplog.at_level("WARNING", logger="costaware_runtime.sync"):
        for thread in given_up:
            thread.join(10)
    late = [record.getMessage() for record in caplog.records if "finished late" in record.getMessage()]
    assert len(late) == 1, caplog.text
    step_1 = remote / stalled[0].split("/")[0]
    assert late[0] == (
        f"a push given up earlier in this process finished late: LATEST.json at {remote} names step 2, "
        f"newer, and is left so; step 1 in {step_1} is deleted, as no push will name it"
    )
    assert "this writer is behind" not in caplog.text
    assert '"step": 2' in (remote / "LATEST.json").read_text()
    # No push after it: its folder went at its end, not at the next push's prune (nor 6 h on).
    assert sorted(path.name.split("-")[1] for path in remote.glob("step-*")) == ["2"]

    save_bytes(b"three", step=3, directory=folder)
    assert push(folder, str(remote)) == 3
    # step 2 stays: LATEST.json named it until this push (a restore may be reading it).
    assert sorted(path.name.split("-")[1] for path in remote.glob("step-*")) == ["2", "3"]


def test_the_folders_of_pushes_that_failed_before_their_first_file_are_not_kept_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each such push left its folder's name in its sync's own folders (a failure) or in the set the process
    # keeps for given-up syncs (a give-up that then failed): no listing shows that folder, so no prune
    # dropped the name, one more for good at each.
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "0.3")
    real_put = LocalStore.put
    failing: list[float] = []  # how long the next put waits before it fails, once

    def put_failing_once(self: LocalStore, key: str, source: BinaryIO, progress: Any = None) -> None:
        if failing:
            time.sleep(failing.pop())
            raise StoreError(f"{key}: the store went away")
        real_put(self, key, source, progress)

    monkeypatch.setattr(LocalStore, "put", put_failing_once)
    folder, remote = tmp_path / "ckpt", tmp_path / "remote"
    uri = str(remote)
    for step, wait in enumerate([0.8, 0.8, 0.0, 0.0], start=1):
        failing.append(wait)  # after the bound: a give-up that fails later; at once: a failure
        save_bytes(f"step {step}".encode(), step=step, directory=folder)
        with pytest.raises(StoreError):
            push(folder, uri)
        for thread in threading.enumerate():
            if thread.name == "costaware-store-transfer":
                thread.join(10)
    save_bytes(b"step 5", step=5, directory=folder)
    assert push(folder, uri) == 5
    (step_5,) = (path.name for path in remote.glob("step-*"))
    assert checkpoints._syncs[uri, folder]._own == {step_5}
    assert checkpoints._given_up_folders[uri, folder] == set()


@pytest.mark.parametrize("reader", ["read_manifest", "download_outputs"])
def test_a_reader_of_the_outputs_with_a_bad_stall_bound_fails_naming_it(
    reader: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "model.bin").write_bytes(b"model")
    upload_outputs(outputs, str(tmp_path / "model"))
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "soon")
    uri = str(tmp_path / "model")
    with pytest.raises(ContractError, match="COSTAWARE_STORE_STALL_SECONDS='soon' is not a number of"):
        if reader == "read_manifest":
            read_manifest(uri)
        else:
            download_outputs(uri, tmp_path / "downloaded")
    assert not (tmp_path / "downloaded").exists()
