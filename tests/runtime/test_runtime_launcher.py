"""costaware-run for real: a subprocess running small job scripts against local-folder stores."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from costaware_runtime._files import temp_sibling
from runtime_jobs import RESUMING_JOB, Job, MakeJob, backdate


def seen(job: Job, attempt: int) -> dict[str, object]:
    found: dict[str, object] = json.loads((job.root / f"seen-{attempt}.json").read_text())
    return found


def remote_steps(job: Job) -> list[int]:
    return sorted(int(path.name.split("-")[1]) for path in job.remote.glob("step-*"))


def test_preempted_attempt_resumes_and_the_next_uploads_the_model(make_job: MakeJob) -> None:
    job = make_job(RESUMING_JOB)

    # The pushes' timing made explicit, as it was left to the machine's load: the first attempt's watcher
    # never looks (its one push is the launcher's on exit), the second's pushes step 4 before step 5 is saved.
    first = job.run("--poll-seconds", "3600", env=job.env(attempt=1, STOP_AT="3"))
    assert first.returncode == 75, first.stderr
    assert "preempted (job exit 75) after checkpoint step 3" in first.stderr
    assert job.latest()["step"] == 3 and remote_steps(job) == [3]
    assert not job.outputs.exists() and not job.result.exists()

    second = job.run("--poll-seconds", "0.05", env=job.env(attempt=2, PUSHED_BEFORE_NEXT="4"))
    assert second.returncode == 0, second.stderr
    resumed = seen(job, 2)
    assert (resumed["attempt"], resumed["market"], resumed["start"]) == (2, "spot", 3)
    assert resumed["state"] == "state after 3"
    result = json.loads(job.result.read_text())
    assert result == {
        "metrics": {"rmse": 3.25, "rows": 100},
        "output_uri": str(job.outputs),
        "files": 2,
        "bytes": 7,
        "attempt": 2,
        "checkpoint_step": 5,
        "warnings": [],
    }
    manifest = json.loads((job.outputs / "_costaware_manifest.json").read_text())
    assert [(f["path"], f["bytes"]) for f in manifest["files"]] == [("model.bin", 5), ("sub/config.json", 2)]
    assert manifest["files"][0]["sha256"] == hashlib.sha256(b"model").hexdigest()
    assert manifest["metrics"] == {"rmse": 3.25, "rows": 100} and manifest["checkpoint_step"] == 5
    # The newest step is LATEST, and only the one before it is kept: step 3, the first attempt's, which
    # LATEST.json named when this attempt resumed, is pruned as this attempt's own once it pushed a newer one.
    assert job.latest()["step"] == 5
    assert remote_steps(job) == [4, 5]
    assert (job.pushed(5) / "checkpoint-5" / "state.bin").read_bytes() == b"state after 5"


def test_a_push_killed_mid_copy_leaves_no_temporary_file_behind_once_its_step_is_pruned(
    make_job: MakeJob,
) -> None:
    # A launcher killed while copying a step to a folder store left the copy's temporary file there: no key
    # named it, so no prune deleted it or its folder, a checkpoint's size per kill, for good.
    job = make_job(RESUMING_JOB)
    first = job.run(env=job.env(attempt=1, STOP_AT="2"))
    assert first.returncode == 75, first.stderr
    # What a SIGKILL in the middle of the first file of step 3's push leaves (stores.LocalStore.put), long
    # enough ago for the next attempt to take the folder for a dead writer's.
    killed_step = job.remote / "step-3-5eed"
    killed = temp_sibling(killed_step / "checkpoint-3" / "state.bin")
    killed.parent.mkdir(parents=True)
    killed.write_bytes(b"half a state")
    backdate(killed_step)

    second = job.run(env=job.env(attempt=2))
    assert second.returncode == 0, second.stderr
    assert job.latest()["step"] == 5
    assert not [path.relative_to(job.remote) for path in job.remote.rglob("*.tmp")]
    # The killed push's folder, not "no step 3": a push of the second attempt's own step 3 (its watcher
    # running between the saves of steps 3 and 4, as on a loaded machine) is kept, as the step before 5.
    assert not killed_step.exists()


def test_a_checkpoint_folder_another_jobs_sync_left_is_refused_not_resumed_from(make_job: MakeJob) -> None:
    # Two jobs given one checkpoint folder: the second resumed from the first one's weights and pushed them
    # into its own store as its own, saying only "starting from checkpoint step 2".
    job = make_job(RESUMING_JOB)
    first = job.run(env=job.env(attempt=1, STOP_AT="2"))
    assert first.returncode == 75, first.stderr
    other_store = job.root / "another-jobs-checkpoints"

    other = job.run(env=job.env(attempt=1, COSTAWARE_CHECKPOINT_URI=str(other_store)))
    assert other.returncode == 2, other.stderr
    folder = job.env()["COSTAWARE_CHECKPOINT_DIR"]
    assert (
        f"{folder} holds checkpoint step 2 of {job.remote}, not of {other_store}: another job's or run's"
    ) in other.stderr
    assert seen(job, 1)["start"] == 0  # still the first job's: the other one never started
    assert not other_store.exists()

    # The same job, its store spelt another way, resumes as before.
    same = job.run(env=job.env(attempt=2, COSTAWARE_CHECKPOINT_URI=f"file://{job.remote}/"))
    assert same.returncode == 0, same.stderr
    assert seen(job, 2)["start"] == 2


PREEMPTIBLE_JOB = """
cr.preemption_requested()
step = cr.latest_step() or 0
READY.touch()
while not cr.preemption_requested():
    step += 1
    time.sleep(0.005)
cr.save_bytes(str(step).encode(), step=step)
(READY.parent / "saved").write_text(str(step))
cr.exit_preempted()
"""


def test_sigterm_reaches_the_job_which_saves_and_exits_75(make_job: MakeJob) -> None:
    job = make_job(PREEMPTIBLE_JOB)
    code, stderr = job.preempt(job.start())
    assert code == 75, stderr
    assert "preemption notice: passing SIGTERM on" in stderr
    step = int((job.root / "saved").read_text())
    assert job.latest()["step"] == step
    assert (job.pushed(step) / f"checkpoint-{step}" / "state.bin").read_text() == str(step)


def test_a_hang_up_is_a_preemption_notice(make_job: MakeJob) -> None:
    # SIGHUP (the terminal or ssh session gone) ended the launcher and left its job running on alone.
    job = make_job(PREEMPTIBLE_JOB)
    code, stderr = job.preempt(job.start(), signals=(signal.SIGHUP,))
    assert code == 75, stderr
    assert "hang-up (SIGHUP): taken as a preemption notice" in stderr
    assert job.latest()["step"] == int((job.root / "saved").read_text())


def pid_gone(pid: int, within: float = 10) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_the_job_dies_with_a_launcher_killed_outright(make_job: MakeJob) -> None:
    # SIGKILL (or the OOM killer) on the launcher left its job training on, unwatched and never pushed.
    job = make_job("""
(READY.parent / "job-pid").write_text(str(os.getpid()))
READY.touch()
time.sleep(60)
""")
    launcher = job.start()
    job.wait_ready(launcher)
    pid = int((job.root / "job-pid").read_text())
    launcher.kill()
    launcher.communicate(timeout=30)
    try:
        assert pid_gone(pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("own_session", [False, True], ids=["in-its-group", "in-a-session-of-its-own"])
def test_what_the_job_left_behind_is_ended_before_the_upload(make_job: MakeJob, own_session: bool) -> None:
    # A helper the job started and never stopped ran on after the attempt, into the next one's machine time;
    # one in a session of its own (as torchrun starts its ranks, or a daemon) was not reached at all.
    job = make_job(
        """
import subprocess
helper = subprocess.Popen([sys.executable, "-c", '''
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path(sys.argv[1]).touch(), sys.exit(0)))
pathlib.Path(sys.argv[2]).touch()
time.sleep(60)
''', str(READY.parent / "helper-got-sigterm"), str(READY.parent / "helper-up")],
    start_new_session=OWN_SESSION, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
(READY.parent / "helper-pid").write_text(str(helper.pid))
while not (READY.parent / "helper-up").exists():
    time.sleep(0.01)
(cr.output_dir() / "model.bin").write_bytes(b"model")
cr.write_metrics({"rmse": 1.0})
""".replace("OWN_SESSION", str(own_session))
    )
    done = job.run()
    pid = int((job.root / "helper-pid").read_text())
    try:
        assert done.returncode == 0, done.stderr
        assert (job.root / "helper-got-sigterm").exists() and pid_gone(pid, within=5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_child_the_launcher_starts_itself_is_not_the_jobs() -> None:
    # boto3's credential_process runs a child from the launcher's sync thread: counted as the job's (every
    # child of the launcher's but the ones from before the job), it was reaped before boto3 waited on it,
    # which then read exit 0 for a failed helper, and was signalled with the job.
    from costaware_runtime import _tree

    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the launcher's group
    failed_helper = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    try:
        while Path(f"/proc/{failed_helper.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        found = _tree.left_behind(job.pid, spared=())
        assert job.pid in found and helper.pid not in found
        _tree.reap(spared={job.pid})
        assert failed_helper.wait(timeout=10) == 3
    finally:
        for process in (job, helper):
            process.kill()
            process.wait()


# The job starts a "rank" in a session of its own, as torchrun does (its process group is not the job's),
# which notes its pid, ignores SIGTERM (a rank stuck in a collective) and would train on for a minute.
SESSION_RANK_JOB = """
import subprocess
rank = subprocess.Popen([sys.executable, "-c", '''
import os, pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
time.sleep(60)
''', str(READY.parent / "rank-pid")],
    start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not (READY.parent / "rank-pid").exists():
    time.sleep(0.01)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("how", ["grace-period-ends", "job-killed-outright"])
def test_a_process_the_job_started_in_a_session_of_its_own_ends_with_the_attempt(
    make_job: MakeJob, how: str
) -> None:
    # torchrun starts each rank in a session of its own: SIGKILL of torchrun's process group (the grace period
    # over) or torchrun killed outright (the OOM killer) left the ranks training on, unwatched and unbilled.
    ending = {
        "grace-period-ends": "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nREADY.touch()\ntime.sleep(60)",
        "job-killed-outright": "os.kill(os.getpid(), signal.SIGKILL)",
    }[how]
    job = make_job(SESSION_RANK_JOB + ending + "\n")
    launcher = job.start("--grace-seconds", "0.5")
    try:
        if how == "grace-period-ends":
            code, stderr = job.preempt(launcher)
            assert code == 77, stderr
        else:
            _, stderr = launcher.communicate(timeout=60)
            assert launcher.returncode == 137, stderr
        pid = int((job.root / "rank-pid").read_text())
        assert pid_gone(pid, within=2), f"rank {pid} outlived the launcher:\n{stderr}"
    finally:
        with contextlib.suppress(ProcessLookupError, FileNotFoundError, ValueError):
            os.kill(int((job.root / "rank-pid").read_text()), signal.SIGKILL)


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Job], int]]:
    """Run ``costaware-run`` in this process (to reach into its start-up), its signal handlers put back."""
    from costaware_runtime.launcher import main

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    # Where the launcher installs none in time, a notice lands here instead of ending pytest.
    signal.signal(signal.SIGTERM, lambda *_: None)
    logger = logging.getLogger("costaware_runtime")
    handlers_before = list(logger.handlers)

    def run(job: Job) -> int:
        monkeypatch.delenv("COSTAWARE_LAUNCHED", raising=False)
        for name, value in job.env().items():
            monkeypatch.setenv(name, value)
        return main(["--", sys.executable, str(job.script)])

    yield run
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    logger.handlers[:] = handlers_before


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_a_launcher_run_in_a_process_that_lives_on_leaves_it_no_subreaper(
    make_job: MakeJob, in_process: Callable[[Job], int]
) -> None:
    # The launcher adopts the job's orphans while it runs; a process that lives on would adopt every orphan.
    import ctypes

    job = make_job("""
(cr.output_dir() / "model.bin").write_bytes(b"model")
cr.write_metrics({"rmse": 1.0})
""")
    assert in_process(job) == 0
    subreaper = ctypes.c_int(-1)
    assert ctypes.CDLL(None).prctl(37, ctypes.byref(subreaper), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
    assert subreaper.value == 0


def test_a_notice_while_the_launcher_checks_its_stores_is_kept_and_the_job_not_started(
    make_job: MakeJob, in_process: Callable[[Job], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The handlers came only after the store checks (seconds): a SIGTERM then was lost where the launcher is
    # PID 1, so the job started on a machine about to go, and killed the launcher (143) elsewhere.
    from costaware_runtime.stores import LocalStore

    monkeypatch.setattr(LocalStore, "check", lambda store: os.kill(os.getpid(), signal.SIGTERM))
    job = make_job(RESUMING_JOB)
    assert in_process(job) == 77
    assert not (job.root / "seen-1.json").exists()


def test_a_notice_after_the_job_exited_is_not_passed_to_its_old_pid(
    make_job: MakeJob, in_process: Callable[[Job], int], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # It went to the reaped PID (perhaps another process's by then), with "SIGKILL in 110s" that never came.
    from costaware_runtime import launcher

    upload, kill = launcher.upload_outputs, os.kill
    sent: list[tuple[int, int]] = []

    def notice_then_upload(*args: Any, **kwargs: Any) -> Any:
        kill(os.getpid(), signal.SIGTERM)
        return upload(*args, **kwargs)

    def note_kill(pid: int, signum: int) -> None:
        sent.append((pid, signum))
        kill(pid, signum)

    monkeypatch.setattr(launcher, "upload_outputs", notice_then_upload)
    monkeypatch.setattr(os, "kill", note_kill)
    job = make_job(RESUMING_JOB)
    assert in_process(job) == 0
    stderr = capsys.readouterr().err
    assert "preemption notice after the job exited: finishing" in stderr
    assert "passing SIGTERM on" not in stderr and sent == []


def test_a_notice_after_the_job_failed_keeps_its_exit_code(
    make_job: MakeJob, in_process: Callable[[Job], int], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # A code error read as "preempted before any checkpoint" (77) was retried and paid again.
    from costaware_runtime import launcher

    end_job, kill = launcher.end_job, os.kill

    def notice_then_end_job(*args: Any, **kwargs: Any) -> Any:
        kill(os.getpid(), signal.SIGTERM)
        return end_job(*args, **kwargs)

    monkeypatch.setattr(launcher, "end_job", notice_then_end_job)
    job = make_job("raise SystemExit(1)")
    assert in_process(job) == 1
    stderr = capsys.readouterr().err
    assert "preemption notice after the job exited: finishing" in stderr and "preempted" not in stderr


def test_ctrl_c_is_a_preemption_notice_and_a_second_one_kills_the_job(make_job: MakeJob) -> None:
    job = make_job(PREEMPTIBLE_JOB)
    code, stderr = job.preempt(job.start(), signals=(signal.SIGINT,))
    assert code == 75, stderr
    assert "interrupted (Ctrl-C): taken as a preemption notice" in stderr
    assert job.latest()["step"] == int((job.root / "saved").read_text())

    # A job that notes the notice and goes on: the second Ctrl-C is sent once the first has reached it.
    stubborn = make_job("""
signal.signal(signal.SIGTERM, lambda *_: (READY.parent / "noticed").touch())
READY.touch()
time.sleep(60)
""")
    launcher = stubborn.start()
    started = time.monotonic()
    stubborn.wait_ready(launcher)
    launcher.send_signal(signal.SIGINT)
    while not (stubborn.root / "noticed").exists():
        assert time.monotonic() - started < 30, "the notice never reached the job"
        time.sleep(0.02)
    launcher.send_signal(signal.SIGINT)
    _, stderr = launcher.communicate(timeout=30)
    # Killed; the first job's checkpoint (the same folders) is there to resume from.
    assert launcher.returncode == 75, stderr
    assert "interrupted again: SIGKILL now" in stderr and "did not exit within" not in stderr
    assert time.monotonic() - started < 30  # not the 110 s grace period


@pytest.mark.parametrize(
    ("commit_first", "expected", "message"),
    [
        (False, 77, "preempted (job killed by SIGTERM) before any checkpoint: the next attempt starts over"),
        (True, 75, "preempted (job killed by SIGTERM) after checkpoint step 1"),
    ],
)
def test_a_job_killed_by_the_notice_is_preempted_if_it_has_a_checkpoint(
    make_job: MakeJob, commit_first: bool, expected: int, message: str
) -> None:
    job = make_job(f"""
if {commit_first}:
    cr.save_bytes(b"early", step=1)
READY.touch()
time.sleep(60)  # no handler: SIGTERM ends the process
""")
    code, stderr = job.preempt(job.start())
    assert code == expected, stderr
    assert message in stderr
    if commit_first:
        assert job.latest()["step"] == 1
    else:
        assert not job.remote.exists()
    # A job still importing its libraries has not called preemption_requested() yet: what happened is said.
    came = re.search(r"the notice came (\d+\.\d) s after the job started, while the job had no", stderr)
    assert came is not None, stderr
    assert 0 <= float(came[1]) < 30
    assert (
        " handler for SIGTERM, which therefore ended it at once (nothing saved on the notice): to save a "
        "checkpoint and exit 75 on a notice, call costaware_runtime.preemption_requested() first thing "
        "at the job's start, before slow imports"
    ) in stderr


def test_a_job_whose_own_handler_ends_it_by_sigterm_is_not_said_to_have_had_none(make_job: MakeJob) -> None:
    # A framework's handler that saves, then ends its process by the signal's default action (SIG_DFL and
    # SIGTERM again): it had a handler when the notice came, which the launcher must not deny.
    job = make_job("""
def save_and_die(signum, frame):
    cr.save_bytes(b"on the notice", step=1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)

signal.signal(signal.SIGTERM, save_and_die)
READY.touch()
time.sleep(60)
""")
    code, stderr = job.preempt(job.start())
    assert code == 75, stderr
    assert "preempted (job killed by SIGTERM) after checkpoint step 1" in stderr
    assert "had no handler" not in stderr


SAVES_ON_THE_NOTICE = """
def save_and_exit(signum, frame):
    cr.save_bytes(b"on the notice", step=1)
    cr.exit_preempted()

signal.signal(signal.SIGTERM, save_and_exit)
READY.touch()
time.sleep(60)
"""


def start_under_a_shell(job: Job, *options: str) -> subprocess.Popen[str]:
    """The launcher running the job's script from a shell that runs more after it (so it cannot exec it)."""
    command = [sys.executable, "-m", "costaware_runtime", *options, "--"]
    command += ["sh", "-c", f"{sys.executable} {job.script}; echo done"]
    return subprocess.Popen(command, env=job.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("options", [("--signal-group",), ()], ids=["signal-group", "command-only"])
def test_a_shell_the_notice_ends_is_named_not_said_to_have_lost_the_jobs_save(
    make_job: MakeJob, options: tuple[str, ...]
) -> None:
    # The README's shell-script case: the shell has no handler and dies of the notice, the Python job under
    # it saves on it. The launcher read only the shell's signal masks and said "nothing saved on the notice",
    # telling the user to call preemption_requested(), which the job did, next to "after checkpoint step 1".
    job = make_job(SAVES_ON_THE_NOTICE)
    code, stderr = job.preempt(start_under_a_shell(job, *options))
    assert code == 75, stderr
    assert "preempted (job killed by SIGTERM) after checkpoint step 1" in stderr
    assert job.latest()["step"] == 1
    assert "nothing saved" not in stderr and "preemption_requested()" not in stderr
    shell = re.search(r"the notice ended (\S+) \(pid \d+, the command's process\) at once", stderr)
    assert shell is not None and shell[1] in ("sh", "dash", "bash", "busybox"), stderr
    late = "" if options else ", and what it started got the notice only once it was gone"
    assert (
        f"it had no handler for SIGTERM, so the rest of its script did not run{late}: exec the training "
        "process from it (sh -c 'exec python train.py'), so that it is the command's process"
    ) in stderr


@pytest.mark.parametrize("options", [("--signal-group",), ()], ids=["signal-group", "command-only"])
def test_a_job_under_a_shell_the_notice_ends_has_the_rest_of_the_grace_period_to_save(
    make_job: MakeJob, options: tuple[str, ...]
) -> None:
    # The shell has no handler and dies of the notice at once; the Python job under it saves for longer than
    # the 5 s the launcher gave what the command left behind: SIGKILLed, nothing saved, exit 77, under a
    # 20 s grace period (with --signal-group too, the README's advice for shell scripts).
    job = make_job("""
cr.preemption_requested()  # the handler goes in first
READY.touch()
while not cr.preemption_requested():
    time.sleep(0.01)
time.sleep(6.5)  # a save that takes longer than 5 s
cr.save_bytes(b"on the notice", step=1)
cr.exit_preempted()
""")
    started = time.monotonic()
    code, stderr = job.preempt(start_under_a_shell(job, "--grace-seconds", "20", *options))
    assert code == 75, stderr
    assert "preempted (job killed by SIGTERM) after checkpoint step 1" in stderr
    assert job.latest()["step"] == 1
    assert "did not exit on SIGTERM" not in stderr
    assert time.monotonic() - started < 20  # the launcher did not wait out the grace period once it saved


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_with_signal_group_a_job_under_a_shell_gets_the_notice_once(make_job: MakeJob) -> None:
    # The notice went to the whole group; once the shell had died of it, the launcher sent what the shell left
    # behind (the same group) SIGTERM again: a handler that saves on each SIGTERM started a second save.
    job = make_job("""
heard = READY.parent / "sigterms"
def count(signum, frame):
    with heard.open("a") as file:
        file.write("x")
signal.signal(signal.SIGTERM, count)
READY.touch()
while not heard.exists():
    time.sleep(0.01)
time.sleep(1.5)  # long after the shell died: what the launcher sends then is heard meanwhile
cr.save_bytes(b"on the notice", step=1)
cr.exit_preempted()
""")
    code, stderr = job.preempt(start_under_a_shell(job, "--grace-seconds", "20", "--signal-group"))
    assert code == 75, stderr
    assert (job.root / "sigterms").read_text() == "x", stderr


def test_a_notice_sent_again_after_the_first_is_not_passed_on_again(make_job: MakeJob) -> None:
    # A second SIGTERM or SIGHUP to the launcher (a supervisor's retry, a terminal gone on top of a stop) was
    # passed on too: a handler that saves on each SIGTERM started a second save.
    job = make_job("""
heard = READY.parent / "sigterms"
def count(signum, frame):
    with heard.open("a") as file:
        file.write("x")
signal.signal(signal.SIGTERM, count)
READY.touch()
while not (READY.parent / "all-sent").exists():
    time.sleep(0.01)
cr.save_bytes(b"on the notice", step=1)
cr.exit_preempted()
""")
    launcher = job.start("--grace-seconds", "30")
    job.wait_ready(launcher)
    launcher.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while not (job.root / "sigterms").exists():
        assert time.monotonic() < deadline, "the notice never reached the job"
        time.sleep(0.02)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGTERM):
        launcher.send_signal(signum)
        time.sleep(0.2)
    time.sleep(0.5)  # what the launcher passes on meanwhile is heard before the job saves
    (job.root / "all-sent").touch()
    _, stderr = launcher.communicate(timeout=30)
    assert launcher.returncode == 75, stderr
    assert (job.root / "sigterms").read_text() == "x", stderr
    # Said once, for the first of the three; the hang-up is not taken as a notice of its own.
    assert stderr.count("after the preemption notice: not passed on again") == 1, stderr
    assert "SIGTERM after the preemption notice: not passed on again, the job has the notice" in stderr
    assert "hang-up (SIGHUP)" not in stderr


def test_a_job_that_ignores_notices_sent_again_is_still_killed_at_the_end_of_the_grace_period(
    make_job: MakeJob,
) -> None:
    job = make_job("""
signal.signal(signal.SIGTERM, signal.SIG_IGN)
READY.touch()
time.sleep(60)
""")
    started = time.monotonic()
    code, stderr = job.preempt(
        job.start("--grace-seconds", "1"), signals=(signal.SIGTERM, signal.SIGTERM, signal.SIGHUP)
    )
    assert code == 77, stderr
    assert "did not exit within 1s of the notice: SIGKILL" in stderr
    assert time.monotonic() - started < 30


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_with_signal_group_a_process_started_after_the_notice_still_gets_sigterm(make_job: MakeJob) -> None:
    # Only the processes the notice reached are spared a second SIGTERM: one the job starts on the notice (an
    # uploader of its own) never had it, and is asked to exit before it is SIGKILLed.
    job = make_job("""
import subprocess
cr.preemption_requested()
READY.touch()
while not cr.preemption_requested():
    time.sleep(0.01)
up = READY.parent / "helper-up"
subprocess.Popen([sys.executable, "-c", '''
import pathlib, signal, sys, time
def heard(signum, frame):
    pathlib.Path(sys.argv[1]).write_text("x")
    sys.exit(0)
signal.signal(signal.SIGTERM, heard)
pathlib.Path(sys.argv[2]).touch()
time.sleep(60)
''', str(READY.parent / "helper-sigterm"), str(up)])
while not up.exists():
    time.sleep(0.01)
cr.save_bytes(b"on the notice", step=1)
cr.exit_preempted()
""")
    code, stderr = job.preempt(job.start("--signal-group"))
    assert code == 75, stderr
    assert (job.root / "helper-sigterm").read_text() == "x", stderr
    assert "did not exit on SIGTERM" not in stderr


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_helper_that_ignores_the_notice_is_not_waited_on_for_the_grace_period(make_job: MakeJob) -> None:
    # Only processes with a handler are taken to be saving: one that ignores SIGTERM would hold the final
    # push until the grace period ended.
    job = make_job("""
import subprocess
cr.preemption_requested()
up = READY.parent / "helper-up"
subprocess.Popen([sys.executable, "-c", '''
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path(sys.argv[1]).touch()
time.sleep(60)
''', str(up)])
while not up.exists():
    time.sleep(0.01)
cr.save_bytes(b"state", step=1)
READY.touch()
while not cr.preemption_requested():
    time.sleep(0.01)
cr.exit_preempted()
""")
    started = time.monotonic()
    code, stderr = job.preempt(job.start("--grace-seconds", "30"))
    assert code == 75, stderr
    assert "processes the job left behind did not exit on SIGTERM: SIGKILL" in stderr
    assert "saving on the notice" not in stderr
    assert time.monotonic() - started < 20, stderr


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_job_under_a_shell_that_traps_the_notice_to_exit_143_has_the_rest_of_the_grace_period(
    make_job: MakeJob,
) -> None:
    # A wrapper trapping SIGTERM to exit 143 ended by its own exit, not by the signal: its saving job got 5 s.
    job = make_job("""
cr.preemption_requested()
READY.touch()
while not cr.preemption_requested():
    time.sleep(0.01)
time.sleep(6.5)  # a save that takes longer than 5 s
cr.save_bytes(b"on the notice", step=1)
cr.exit_preempted()
""")
    command = [sys.executable, "-m", "costaware_runtime", "--grace-seconds", "20", "--"]
    command += ["sh", "-c", f'trap "exit 143" TERM; {sys.executable} {job.script} & wait']
    launcher = subprocess.Popen(
        command, env=job.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    code, stderr = job.preempt(launcher)
    assert code == 75, stderr
    assert job.latest()["step"] == 1
    assert "did not exit on SIGTERM" not in stderr


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_job_that_exits_on_the_notice_is_not_held_by_a_worker_that_inherited_its_handler(
    make_job: MakeJob,
) -> None:
    # A worker forked after the handler went in (a fork-based pool) inherits the runtime's flag-only handler
    # and never exits on SIGTERM; the job itself saved and exited 75. Taken to be saving, the worker held
    # the launcher (and the final push) until the grace period's end.
    job = make_job("""
import os
cr.preemption_requested()
if os.fork() == 0:
    while True:
        time.sleep(0.05)
cr.save_bytes(b"state", step=1)
READY.touch()
while not cr.preemption_requested():
    time.sleep(0.01)
cr.exit_preempted()
""")
    started = time.monotonic()
    code, stderr = job.preempt(job.start("--grace-seconds", "30"))
    assert code == 75, stderr
    assert "saving on the notice" not in stderr
    assert time.monotonic() - started < 20, stderr


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_shell_and_the_python_job_under_it_both_without_a_handler_are_both_said(make_job: MakeJob) -> None:
    job = make_job("""
READY.touch()
time.sleep(60)  # no handler: SIGTERM ends the process
""")
    code, stderr = job.preempt(start_under_a_shell(job, "--signal-group"))
    assert code == 77, stderr
    assert re.search(r"the notice ended \S+ \(pid \d+, the command's process\) at once", stderr), stderr
    assert (
        "while the job had no handler for SIGTERM, which therefore ended it at once (nothing saved on the "
        "notice): to save a checkpoint and exit 75 on a notice, call costaware_runtime.preemption_requested()"
    ) in stderr


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_job_without_a_handler_is_not_said_to_have_saved_nothing_when_its_group_saved(
    make_job: MakeJob,
) -> None:
    # --signal-group: the job's process has no handler, a saver it started in its group has one and commits
    # on the notice. "nothing saved on the notice" was said next to "after checkpoint step 1".
    job = make_job("""
import subprocess
saver = subprocess.Popen([sys.executable, "-c", '''
import pathlib, signal, sys, time
import costaware_runtime as cr
signal.signal(signal.SIGTERM, lambda *_: (cr.save_bytes(b"on the notice", step=1), sys.exit(0)))
pathlib.Path(sys.argv[1]).touch()
time.sleep(60)
''', str(READY.parent / "saver-up")])
while not (READY.parent / "saver-up").exists():
    time.sleep(0.01)
READY.touch()
time.sleep(60)  # no handler: SIGTERM ends the process
""")
    code, stderr = job.preempt(job.start("--signal-group"))
    assert code == 75, stderr
    assert "preempted (job killed by SIGTERM) after checkpoint step 1" in stderr
    assert job.latest()["step"] == 1
    assert "had no handler" not in stderr and "nothing saved" not in stderr


@pytest.mark.parametrize("how", ["option", "env"])
def test_a_job_that_ignores_the_notice_is_killed_after_the_grace_period(make_job: MakeJob, how: str) -> None:
    job = make_job("""
signal.signal(signal.SIGTERM, signal.SIG_IGN)
READY.touch()
time.sleep(60)
""")
    options = ("--grace-seconds", "0.5") if how == "option" else ()
    env = job.env(**({"COSTAWARE_GRACE_SECONDS": "0.5"} if how == "env" else {}))
    code, stderr = job.preempt(job.start(*options, env=env))
    assert code == 77, stderr
    assert "did not exit within 0.5s of the notice: SIGKILL" in stderr


@pytest.mark.parametrize(
    ("grace", "preset", "expected"), [("50", None, 45.0), ("0.5", None, 1.0), ("50", "7", 7.0)]
)
def test_torchrun_gives_its_ranks_most_of_the_grace_period(
    make_job: MakeJob, grace: str, preset: str | None, expected: float
) -> None:
    # torchrun SIGKILLed its ranks 30 s after the notice whatever the grace period: a 35 s save of rank 0
    # under a 110 s grace period was cut, exit 77 with nothing committed. One the image sets is kept.
    job = make_job("""
(cr.output_dir() / "model.bin").write_bytes(b"model")
cr.write_metrics({"shutdown": float(os.environ["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"])})
""")
    env = job.env(**({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": preset} if preset else {}))
    if not preset:
        env.pop("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", None)
    done = job.run("--grace-seconds", grace, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(job.result.read_text())["metrics"] == {"shutdown": expected}


def test_a_job_that_honours_the_notice_before_its_first_checkpoint_starts_over(make_job: MakeJob) -> None:
    # The docs' loop, noticed before anything was committed: exit 75 after the notice is 77 (retried, starts
    # over), not the code error 76 (before, the task failed for good). The handler goes in before READY: a
    # notice between the two killed the job with SIGTERM instead (a failure of this test under load).
    job = make_job("""
cr.preemption_requested()
READY.touch()
while not cr.preemption_requested():
    time.sleep(0.005)
cr.exit_preempted()
""")
    code, stderr = job.preempt(job.start())
    assert code == 77, stderr
    assert "preempted (job exit 75) before any checkpoint: the next attempt starts over" in stderr


# On the notice: commits step 2, then changes its file, so that the final push of it fails.
UNPUSHABLE_JOB = """
cr.preemption_requested()
READY.touch()
while not cr.preemption_requested():
    time.sleep(0.005)
cr.save_bytes(b"two", step=2)
(Path(os.environ["COSTAWARE_CHECKPOINT_DIR"]) / "checkpoint-2" / "state.bin").write_bytes(b"changed")
cr.exit_preempted()
"""


@pytest.mark.parametrize(("older_in_the_store", "expected"), [(True, 75), (False, 77)])
def test_a_final_push_that_fails_after_the_notice_is_a_preemption_not_a_store_failure(
    make_job: MakeJob, older_in_the_store: bool, expected: int
) -> None:
    # It was 74 (a store failure) even with an older checkpoint in the store to resume from, and the provider
    # takes two 74s in a row as fatal.
    if older_in_the_store:
        first = make_job(RESUMING_JOB)
        assert first.run(env=first.env(attempt=1, STOP_AT="1")).returncode == 75
    job = make_job(UNPUSHABLE_JOB)  # the same folders: attempt 2 restores step 1 where attempt 1 pushed it
    code, stderr = job.preempt(job.start("--poll-seconds", "30", env=job.env(attempt=2)))
    assert code == expected, stderr
    assert "could not push the last checkpoint" in stderr
    if older_in_the_store:
        assert "checkpoint step 2 could not be pushed; the next attempt resumes from step 1" in stderr
        assert job.latest()["step"] == 1
    else:
        assert "checkpoint step 2 could not be pushed and the store holds none" in stderr


def test_a_checkpoint_committed_just_before_a_contract_error_is_still_pushed(make_job: MakeJob) -> None:
    # The exit-2 path returned before the final push: a commit the watcher had not yet seen was lost.
    job = make_job('cr.save_bytes(b"late", step=3)\n')  # and no metrics
    done = job.run("--poll-seconds", "30")
    assert done.returncode == 2, done.stderr
    assert "the job wrote no metrics file" in done.stderr
    assert job.latest()["step"] == 3


def test_exit_75_without_a_checkpoint_is_a_code_error(make_job: MakeJob) -> None:
    job = make_job("cr.exit_preempted()\n")
    done = job.run()
    assert done.returncode == 76
    assert "exited 75, the code for 'preempted after a checkpoint', but no notice came and" in done.stderr
    assert "holds no committed checkpoint" in done.stderr


@pytest.mark.parametrize(
    ("body", "expected", "message"),
    [
        ("sys.exit(3)", 3, "the job exited 3"),
        ("sys.exit(76)", 1, "the job exited 76, a code the launcher reserves: reporting 1"),
        ("os.kill(os.getpid(), signal.SIGKILL)", 137, "the job was killed by SIGKILL"),
        # A signal Python has no name for: a ValueError traceback and exit 1 before.
        (
            "os.kill(os.getpid(), signal.SIGRTMIN + 1)",
            128 + signal.SIGRTMIN + 1,
            f"the job was killed by signal {signal.SIGRTMIN + 1}",
        ),
    ],
)
def test_other_failures_pass_through_and_keep_the_checkpoint(
    make_job: MakeJob, body: str, expected: int, message: str
) -> None:
    job = make_job(f'cr.save_bytes(b"partial", step=2)\n{body}\n')
    done = job.run()
    assert done.returncode == expected
    assert message in done.stderr
    assert job.latest()["step"] == 2  # a failed job's checkpoint is still pushed
    assert not job.outputs.exists() and not job.result.exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "the job wrote no metrics file {path}: write it with costaware_runtime.write_metrics"),
        ("{not json", "metrics file {path} is not JSON"),
        ("[1, 2]", "metrics file {path} holds a list, not a JSON object"),
        ('{"rmse": "low"}', "metrics file {path}: metric 'rmse' is 'low' (str), not a number"),
        ('{"rmse": NaN}', "metrics file {path}: metric 'rmse' is nan, not a finite number"),
        ('{"done": true}', "metrics file {path}: metric 'done' is True (bool), not a number"),
        ("{}", "metrics file {path} holds no metrics"),
    ],
)
def test_bad_metrics_fail_with_code_2_and_upload_nothing(
    make_job: MakeJob, content: str | None, problem: str
) -> None:
    job = make_job(f"""
(cr.output_dir() / "model.bin").write_bytes(b"model")
content = {content!r}
if content is not None:
    Path(os.environ["COSTAWARE_METRICS_PATH"]).write_text(content)
""")
    done = job.run()
    assert done.returncode == 2
    path = job.env()["COSTAWARE_METRICS_PATH"]
    assert problem.format(path=path) in done.stderr
    assert "nothing was uploaded" in done.stderr
    assert not job.outputs.exists() and not job.result.exists()


def test_outputs_in_a_folder_the_launcher_made_are_named_when_nothing_is_uploaded(
    make_job: MakeJob, tmp_path: Path
) -> None:
    # No COSTAWARE_OUTPUT_DIR (a run by hand): the launcher makes one under TMPDIR; before, a failed run left
    # the job's model there without a word.
    job = make_job('(cr.output_dir() / "model.bin").write_bytes(b"model")\n')
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {k: v for k, v in job.env().items() if k != "COSTAWARE_OUTPUT_DIR"}
    done = job.run(env={**env, "TMPDIR": str(scratch)})
    assert done.returncode == 2
    (made,) = scratch.glob("costaware-outputs-*")
    assert f"nothing was uploaded (the outputs stay in {made})" in done.stderr
    assert (made / "model.bin").read_bytes() == b"model"


@pytest.mark.parametrize(
    ("saves", "cleans_up", "warned"), [(False, False, True), (True, False, False), (True, True, False)]
)
def test_a_job_asked_to_checkpoint_that_never_did_is_warned_about(
    make_job: MakeJob, saves: bool, cleans_up: bool, warned: bool
) -> None:
    # A job that deletes its local checkpoints once done (as the built-in trainers do) did checkpoint: the
    # launcher pushed them while it ran.
    job = make_job(f"""
if {saves}:
    cr.save_bytes(b"state", step=1)
time.sleep(0.5)
if {cleans_up}:
    import shutil
    shutil.rmtree(os.environ["COSTAWARE_CHECKPOINT_DIR"])
(cr.output_dir() / "model.bin").write_bytes(b"model")
cr.write_metrics({{"rmse": 1.0}})
""")
    # The launcher looks for a new checkpoint to push every 0.05 s: pushed well before the job cleans up.
    done = job.run("--poll-seconds", "0.05", env={**job.env(), "COSTAWARE_CHECKPOINT_EVERY_SECONDS": "0.1"})
    assert done.returncode == 0, done.stderr
    assert bool(re.search(r"ran \d+ s without committing a checkpoint", done.stderr)) is warned
    assert ("a preemption would have restarted it from the beginning" in done.stderr) is warned
    # In the result too, for the provider's task log: the job's own log is seldom read when it succeeds.
    warnings = json.loads(job.result.read_text())["warnings"]
    assert (len(warnings) == 1 and "without committing a checkpoint" in warnings[0]) is warned
    assert warnings or not warned


@pytest.mark.parametrize(
    "drops_its_checkpoint",
    ['import shutil\nshutil.rmtree(os.environ["COSTAWARE_CHECKPOINT_DIR"])', "assert cr.retire().step == 1"],
)
def test_a_job_that_resumed_and_never_saved_again_is_warned_about(
    make_job: MakeJob, drops_its_checkpoint: str
) -> None:
    # Attempt 1 pushed step 1; attempt 2 restores it, runs on without a save and deletes its local folder
    # (or retires the restored commit, not one of its own): a preemption of attempt 2 would lose all it did,
    # however it started.
    first = make_job("""
cr.save_bytes(b"state", step=1)
time.sleep(0.5)
(cr.output_dir() / "model.bin").write_bytes(b"model")
cr.write_metrics({"rmse": 1.0})
""")
    assert first.run("--poll-seconds", "0.05").returncode == 0
    second = make_job(f"""
time.sleep(0.5)
{drops_its_checkpoint}
(cr.output_dir() / "model.bin").write_bytes(b"model")
cr.write_metrics({{"rmse": 1.0}})
""")
    done = second.run(env={**second.env(attempt=2), "COSTAWARE_CHECKPOINT_EVERY_SECONDS": "0.1"})
    assert "starting from checkpoint step 1" in done.stderr
    assert re.search(r"ran \d+ s without committing a checkpoint", done.stderr), done.stderr


def test_a_job_that_commits_and_retires_its_checkpoint_before_any_push_is_not_warned_about(
    make_job: MakeJob,
) -> None:
    # The built-in trainers commit late in a short job and delete their checkpoints at the end: the
    # launcher (polling every 30 s here) never saw the commit, but the retired marker tells it.
    job = make_job("""
time.sleep(0.5)
cr.save_bytes(b"state", step=1)
assert cr.retire().step == 1 and cr.latest_step() is None
(cr.output_dir() / "model.bin").write_bytes(b"model")
cr.write_metrics({"rmse": 1.0})
""")
    done = job.run("--poll-seconds", "30", env={**job.env(), "COSTAWARE_CHECKPOINT_EVERY_SECONDS": "0.1"})
    assert done.returncode == 0, done.stderr
    assert "without committing a checkpoint" not in done.stderr


def test_an_output_file_no_store_can_hold_fails_with_code_2_before_any_upload(make_job: MakeJob) -> None:
    # It passed the check, then the store refused its key in the middle of the upload: a traceback, exit 1
    # (read as the job's own failure) and half the files uploaded.
    job = make_job("""
(cr.output_dir() / "a.bin").write_bytes(b"model")
(cr.output_dir() / "weights\\\\1.bin").write_bytes(b"w")
cr.write_metrics({"rmse": 1.0})
""")
    done = job.run()
    assert done.returncode == 2, done.stderr
    named = str(Path(job.env()["COSTAWARE_OUTPUT_DIR"]) / "weights\\1.bin")
    assert f"output file {named!r} cannot be uploaded: " in done.stderr and "rename it" in done.stderr
    assert "Traceback" not in done.stderr
    assert not job.outputs.exists() and not job.result.exists()


@pytest.mark.parametrize(
    ("link", "kind"),
    [
        ("weights.bin", "a link to {target!r}, which does not exist"),
        ("tokenizer", "a link to the folder {target!r}"),
    ],
)
def test_an_output_link_the_upload_cannot_follow_fails_with_code_2(
    make_job: MakeJob, tmp_path: Path, link: str, kind: str
) -> None:
    # Skipped in silence: the model was promoted without its weights (a link to a file never written) or
    # without the files of a linked folder.
    target = tmp_path / "elsewhere" / link
    job = make_job(f"""
target = Path({str(target)!r})
if target.name == "tokenizer":
    target.mkdir(parents=True)
    (target / "vocab.txt").write_text("a b c")
(cr.output_dir() / "config.json").write_text("{{}}")
os.symlink(target, cr.output_dir() / {link!r})
cr.write_metrics({{"rmse": 1.0}})
""")
    done = job.run()
    assert done.returncode == 2, done.stderr
    named = str(Path(job.env()["COSTAWARE_OUTPUT_DIR"]) / link)
    assert f"output {named!r} is {kind.format(target=str(target))}" in done.stderr
    assert not job.outputs.exists() and not job.result.exists()


def test_an_output_link_to_a_file_uploads_what_it_points_to(make_job: MakeJob, tmp_path: Path) -> None:
    # A Hugging Face download links its files into a cache: the model is the files they point to.
    cached = tmp_path / "cache" / "weights.bin"
    cached.parent.mkdir()
    cached.write_bytes(b"weights")
    job = make_job(f"""
os.symlink({str(cached)!r}, cr.output_dir() / "weights.bin")
cr.write_metrics({{"rmse": 1.0}})
""")
    done = job.run()
    assert done.returncode == 0, done.stderr
    assert (job.outputs / "weights.bin").read_bytes() == b"weights"


def test_metrics_an_earlier_run_left_do_not_pass_a_job_that_wrote_none(make_job: MakeJob) -> None:
    # Run again with the same metrics path (by hand), a job that exited 0 without writing metrics passed
    # with the earlier run's: exit 0, its model uploaded with metrics it never had.
    job = make_job("""
(cr.output_dir() / "model.bin").write_text(os.environ["MODEL"])
if os.environ.get("WRITE_METRICS") == "1":
    cr.write_metrics({"rmse": 1.0})
""")
    good = job.run(env=job.env(MODEL="good", WRITE_METRICS="1"))
    assert good.returncode == 0, good.stderr

    silent = job.run(env=job.env(MODEL="diverged"))
    assert silent.returncode == 2, silent.stderr
    assert f"the job wrote no metrics file {job.env()['COSTAWARE_METRICS_PATH']}" in silent.stderr
    assert json.loads(job.result.read_text())["metrics"] == {"rmse": 1.0}  # still the good run's result
    assert (job.outputs / "model.bin").read_text() == "good"


def test_metrics_that_cannot_be_removed_stop_the_attempt_before_the_job(make_job: MakeJob) -> None:
    job = make_job('(READY.parent / "ran").touch()\n')
    Path(job.env()["COSTAWARE_METRICS_PATH"], "in-the-way").mkdir(parents=True)
    done = job.run()
    assert done.returncode == 2, done.stderr
    named = job.env()["COSTAWARE_METRICS_PATH"]
    assert f"COSTAWARE_METRICS_PATH={named} is already there and cannot be removed" in done.stderr
    assert not (job.root / "ran").exists()


def test_an_empty_output_folder_fails_with_code_2(make_job: MakeJob) -> None:
    job = make_job('cr.write_metrics({"rmse": 1.0})\n')
    done = job.run()
    assert done.returncode == 2
    assert f"left no files in COSTAWARE_OUTPUT_DIR={job.env()['COSTAWARE_OUTPUT_DIR']}" in done.stderr
    assert not job.outputs.exists() and not job.result.exists()


# A job that stores its model itself (the provider's built-in trainers): metrics, a checkpoint, no outputs.
SELF_STORING_JOB = """
(READY.parent / "saw-output-dir").write_text(str("COSTAWARE_OUTPUT_DIR" in os.environ))
cr.save_bytes(b"state", step=4)
if os.environ.get("WRITE_METRICS", "1") == "1":
    cr.write_metrics({"rows": 100, "seconds": 1.5})
"""


@pytest.mark.parametrize(("options", "expected"), [(("--no-outputs",), 74), ((), 1)])
def test_a_self_storing_jobs_own_74_is_passed_on_as_a_store_failure(
    make_job: MakeJob, options: tuple[str, ...], expected: int
) -> None:
    # The built-in trainers (--no-outputs) read and write their own stores: their 74 became 1, a code error
    # that failed the task for good on a transient outage. Any other job's 74 is still reserved.
    job = make_job('cr.save_bytes(b"partial", step=2)\nsys.exit(74)\n')
    env = job.env()
    if options:
        del env["COSTAWARE_OUTPUT_DIR"], env["COSTAWARE_OUTPUT_URI"]
    done = job.run(*options, env=env)
    assert done.returncode == expected, done.stderr
    if options:
        assert "the job exited 74: a store it reads or writes itself failed (retried)" in done.stderr
    else:
        assert "the job exited 74, a code the launcher reserves: reporting 1" in done.stderr
    assert job.latest()["step"] == 2  # its checkpoint is still pushed


def test_no_outputs_needs_only_the_metrics_and_reports_no_files(make_job: MakeJob) -> None:
    job = make_job(SELF_STORING_JOB)
    env = job.env()
    del env["COSTAWARE_OUTPUT_DIR"], env["COSTAWARE_OUTPUT_URI"]
    done = job.run("--no-outputs", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(job.result.read_text()) == {
        "metrics": {"rows": 100, "seconds": 1.5},
        "output_uri": None,
        "files": 0,
        "bytes": 0,
        "attempt": 1,
        "checkpoint_step": 4,
        "warnings": [],
    }
    assert (job.root / "saw-output-dir").read_text() == "False"  # no folder made, none to fill
    assert "done (the job stored its model itself)" in done.stderr
    assert "is not set" not in done.stderr and "COSTAWARE_OUTPUT" not in done.stderr
    assert job.latest()["step"] == 4  # the checkpoint is pushed as for any job

    env = job.env(attempt=2, WRITE_METRICS="0")  # a fresh metrics path
    del env["COSTAWARE_OUTPUT_DIR"], env["COSTAWARE_OUTPUT_URI"]
    missing = job.run("--no-outputs", env=env)
    assert missing.returncode == 2 and "the job wrote no metrics file" in missing.stderr


@pytest.mark.parametrize("variable", ["COSTAWARE_CHECKPOINT_URI", "COSTAWARE_OUTPUT_URI"])
def test_a_local_store_under_a_file_is_refused_before_the_job_starts(
    make_job: MakeJob, variable: str
) -> None:
    # Failed with exit 74, retried to fail the same way: the checkpoints' at the restore, the outputs' only
    # once the job had trained to the end.
    job = make_job(RESUMING_JOB)
    (job.root / "a-file").write_text("not a folder")
    bad = job.root / "a-file" / "store"
    done = job.run(env=job.env(**{variable: str(bad)}))
    assert done.returncode == 2, done.stderr
    assert f"{bad} is under {job.root / 'a-file'}, a file, not a folder: give a folder's path" in done.stderr
    assert not (job.root / "seen-1.json").exists()


@pytest.mark.parametrize("variable", ["COSTAWARE_CHECKPOINT_URI", "COSTAWARE_OUTPUT_URI"])
def test_a_local_store_that_refuses_deletions_is_refused_saying_so(
    make_job: MakeJob, append_only_folder: Path, variable: str
) -> None:
    # Its write check's delete failed and it was said to refuse a new file, which it had taken. The check
    # renames its probe first, as a store renames each file it writes: an append-only folder refuses that.
    job = make_job(RESUMING_JOB)
    done = job.run(env=job.env(**{variable: str(append_only_folder)}))
    assert done.returncode == 2, done.stderr
    (probe,) = append_only_folder.glob(".costaware-write-check.*.tmp")
    said = " ".join(done.stderr.split())
    assert (
        f"{append_only_folder} cannot be a store: {append_only_folder} takes new files but refuses to rename "
        f"them (Operation not permitted), and a store renames and deletes files; its write check "
        f"{str(probe)!r} stays there; give a folder that allows both" in said
    )
    assert "refuses a new file" not in said and not (job.root / "seen-1.json").exists()


#: Python's view of a Mountpoint for S3 on a general purpose bucket without --allow-delete, for the folder in
#: $MOUNTPOINT_FOLDER: a rename answers ENOSYS, a delete EPERM (what the C library answers there).
MOUNTPOINT_SITECUSTOMIZE = """\
import errno, os
_folder = os.environ["MOUNTPOINT_FOLDER"].rstrip("/") + "/"
_rename, _replace, _unlink = os.rename, os.replace, os.unlink
def _under(*paths):
    return any(os.fspath(p).startswith(_folder) for p in paths)
def rename(a, b, *args, **kwargs):
    if _under(a, b):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS), os.fspath(a), None, os.fspath(b))
    return _rename(a, b, *args, **kwargs)
def replace(a, b, *args, **kwargs):
    if _under(a, b):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS), os.fspath(a), None, os.fspath(b))
    return _replace(a, b, *args, **kwargs)
def unlink(a, *args, **kwargs):
    if _under(a):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), os.fspath(a))
    return _unlink(a, *args, **kwargs)
os.rename, os.replace, os.unlink = rename, replace, unlink
"""


@pytest.mark.parametrize("variable", ["COSTAWARE_CHECKPOINT_URI", "COSTAWARE_OUTPUT_URI"])
def test_a_local_store_on_a_mount_that_cannot_rename_is_refused_not_retried(
    make_job: MakeJob, tmp_path: Path, variable: str
) -> None:
    # Mountpoint for S3 answers ENOSYS to a rename: read as a mount that did not answer, exit 74, each retry a
    # billed attempt failing the same way, its write check left there unnamed. A store renames every file it
    # writes into place, so the folder cannot be one.
    job = make_job(RESUMING_JOB)
    mount = tmp_path / "mountpoint"
    mount.mkdir()
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(MOUNTPOINT_SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    env = job.env(**{variable: str(mount / "store")}) | {"MOUNTPOINT_FOLDER": str(mount), "PYTHONPATH": path}
    done = job.run(env=env)
    assert done.returncode == 2, done.stderr
    (probe,) = mount.glob(".costaware-write-check.*.tmp")
    said = " ".join(done.stderr.split())
    assert (
        f"{mount / 'store'} cannot be a store: {mount} (where {mount / 'store'} would be made) takes new "
        "files but refuses to rename them (Function not implemented), and a store renames and deletes files; "
        f"its write check {str(probe)!r} stays there; give a folder that allows both (a Mountpoint for S3 "
        "renames no file: give the bucket's s3:// URI instead)" in said
    )
    assert not (job.root / "seen-1.json").exists()


def test_a_job_folder_whose_filesystem_fails_is_a_store_error_not_a_contract_one(
    make_job: MakeJob, tmp_path: Path
) -> None:
    # An I/O error at the write check's rename was exit 2 (not retried), saying the folder refuses renames.
    job = make_job(RESUMING_JOB)
    folder = tmp_path / "failing"
    folder.mkdir()
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        MOUNTPOINT_SITECUSTOMIZE.replace("errno.ENOSYS", "errno.EIO").replace("errno.EPERM", "errno.EIO")
    )
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    env = job.env(COSTAWARE_CHECKPOINT_DIR=str(folder)) | {
        "MOUNTPOINT_FOLDER": str(folder),
        "PYTHONPATH": path,
    }
    done = job.run(env=env)
    assert done.returncode == 74, done.stderr
    (probe,) = folder.glob(".costaware-write-check.*.tmp")
    said = " ".join(done.stderr.split())
    where = f"COSTAWARE_CHECKPOINT_DIR={str(folder)!r}: could not rename a file in its folder {str(folder)!r}"
    assert f"{where} ([Errno 5] Input/output error: " in said
    assert f"the launcher's write check {str(probe)!r} stays there; check that filesystem (its free" in said
    assert not (job.root / "seen-1.json").exists()


#: Python's view of a filesystem that fails to make a folder under $FAILING_FOLDER with $FAILING_ERRNO.
FAILING_MKDIR_SITECUSTOMIZE = """\
import errno, os
_folder = os.environ["FAILING_FOLDER"].rstrip("/") + "/"
_code = getattr(errno, os.environ["FAILING_ERRNO"])
_mkdir = os.mkdir
def mkdir(path, *args, **kwargs):
    if os.fspath(path).startswith(_folder):
        raise OSError(_code, os.strerror(_code), os.fspath(path))
    return _mkdir(path, *args, **kwargs)
os.mkdir = mkdir
"""


@pytest.mark.parametrize(
    ("code", "exit_code", "words"),
    [
        ("ENOSPC", 74, "could not be made ([Errno 28] No space left on device: "),
        ("EIO", 74, "could not be made ([Errno 5] Input/output error: "),
        ("ESTALE", 74, "could not be made ([Errno 116] Stale file handle: "),
        ("EROFS", 2, "cannot be used: its folder"),
        ("EACCES", 2, "cannot be used: its folder"),
    ],
)
def test_a_job_folder_that_its_filesystem_fails_to_make_is_a_store_error(
    make_job: MakeJob, tmp_path: Path, code: str, exit_code: int, words: str
) -> None:
    # A full disk or an I/O error making the folder was exit 2 "cannot be made" (not retried); only a folder
    # that may not be made there (read-only, no permission) is the contract.
    job = make_job(RESUMING_JOB)
    failing = tmp_path / "failing"
    failing.mkdir()
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(FAILING_MKDIR_SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    folder = failing / "checkpoints"
    env = job.env(COSTAWARE_CHECKPOINT_DIR=str(folder)) | {
        "FAILING_FOLDER": str(failing),
        "FAILING_ERRNO": code,
        "PYTHONPATH": path,
    }
    done = job.run(env=env)
    assert done.returncode == exit_code, done.stderr
    said = " ".join(done.stderr.split())
    assert f"COSTAWARE_CHECKPOINT_DIR={str(folder)!r}" in said and words in said
    if exit_code == 74:
        assert "check that filesystem (its free space, its mount)" in said
    assert not (job.root / "seen-1.json").exists()


def test_no_outputs_and_an_output_uri_disagree_before_the_job_starts(make_job: MakeJob) -> None:
    job = make_job(SELF_STORING_JOB)
    done = job.run("--no-outputs")
    assert done.returncode == 2
    assert (
        f"--no-outputs (the job stores its model itself) and COSTAWARE_OUTPUT_URI='{job.outputs}' disagree"
        in done.stderr
    )
    assert not (job.root / "saw-output-dir").exists()


def test_a_partly_pushed_step_is_never_restored(make_job: MakeJob) -> None:
    job = make_job(RESUMING_JOB)
    assert job.run(env=job.env(attempt=1, STOP_AT="1")).returncode == 75
    # An upload of step 2 that died before LATEST.json was written: files and marker, but no LATEST.
    partial = job.remote / "step-2-5eed"
    (partial / "checkpoint-2").mkdir(parents=True)
    (partial / "checkpoint-2" / "state.bin").write_bytes(b"half")
    (partial / "_costaware_checkpoint.json").write_text('{"step": 2}')
    backdate(partial)  # its writer died long ago: the next push prunes it

    done = job.run(env=job.env(attempt=2))
    assert done.returncode == 0, done.stderr
    assert seen(job, 2)["start"] == 1 and seen(job, 2)["state"] == "state after 1"
    assert not partial.exists()  # pruned by the next push


def test_a_damaged_local_marker_stops_the_attempt_before_the_job(make_job: MakeJob) -> None:
    job = make_job(RESUMING_JOB)
    checkpoints = Path(job.env()["COSTAWARE_CHECKPOINT_DIR"])
    checkpoints.mkdir(parents=True)
    (checkpoints / "_costaware_checkpoint.json").write_text("{oops")
    done = job.run()
    assert done.returncode == 2
    assert "_costaware_checkpoint.json is not a checkpoint marker" in done.stderr
    assert not (job.root / "seen-1.json").exists()


def test_no_sync_sets_the_folder_but_never_touches_the_remote(make_job: MakeJob) -> None:
    job = make_job(RESUMING_JOB)
    done = job.run("--no-sync")
    assert done.returncode == 0, done.stderr
    assert not job.remote.exists()
    checkpoints = Path(job.env()["COSTAWARE_CHECKPOINT_DIR"])
    assert json.loads((checkpoints / "_costaware_checkpoint.json").read_text())["step"] == 5


def env_without_folders(job: Job, scratch: Path) -> dict[str, str]:
    """The job's variables without its three local folders, temporary files going to ``scratch``."""
    env = job.env()
    for name in ("COSTAWARE_CHECKPOINT_DIR", "COSTAWARE_OUTPUT_DIR", "COSTAWARE_METRICS_PATH"):
        del env[name]
    scratch.mkdir()
    return env | {"TMPDIR": str(scratch)}


def test_unset_folders_are_made_for_the_job(make_job: MakeJob, tmp_path: Path) -> None:
    job = make_job(RESUMING_JOB)
    scratch = tmp_path / "scratch"
    done = job.run(env=env_without_folders(job, scratch))
    assert done.returncode == 0, done.stderr
    assert "COSTAWARE_CHECKPOINT_DIR is not set: using" in done.stderr
    made = seen(job, 1)
    assert Path(str(made["COSTAWARE_CHECKPOINT_DIR"])).parent == scratch
    assert json.loads(job.result.read_text())["files"] == 2
    # The checkpoint and metrics folders served this attempt only: gone at exit; so is the model's folder,
    # once its files are uploaded to COSTAWARE_OUTPUT_URI (a model can be gigabytes of the temp folder).
    assert "(removed at exit)" in done.stderr
    assert not Path(str(made["COSTAWARE_OUTPUT_DIR"])).exists() and list(scratch.iterdir()) == []


def test_a_preempted_run_without_a_checkpoint_uri_says_the_next_starts_over(
    make_job: MakeJob, tmp_path: Path
) -> None:
    job = make_job(PREEMPTIBLE_JOB)
    scratch = tmp_path / "scratch"
    env = env_without_folders(job, scratch)
    del env["COSTAWARE_CHECKPOINT_URI"]
    code, stderr = job.preempt(job.start(env=env))
    assert code == 75, stderr
    said = " ".join(stderr.split())
    assert "COSTAWARE_CHECKPOINT_URI is not set and" in said
    assert "so the checkpoint goes with it: a next run starts over; set COSTAWARE_CHECKPOINT_URI" in said
    # With the URI set the same run says nothing of it (the checkpoint is pushed, the next run resumes).
    code, stderr = job.preempt(job.start())
    assert code == 75 and "a next run starts over" not in stderr


def test_a_failed_job_leaves_no_empty_folder_behind(make_job: MakeJob, tmp_path: Path) -> None:
    job = make_job("raise SystemExit(3)\n")
    scratch = tmp_path / "scratch"
    done = job.run(env=env_without_folders(job, scratch))
    assert done.returncode == 3, done.stderr
    assert list(scratch.iterdir()) == []


def test_folders_made_for_a_job_that_cannot_start_are_removed(make_job: MakeJob, tmp_path: Path) -> None:
    job = make_job(RESUMING_JOB)
    scratch = tmp_path / "scratch"
    env = env_without_folders(job, scratch)
    env["COSTAWARE_RESULT_PATH"] = f"{tmp_path}/results/"  # refused after the folders are made
    done = job.run(env=env)
    assert done.returncode == 2, done.stderr
    assert "names a folder, not a file" in done.stderr
    assert "is not set: using" in done.stderr
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("variable", "below_the_file"),
    [
        ("COSTAWARE_CHECKPOINT_DIR", "checkpoints"),
        ("COSTAWARE_OUTPUT_DIR", "outputs"),
        ("COSTAWARE_METRICS_PATH", "metrics.json"),
    ],
)
def test_a_local_folder_under_a_file_is_a_contract_error_naming_its_variable(
    make_job: MakeJob, tmp_path: Path, variable: str, below_the_file: str
) -> None:
    # It was a traceback and exit 1, which the provider reports as the team's own code failing.
    job = make_job(RESUMING_JOB)
    scratch = tmp_path / "scratch"
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    value = str(a_file / below_the_file)
    done = job.run(env=env_without_folders(job, scratch) | {variable: value})
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert f"{variable}={value!r} cannot be used" in said
    assert f"({str(a_file)!r} is a file, not a folder); give a folder the job may write" in said
    assert "Traceback" not in done.stderr
    assert not (job.root / "seen-1.json").exists()
    assert list(scratch.iterdir()) == []  # the folders made for the other variables are gone


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder that exists and refuses a new file: mode 0o555, or for root (whom modes do not stop) sysfs."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path("/sys/kernel")
    try:
        (folder / "costaware-probe").touch()
    except OSError:
        return folder
    pytest.skip("no folder here refuses root a new file")


@pytest.mark.parametrize("variable", ["COSTAWARE_CHECKPOINT_DIR", "COSTAWARE_OUTPUT_DIR"])
def test_a_local_folder_the_job_may_not_write_is_refused_before_the_job_trains(
    make_job: MakeJob, tmp_path: Path, variable: str
) -> None:
    # It failed at the job's first save (a PermissionError traceback, exit 1: the team's code, for the
    # provider), after the job had trained and been billed up to its checkpoint interval.
    job = make_job(RESUMING_JOB)
    folder = unwritable_folder(tmp_path)
    done = job.run(env=job.env() | {variable: str(folder)})
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert (
        f"{variable}={str(folder)!r} cannot be used: the job may not write its folder {str(folder)!r}" in said
    )
    assert "give a folder the job may write, or leave the variable unset for a temporary one" in said
    assert not (job.root / "seen-1.json").exists()


@pytest.fixture
def append_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder that takes new files but refuses to delete them (``chattr +a``: root, on ext4 or alike)."""
    folder = tmp_path / "append-only"
    folder.mkdir()
    if subprocess.run(["chattr", "+a", str(folder)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +a is not allowed here (root on a filesystem that supports it)")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-a", str(folder)], check=True)  # else tmp_path cannot be removed


def test_an_output_folder_that_refuses_deletions_is_used_and_its_write_check_is_named_not_uploaded(
    make_job: MakeJob, append_only_folder: Path
) -> None:
    # The write check's delete failed and the launcher exited 2, saying the job may not write the folder
    # (an append-only folder, a Mountpoint for S3 without --allow-delete), and left its probe file there.
    job = make_job(RESUMING_JOB)
    done = job.run(env=job.env() | {"COSTAWARE_OUTPUT_DIR": str(append_only_folder)})
    assert done.returncode == 0, done.stderr
    (probe,) = append_only_folder.glob(".costaware-write-check.*.tmp")
    said = " ".join(done.stderr.split())
    warning = (
        f"COSTAWARE_OUTPUT_DIR={str(append_only_folder)!r}: its folder {str(append_only_folder)!r} takes new "
        f"files but refuses to delete them (Operation not permitted), so the launcher's write check "
        f"{str(probe)!r} stays there"
    )
    assert warning in said
    assert any(warning in " ".join(said.split()) for said in json.loads(job.result.read_text())["warnings"])
    manifest = json.loads((job.outputs / "_costaware_manifest.json").read_text())
    assert [f["path"] for f in manifest["files"]] == ["model.bin", "sub/config.json"]
    assert sorted(path.name for path in job.outputs.iterdir()) == [
        "_costaware_manifest.json",
        "model.bin",
        "sub",
    ]


@pytest.mark.parametrize(("code", "words"), [("EIO", "Input/output error"), ("ESTALE", "Stale file handle")])
def test_an_output_folder_whose_filesystem_fails_a_delete_is_not_said_to_refuse_deletions(
    make_job: MakeJob, tmp_path: Path, code: str, words: str
) -> None:
    # An I/O error deleting the write check was told "refuses to delete them (Input/output error)".
    job = make_job(RESUMING_JOB)
    folder = tmp_path / "failing"
    folder.mkdir()
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        MOUNTPOINT_SITECUSTOMIZE.replace(
            "PermissionError(errno.EPERM, os.strerror(errno.EPERM)",
            f"OSError(errno.{code}, os.strerror(errno.{code})",
        )
    )
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    env = job.env() | {
        "COSTAWARE_OUTPUT_DIR": str(folder),
        "MOUNTPOINT_FOLDER": str(folder),
        "PYTHONPATH": path,
    }
    done = job.run(env=env)
    assert done.returncode == 0, done.stderr
    (probe,) = folder.glob(".costaware-write-check.*.tmp")
    said = " ".join(done.stderr.split())
    assert (
        f"COSTAWARE_OUTPUT_DIR={str(folder)!r}: its folder {str(folder)!r} takes new files but could not "
        f"delete one (the filesystem failed: {words}), so the launcher's write check {str(probe)!r} stays "
        "there" in said
    )
    assert "refuses to delete" not in said


@pytest.mark.parametrize(
    ("variable", "file", "written"),
    [
        ("COSTAWARE_CHECKPOINT_DIR", "", "the checkpoint marker (costaware_runtime.commit)"),
        ("COSTAWARE_METRICS_PATH", "metrics.json", "the metrics file (costaware_runtime.write_metrics)"),
    ],
)
def test_a_checkpoint_or_metrics_folder_that_refuses_renames_is_refused_before_the_job_trains(
    make_job: MakeJob, append_only_folder: Path, variable: str, file: str, written: str
) -> None:
    # The runtime writes these whole (a temporary file renamed over the real one): taken with a warning, the
    # job failed at its first save, a PermissionError traceback and exit 1, after it had trained.
    job = make_job(RESUMING_JOB)
    value = str(append_only_folder / file) if file else str(append_only_folder)
    done = job.run(env=job.env() | {variable: value})
    assert done.returncode == 2, done.stderr
    (probe,) = append_only_folder.glob(".costaware-write-check.*.tmp")
    said = " ".join(done.stderr.split())
    assert (
        f"{variable}={value!r} cannot be used: its folder {str(append_only_folder)!r} takes new files but "
        f"refuses to rename them (Operation not permitted), which writing {written} whole needs (a temporary "
        f"file renamed over it): the job would fail at its first save; the launcher's write check "
        f"{str(probe)!r} stays there; give a folder the job may write" in said
    )
    assert "Traceback" not in done.stderr and not (job.root / "seen-1.json").exists()


def test_a_write_check_left_in_the_output_folder_does_not_stand_for_the_model(
    make_job: MakeJob, append_only_folder: Path
) -> None:
    # Counted as an output, the leftover probe let a job that saved no model pass the contract.
    job = make_job("cr.write_metrics({'rmse': 1.0})\n")
    done = job.run(env=job.env() | {"COSTAWARE_OUTPUT_DIR": str(append_only_folder)})
    assert done.returncode == 2, done.stderr
    assert "the job exited 0 but left no files in COSTAWARE_OUTPUT_DIR" in done.stderr
    assert not job.outputs.exists()


@pytest.mark.parametrize(
    ("variable", "advice"),
    [
        # The job sets both stores: the advice to set one to the s3:// value would replace it.
        ("COSTAWARE_CHECKPOINT_DIR", "(COSTAWARE_CHECKPOINT_URI is already set to '"),
        ("COSTAWARE_OUTPUT_DIR", "(COSTAWARE_OUTPUT_URI is already set to '"),
        (
            "COSTAWARE_METRICS_PATH",
            "the launcher puts the metrics into the result it writes at COSTAWARE_RES",
        ),
    ],
)
def test_a_uri_in_a_local_path_variable_is_refused_naming_the_uri_variable(
    make_job: MakeJob, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, advice: str
) -> None:
    # Taken as a path, s3://bucket/... was a local folder named "s3:": the model stayed in it, not uploaded.
    monkeypatch.chdir(tmp_path)  # the launcher's current folder, where "s3:" was made
    job = make_job(RESUMING_JOB)
    done = job.run(env=job.env() | {variable: "s3://bucket/runs/7/x"})
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert f"{variable}='s3://bucket/runs/7/x' is a URI, but {variable} is a local " in said
    assert advice in said
    assert not (tmp_path / "s3:").exists() and not (job.root / "seen-1.json").exists()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("COSTAWARE_ATTEMPT", "zero", "COSTAWARE_ATTEMPT='zero' is not an attempt number"),
        ("COSTAWARE_MARKET", "preemptible", "COSTAWARE_MARKET='preemptible' is not a market"),
        ("COSTAWARE_CHECKPOINT_URI", "gs://bucket/run", "'gs://bucket/run' is not a supported location"),
        # Read as the current folder, where the launcher pushed and pruned checkpoints.
        ("COSTAWARE_CHECKPOINT_URI", "file://", "'file://' names no folder"),
        ("COSTAWARE_OUTPUT_URI", "file://", "'file://' names no folder"),
        ("COSTAWARE_GRACE_SECONDS", "-1", "COSTAWARE_GRACE_SECONDS='-1' is not a grace period, a number"),
        ("COSTAWARE_GRACE_SECONDS", "0", "COSTAWARE_GRACE_SECONDS='0' is not a grace period, a number"),
    ],
)
def test_a_broken_environment_fails_before_the_job_starts(
    make_job: MakeJob, variable: str, value: str, message: str
) -> None:
    job = make_job(RESUMING_JOB)
    done = job.run(env=job.env(**{variable: value}))
    assert done.returncode == 2
    assert message in done.stderr
    assert not (job.root / "seen-1.json").exists()


def test_a_missing_command_is_127(tmp_path: Path) -> None:
    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "costaware_runtime", *command],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "COSTAWARE_CHECKPOINT_DIR": str(tmp_path / "c")},
        )

    done = run("--", str(tmp_path / "nope"))
    assert done.returncode == 127
    assert "command not found" in done.stderr and "one word" not in done.stderr
    done = run("--", "python3 train.py")  # the whole command line quoted as one word
    assert done.returncode == 127
    assert "command not found: python3 train.py (the command is one word with spaces: give its words " in (
        done.stderr
    )


def test_a_command_that_is_not_executable_is_126_and_says_what_to_do(tmp_path: Path) -> None:
    script, folder = tmp_path / "train.py", tmp_path / "src"
    script.write_text("#!/usr/bin/env python3\n")  # no execute bit: refused even to root
    folder.mkdir()
    env = {"PATH": "/usr/bin:/bin", "COSTAWARE_CHECKPOINT_DIR": str(tmp_path / "c")}
    env |= {name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ}

    def run(command: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "costaware_runtime", "--", str(command)],
            capture_output=True,
            text=True,
            env=env,
        )

    # It said only "command is not executable", with nothing to do about it.
    done = run(script)
    assert done.returncode == 126
    assert (
        f"command is not executable: {script}; make it executable in the image (chmod +x), or run it "
        f"through its interpreter (python3 {script})"
    ) in " ".join(done.stderr.split())
    done = run(folder)
    assert done.returncode == 126
    assert f"command is a folder, not a program: {folder}; give the program's path" in done.stderr
    # A shell script was told to run it as "python3 run.sh": the interpreter is its #! line's, else its
    # suffix's, else none is guessed.
    for name, first_line, interpreter in [
        ("run.sh", "echo no first line naming a program", "sh"),
        ("train", "#!/bin/bash -e", "bash"),
        ("job", "#!/usr/bin/env -S python3.11 -u", "python3.11"),
        ("job.bin", "\x7fELF", None),
    ]:
        other = tmp_path / name
        other.write_text(first_line + "\n")
        done = run(other)
        assert done.returncode == 126
        # Neither: it said "(sh run.sh, python3 train.py)", naming no file of the user's.
        run_it = f"{interpreter} {other}" if interpreter else f"sh {other} or python3 {other}"
        assert f"or run it through its interpreter ({run_it})" in " ".join(done.stderr.split())


@pytest.mark.parametrize(
    ("first_line", "code", "message"),
    [
        # An executable script without a #! line: the launcher died with an ENOEXEC traceback (exit 1).
        (
            "print('hi')",
            126,
            "cannot run {script}: Exec format error (a script needs a first line such as #!",
        ),
        # Its interpreter is missing, not the script: it was reported as "command not found: ./x.py".
        (
            "#!/no/such/python3",
            127,
            "the interpreter of {script} was not found: its first line '#!/no/such/python3' names a program",
        ),
        # Saved with Windows line endings: its interpreter exists, yet it was "not found", said as such.
        (
            "#!/bin/sh\r",
            127,
            "{script} has Windows line endings (CRLF): its first line names the program '/bin/sh' followed",
        ),
    ],
)
@pytest.mark.parametrize("nested", [False, True])
def test_a_script_that_cannot_run_says_why(
    tmp_path: Path, first_line: str, code: int, message: str, nested: bool
) -> None:
    script = tmp_path / "x.py"
    script.write_text(first_line + "\n")
    script.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "COSTAWARE_CHECKPOINT_DIR": str(tmp_path / "c")}
    env |= {name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ}
    done = subprocess.run(
        [sys.executable, "-m", "costaware_runtime", "--", str(script)],
        capture_output=True,
        text=True,
        env=env | ({"COSTAWARE_LAUNCHED": "1"} if nested else {}),  # under a launcher: it execs the command
    )
    assert done.returncode == code, done.stderr
    assert message.format(script=script) in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("value", "said"), [("x", ""), ("0,5", " (a '.' before the decimals, not ',')")])
def test_a_poll_interval_that_is_not_a_number_is_refused_in_words(
    make_job: MakeJob, value: str, said: str
) -> None:
    # argparse said only "invalid float value: 'x'".
    job = make_job(RESUMING_JOB)
    done = job.run("--poll-seconds", value)
    assert done.returncode == 2, done.stderr
    expected = f"argument --poll-seconds: {value!r} is not a number: type it in digits, e.g. 1{said}\n"
    assert expected in done.stderr and "invalid float value" not in done.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "1e10", "0"])
def test_a_poll_interval_that_is_not_a_usable_number_of_seconds_is_refused(
    make_job: MakeJob, value: str
) -> None:
    # inf and 1e10 passed: the watcher's wait died with OverflowError, and nothing was pushed until the end.
    job = make_job(RESUMING_JOB)
    done = job.run("--poll-seconds", value)
    assert done.returncode == 2, done.stderr
    assert f"--poll-seconds {float(value)!r} is not a number of seconds > 0 and at most 3600" in done.stderr
    assert not (job.root / "seen-1.json").exists()


@pytest.mark.parametrize("seconds", ["-1", "0"])  # 0: SIGKILL right after the notice, nothing saved
def test_a_bad_grace_period_flag_is_named_as_typed(tmp_path: Path, seconds: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "costaware_runtime", "--grace-seconds", seconds, "--", "true"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "COSTAWARE_CHECKPOINT_DIR": str(tmp_path / "c")}
        | {name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ},
    )
    assert done.returncode == 2
    # It named neither the option nor the variable, and both set the grace period.
    assert (
        f"--grace-seconds {seconds!r} is not a grace period, a number of seconds > 0: give the seconds"
        in done.stderr
    )


def test_no_command_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, "-m", "costaware_runtime"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "no command: use costaware-run [options] -- <command...>" in done.stderr


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("costaware-run")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert done.stdout.strip() == "costaware-runtime 0.1.10"


# The job starts a helper process (like a DataLoader worker) that notes whether it got SIGTERM.
GROUP_JOB = """
import subprocess
cr.preemption_requested()
note, up = READY.parent / "helper-got-sigterm", READY.parent / "helper-up"
helper = subprocess.Popen([sys.executable, "-c", '''
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path(sys.argv[1]).touch(), sys.exit(0)))
pathlib.Path(sys.argv[2]).touch()
time.sleep(60)
''', str(note), str(up)])
while not up.exists():
    time.sleep(0.01)
cr.save_bytes(b"state", step=1)
READY.touch()
while not cr.preemption_requested():
    time.sleep(0.01)
time.sleep(0.3)  # time for a group-wide SIGTERM to reach the helper
helper.kill()
cr.exit_preempted()
"""


@pytest.mark.parametrize(("options", "helper_signalled"), [((), False), (("--signal-group",), True)])
def test_sigterm_goes_to_the_command_only_unless_asked_for_the_group(
    make_job: MakeJob, options: tuple[str, ...], helper_signalled: bool
) -> None:
    job = make_job(GROUP_JOB)
    code, stderr = job.preempt(job.start(*options))
    assert code == 75, stderr
    assert (job.root / "helper-got-sigterm").exists() is helper_signalled


NESTED_JOB = """
count = READY.parent / "runs"
count.write_text(count.read_text() + "x" if count.exists() else "x")
(cr.output_dir() / "model.bin").write_bytes(b"model")
cr.write_metrics({"rmse": 1.0})
"""


def test_a_launcher_inside_a_launcher_runs_the_job_once(make_job: MakeJob) -> None:
    """Batch adds ``costaware-run --`` to an image whose ENTRYPOINT is ``costaware-run --`` already."""
    job = make_job(NESTED_JOB)
    inner = [sys.executable, "-m", "costaware_runtime", "--", sys.executable, str(job.script)]
    outer = [sys.executable, "-m", "costaware_runtime", "--", *inner]
    done = subprocess.run(outer, env=job.env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (job.root / "runs").read_text() == "x"
    assert done.stderr.count("done: 1 files") == 1  # one upload, by the outer launcher
    assert json.loads(job.result.read_text())["files"] == 1


def test_the_options_of_a_launcher_given_as_the_command_are_adopted(make_job: MakeJob) -> None:
    """An image whose ENTRYPOINT is ``costaware-run --``, given ``costaware-run --no-outputs -- ...``.

    The inner launcher ran its command directly and its options were dropped: a built-in training that
    succeeded then exited 2, "left no files in COSTAWARE_OUTPUT_DIR".
    """
    job = make_job(SELF_STORING_JOB)
    env = job.env()
    del env["COSTAWARE_OUTPUT_DIR"], env["COSTAWARE_OUTPUT_URI"]
    inner = [sys.executable, "-m", "costaware_runtime", "--no-outputs", "--", sys.executable, str(job.script)]
    outer = [sys.executable, "-m", "costaware_runtime", "--grace-seconds", "5", "--", *inner]
    done = subprocess.run(outer, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "done (the job stored its model itself)" in done.stderr
    assert (job.root / "saw-output-dir").read_text() == "False"

    conflicting = [*outer[: -len(inner)], "costaware-run", "--grace-seconds", "10", "--", "true"]
    done = subprocess.run(conflicting, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--grace-seconds 5 here and --grace-seconds 10 in the command's own costaware-run disagree" in (
        done.stderr
    )


def test_options_of_a_launcher_run_inside_a_job_are_named_as_ignored(make_job: MakeJob) -> None:
    job = make_job(NESTED_JOB)
    env = job.env() | {"COSTAWARE_LAUNCHED": "1"}  # as the outer launcher sets it for its job
    done = job.run("--no-outputs", env=env)
    assert done.returncode == 0, done.stderr
    assert (
        "already under a launcher, which runs this command with its own options: --no-outputs here is "
        in (done.stderr)
    )


def test_the_checkpoint_watcher_keeps_going_after_an_unexpected_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Anything but the runtime's own errors (a PermissionError opening a file) ended the watcher's thread in
    # silence: the job trained on, and no later checkpoint was pushed.
    import threading
    from types import SimpleNamespace

    from costaware_runtime.launcher import _Watcher

    pushed = threading.Event()
    calls: list[int] = []

    class Sync:
        store = SimpleNamespace(uri="s3://bucket/ckpt")
        progressed_at = 0.0  # as CheckpointSync's: no upload has returned

        def push_changed(self) -> None:
            calls.append(1)
            if len(calls) == 1:
                raise PermissionError("[Errno 13] Permission denied: 'checkpoint-3/state.bin'")
            pushed.set()

    watcher = _Watcher(Sync(), poll_seconds=0.01)  # type: ignore[arg-type]
    watcher.start()
    assert pushed.wait(5)
    watcher.stop()
    assert "checkpoint push failed, retrying: PermissionError: [Errno 13]" in caplog.text


def test_the_checkpoint_watcher_warns_again_when_the_store_fails_after_a_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The last error was kept after a push succeeded: the same outage coming back later was never warned, and
    # the log read as if the store had been down all along (or never again). A repeat with no push in
    # between is still warned once: a store that is down fails every poll.
    import threading
    from types import SimpleNamespace

    from costaware_runtime.errors import StoreError
    from costaware_runtime.launcher import _Watcher

    outage = StoreError("could not write s3://bucket/ckpt/step-3: EndpointConnectionError")
    outcomes: list[Exception | None] = [outage, outage, None, outage, outage, None]
    finished = threading.Event()

    class Sync:
        store = SimpleNamespace(uri="s3://bucket/ckpt")  # named when the pushes work again
        progressed_at = 0.0  # as CheckpointSync's: no upload has returned

        def push_changed(self) -> int | None:
            if not outcomes:
                finished.set()
                return 3
            outcome = outcomes.pop(0)
            if outcome is not None:
                raise outcome
            return 3

    watcher = _Watcher(Sync(), poll_seconds=0.001)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="costaware_runtime.launcher"):
        watcher.start()
        assert finished.wait(5)
        watcher.stop()
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("checkpoint push failed")]
    assert warned == [f"checkpoint push failed, retrying: {outage}"] * 2


def test_the_checkpoint_watcher_says_once_when_pushes_work_again_after_an_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The outage was warned, its end never: the log read as if the store had stayed down, and how long it was
    # down (how many pushes failed) was nowhere.
    import threading
    from types import SimpleNamespace

    from costaware_runtime.errors import StoreError
    from costaware_runtime.launcher import _Watcher

    outage = StoreError("could not write s3://bucket/ckpt/step-3: EndpointConnectionError")
    outcomes: list[Exception | None] = [outage, outage, outage, None, None, outage, None]
    finished = threading.Event()

    class Sync:
        store = SimpleNamespace(uri="s3://bucket/ckpt")
        progressed_at = 0.0  # as CheckpointSync's: no upload has returned

        def push_changed(self) -> int | None:
            if not outcomes:
                finished.set()
                return 3
            outcome = outcomes.pop(0)
            if outcome is not None:
                time.sleep(0.6)  # the outage lasts a second or more
                raise outcome
            return 3

    watcher = _Watcher(Sync(), poll_seconds=0.001)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="costaware_runtime.launcher"):
        watcher.start()
        assert finished.wait(10)
        watcher.stop()
    said = [r.getMessage() for r in caplog.records if "work again" in r.getMessage()]
    assert len(said) == 2, said
    assert re.fullmatch(
        r"checkpoint pushes to s3://bucket/ckpt work again after 3 failed over [1-9]\d* s", said[0]
    )
    assert re.fullmatch(
        r"checkpoint pushes to s3://bucket/ckpt work again after 1 failed over \d+ s", said[1]
    )


def test_a_misspelt_contract_variable_is_named_with_the_one_meant(make_job: MakeJob) -> None:
    # COSTAWARE_CHECKPOINTS_URI was ignored in silence: checkpoints went to a temporary folder, and the
    # next attempt started over. The provider's own settings in a job's environment are left alone.
    job = make_job("(cr.output_dir() / 'model.bin').write_bytes(b'm')\ncr.write_metrics({'rmse': 1.0})")
    env = job.env(COSTAWARE_CHECKPOINTS_URI="/tmp/x", COSTAWARE_LEDGER_URL="sqlite:///x.db")
    done = job.run(env=env)
    assert done.returncode == 0, done.stderr
    said = "COSTAWARE_CHECKPOINTS_URI is not a variable costaware-run reads: did you mean"
    assert f"{said} COSTAWARE_CHECKPOINT_URI?" in done.stderr
    assert "COSTAWARE_LEDGER_URL" not in done.stderr


def test_a_job_started_at_a_terminal_reads_no_input_instead_of_stopping_for_good(make_job: MakeJob) -> None:
    # The job's own process group is a background group of the terminal: reading it would stop the job
    # (SIGTTIN) and leave the launcher waiting forever. The launcher, here the session leader of a pseudo
    # terminal as a shell would make it, gives the job no input: input() ends at once.
    import fcntl
    import pty
    import termios

    job = make_job("""
try:
    answer = input("continue? ")
except EOFError:
    answer = "end of input"
(READY.parent / "answer").write_text(answer)
""")
    leader, follower = pty.openpty()

    def take_the_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    launcher = subprocess.Popen(
        job.command(),
        env=job.env(),
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=take_the_terminal,
    )
    os.close(follower)
    try:
        _, stderr = launcher.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.communicate()
        pytest.fail("the job stopped on reading the terminal and the launcher waited for it")
    finally:
        os.close(leader)
    # It ended (its exit code is the outputs' business: it wrote none) and read the end of its input.
    assert (job.root / "answer").read_text() == "end of input", stderr
    assert "the job reads no terminal input" in stderr


def test_stopping_the_checkpoint_watcher_waits_a_bounded_time_for_a_push_that_hangs(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # stop() joined the thread with no time limit: a store that hung on a push held the job's exit for good.
    import threading

    from costaware_runtime import _watcher, save_bytes
    from costaware_runtime.launcher import CheckpointSync, _Watcher

    monkeypatch.setattr(_watcher, "STOP_SECONDS", 0.2, raising=False)

    save_bytes(b"state after 4", step=4, directory=tmp_path / "local")
    sync = CheckpointSync(str(tmp_path / "remote"), tmp_path / "local")
    pushing, release = threading.Event(), threading.Event()

    def hang(key: str, source: object, progress: object = None) -> None:
        pushing.set()
        release.wait(30)

    sync.store.put = hang  # type: ignore[method-assign]
    watcher = _Watcher(sync, poll_seconds=0.01)
    watcher.start()
    try:
        assert pushing.wait(5)
        stopper = threading.Thread(target=lambda: said.append(watcher.stop()))
        said: list[str | None] = []
        stopper.start()
        stopper.join(5)
        assert not stopper.is_alive(), "stop() still waits for the push that hangs"
    finally:
        release.set()
    assert said[0] is not None and said == [caplog.records[-1].getMessage()]
    said_hung = f"a checkpoint push to {sync.store.uri} has sent nothing for 0.2 s after the job exited"
    assert f"{said_hung}, begun" in said[0]
    assert "checkpoint step 4 may not be in the store, which holds none known to this attempt" in said[0]


class _TricklingStore:
    """Wraps a folder store's ``put``: reads the source 64 KiB at a time, ``pause`` seconds apart.

    After ``stall_after`` bytes it stops for good (a connection that stalled mid-file) until ``release``.
    ``started`` is set at the first read: the push has begun.
    """

    def __init__(self, store: Any, pause: float, stall_after: int | None, release: Any) -> None:
        self.put, self.pause, self.stall_after, self.release = store.put, pause, stall_after, release
        self.started = threading.Event()

    def __call__(self, key: str, source: Any, progress: Any = None) -> None:
        trickle, sent = self, 0

        class Trickling:
            def read(self, size: int = -1) -> bytes:
                nonlocal sent
                trickle.started.set()
                if trickle.stall_after is not None and sent >= trickle.stall_after:
                    trickle.release.wait(30)
                time.sleep(trickle.pause)
                chunk: bytes = source.read(64 << 10)
                sent += len(chunk)
                return chunk

        self.put(key, Trickling(), progress)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("stall_after", "kept"),
    [pytest.param(None, True, id="slow but moving"), pytest.param(256 << 10, False, id="moves, then hangs")],
)
def test_stopping_the_watcher_waits_for_a_single_file_while_its_bytes_move(
    stall_after: int | None, kept: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Progress was counted per finished file: one file taking longer than the bound to upload was given up
    # however steadily its bytes went. 1 MiB at 64 KiB per 0.1 s takes ~1.6 s, the bound is 1 s.
    import threading

    from costaware_runtime import _watcher, save_bytes
    from costaware_runtime.launcher import CheckpointSync, _Watcher

    monkeypatch.setattr(_watcher, "STOP_SECONDS", 1.0, raising=False)
    save_bytes(b"w" * (1 << 20), step=9, directory=tmp_path / "local")
    sync = CheckpointSync(str(tmp_path / "remote"), tmp_path / "local")
    release = threading.Event()
    trickling = _TricklingStore(sync.store, 0.1, stall_after, release)
    sync.store.put = trickling  # type: ignore[method-assign]
    watcher = _Watcher(sync, poll_seconds=0.01)
    watcher.start()
    try:
        # The job exits once the push has begun: a fixed sleep lost the race on a loaded machine, the
        # watcher stopped before its first poll and nothing was pushed.
        assert trickling.started.wait(5)
        said = watcher.stop()
    finally:
        release.set()
    if kept:
        assert said is None
        assert json.loads((tmp_path / "remote" / "LATEST.json").read_text())["step"] == 9
    else:
        assert said is not None and "has sent nothing for 1 s after the job exited" in said
        assert not (tmp_path / "remote" / "LATEST.json").exists()


#: Runs costaware-run with a checkpoint store whose uploads into step folders never end (a hung mount); the
#: test gives COSTAWARE_STORE_STALL_SECONDS=1, how long the watcher waits for them once the job has exited.
HUNG_MOUNT_LAUNCHER = """
import os, sys, threading
from pathlib import Path
from costaware_runtime import launcher
real_open = os.open
def hang(path, *args, **kwargs):
    if Path(path).parent == Path(sys.argv[1]):
        threading.Event().wait()  # an NFS mount that stopped answering
    return real_open(path, *args, **kwargs)
os.open = hang
sys.exit(launcher.main(["--", sys.executable, sys.argv[2]]))
"""


def test_a_checkpoint_store_on_a_hung_mount_is_exit_74_before_the_job_starts(make_job: MakeJob) -> None:
    # The local store's write check had no stall bound: a hung NFS mount held the launcher, and the machine
    # billed, before the job started and for good.
    job = make_job("READY.touch()\n")
    job.remote.mkdir()
    launcher = [sys.executable, "-c", HUNG_MOUNT_LAUNCHER, str(job.remote), str(job.script)]
    env = job.env(COSTAWARE_CHECKPOINT_URI=f"file://{job.remote}", COSTAWARE_STORE_STALL_SECONDS="1")
    started = time.monotonic()
    done = subprocess.run(launcher, env=env, capture_output=True, text=True, timeout=45)
    assert done.returncode == 74, done.stderr
    assert time.monotonic() - started < 30
    stalled = f"the write check of {job.remote} (a file made, renamed and deleted there) has moved nothing"
    assert f"{stalled} for 1 s (COSTAWARE_STORE_STALL_SECONDS sets how long)" in done.stderr
    assert f"check that the filesystem holding {job.remote} answers (a hung NFS" in done.stderr
    assert not (job.root / "ready").exists()  # the job never started


def test_a_checkpoint_folder_on_a_hung_mount_is_exit_74_before_the_job_starts(make_job: MakeJob) -> None:
    # The job's own folders are checked with a real write too, which a hung NFS mount held for good.
    job = make_job("READY.touch()\n")
    env = job.env(COSTAWARE_STORE_STALL_SECONDS="1")
    folder = env["COSTAWARE_CHECKPOINT_DIR"]
    launcher = [sys.executable, "-c", HUNG_MOUNT_LAUNCHER, folder, str(job.script)]
    started = time.monotonic()
    done = subprocess.run(launcher, env=env, capture_output=True, text=True, timeout=45)
    assert done.returncode == 74, done.stderr
    assert time.monotonic() - started < 30
    stalled = f"the check of COSTAWARE_CHECKPOINT_DIR={folder!r} (its folder {folder!r} made, a file written"
    assert f"{stalled} there) has moved nothing for 1 s (COSTAWARE_STORE_STALL_SECONDS" in done.stderr
    assert f"check that the filesystem holding {folder!r} answers (a hung NFS" in done.stderr
    assert not (job.root / "ready").exists()  # the job never started


HANGING_STORE_LAUNCHER = """
import sys, threading
from pathlib import Path
from costaware_runtime import launcher, stores
put = stores.LocalStore.put
def hang(self, key, source, progress=None):
    if not key.startswith("step-"):
        return put(self, key, source, progress)
    Path(sys.argv[1]).touch()
    threading.Event().wait()
stores.LocalStore.put = hang
sys.exit(launcher.main(["--poll-seconds", "0.05", "--", sys.executable, sys.argv[2]]))
"""


def test_a_store_that_hangs_on_a_push_neither_holds_the_exit_nor_loses_the_checkpoint_in_silence(
    make_job: MakeJob,
) -> None:
    # The launcher joined its watcher without a time limit once the job exited: a push that hung kept the
    # launcher (and the machine, billed) waiting for good. The job exits once the watcher is pushing step 1.
    job = make_job(
        "cr.save_bytes(b'state after 1', step=1)\n"
        "while not (READY.parent / 'pushing').exists():\n"
        "    time.sleep(0.02)\n"
        "cr.exit_preempted()\n"
    )
    launcher = [sys.executable, "-c", HANGING_STORE_LAUNCHER, str(job.root / "pushing"), str(job.script)]
    started = time.monotonic()
    # 3 s, not 1: the bound covers the start's restore too, which a loaded CI machine stalled past 1 s.
    env = job.env(COSTAWARE_STORE_STALL_SECONDS="3")
    done = subprocess.run(launcher, env=env, capture_output=True, text=True, timeout=45)
    assert done.returncode == 77, done.stderr  # preempted before any checkpoint the store holds
    assert time.monotonic() - started < 30
    assert "has sent nothing for 3 s after the job exited, begun" in done.stderr
    assert "(COSTAWARE_STORE_STALL_SECONDS sets how long)" in done.stderr
    assert "checkpoint step 1 may not be in the store, which holds none known to this attempt" in done.stderr
    assert "checkpoint step 1 could not be pushed and the store holds none" in done.stderr


def test_a_checkpoint_folder_made_for_the_run_stays_while_the_watchers_hung_push_reads_it(
    make_job: MakeJob,
) -> None:
    # When the watcher's push hung, the launcher returned early without keeping the folder it made for the
    # checkpoints: removed at exit while the stuck push still read it, step 1 was lost for good.
    job = make_job(
        "cr.save_bytes(b'state after 1', step=1)\n"
        "while not (READY.parent / 'pushing').exists():\n"
        "    time.sleep(0.02)\n"
        "cr.exit_preempted()\n"
    )
    launcher = [sys.executable, "-c", HANGING_STORE_LAUNCHER, str(job.root / "pushing"), str(job.script)]
    env = job.env(COSTAWARE_STORE_STALL_SECONDS="3")  # 3 s: the start's restore on a loaded machine
    del env["COSTAWARE_CHECKPOINT_DIR"]  # the launcher makes a folder for this run
    done = subprocess.run(launcher, env=env, capture_output=True, text=True, timeout=45)
    assert done.returncode == 77, done.stderr
    kept = re.search(
        r"a push before it never ended \(said above\); it stays in (\S+); once (\S+) answers", done.stderr
    )
    assert kept is not None, done.stderr
    folder = Path(kept.group(1))
    try:
        assert kept.group(2) == str(job.remote)
        assert f"costaware_runtime.push({str(folder)!r}, {str(job.remote)!r})" in done.stderr
        assert (folder / "_costaware_checkpoint.json").exists(), (
            "the unpushed checkpoint went with the scratch"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


#: Runs costaware-run with a checkpoint store that takes 0.4 s per file of a step folder (a slow link that
#: keeps going); the test gives COSTAWARE_STORE_STALL_SECONDS=1, the wait for a push that makes no progress.
SLOW_STORE_LAUNCHER = """
import sys, time
from pathlib import Path
from costaware_runtime import launcher, stores
put = stores.LocalStore.put
def slow(self, key, source, progress=None):
    if key.startswith("step-"):
        Path(sys.argv[1]).touch()
        time.sleep(0.4)
    return put(self, key, source, progress)
stores.LocalStore.put = slow
sys.exit(launcher.main(["--poll-seconds", "0.05", "--", sys.executable, sys.argv[2]]))
"""


def test_a_push_still_finishing_files_after_the_job_exits_is_waited_for_past_the_bound(
    make_job: MakeJob,
) -> None:
    # stop() gave up STOP_SECONDS after the job exited however the push went: a big checkpoint still
    # uploading, file after file, was cut off and lost (exit 77, no LATEST.json) where it used to be kept.
    job = make_job(
        "folder = Path(os.environ['COSTAWARE_CHECKPOINT_DIR'])\n"
        "folder.mkdir(parents=True, exist_ok=True)\n"
        "names = [f'part-{i}' for i in range(8)]\n"
        "for name in names:\n"
        "    (folder / name).write_bytes(name.encode())\n"
        "cr.commit(folder, 1, names)\n"
        "while not (READY.parent / 'pushing').exists():\n"
        "    time.sleep(0.02)\n"
        "cr.exit_preempted()\n"
    )
    launcher = [sys.executable, "-c", SLOW_STORE_LAUNCHER, str(job.root / "pushing"), str(job.script)]
    # 2 s: five times the 0.4 s between files, for a loaded machine's pauses.
    env = job.env(COSTAWARE_STORE_STALL_SECONDS="2")
    done = subprocess.run(launcher, env=env, capture_output=True, text=True, timeout=60)
    # 8 files at 0.4 s each outlast the 2 s bound, each within it: the push ends, the checkpoint is kept.
    assert done.returncode == 75, done.stderr
    assert "has sent nothing" not in done.stderr
    pointer = json.loads((job.remote / "LATEST.json").read_text())
    assert pointer["step"] == 1, pointer


#: Runs costaware-run with a checkpoint store whose transfers of step folders' files (uploads and downloads)
#: hang for good (argv[1] "hang") or trickle, 64 KiB every 0.12 s (argv[1] "trickle"). The watcher looks once
#: an hour: the last push after the job is the launcher's own.
TRANSFER_STORE_LAUNCHER = """
import sys, threading, time
from costaware_runtime import launcher, stores
mode = sys.argv[1]
put, download = stores.LocalStore.put, stores.LocalStore.download

class Trickling:
    def __init__(self, source):
        self.source = source
    def read(self, size=-1):
        time.sleep(0.12)
        return self.source.read(64 << 10)

def slow_put(self, key, source, progress=None):
    if not key.startswith("step-"):
        return put(self, key, source, progress)
    if mode == "hang":
        threading.Event().wait()
    return put(self, key, Trickling(source), progress)

def slow_download(self, key, destination, progress=None):
    if not key.startswith("step-"):
        return download(self, key, destination, progress)
    if mode == "hang":
        threading.Event().wait()
    with open(self._path(key), "rb") as source:
        stores.LocalStore(destination.parent).put(destination.name, Trickling(source), progress)

stores.LocalStore.put, stores.LocalStore.download = slow_put, slow_download
sys.exit(launcher.main(["--poll-seconds", "3600", "--", sys.executable, sys.argv[2]]))
"""


def _run_with_transfers(job: Job, mode: str) -> subprocess.CompletedProcess[str]:
    """Run ``job`` under :data:`TRANSFER_STORE_LAUNCHER` with a 1.5 s bound; fail the test if it hangs."""
    command = [sys.executable, "-c", TRANSFER_STORE_LAUNCHER, mode, str(job.script)]
    # Wide of the 0.12 s between a trickle's chunks: a loaded machine's pauses are not a stall.
    env = job.env(COSTAWARE_STORE_STALL_SECONDS="1.5")
    launcher = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = launcher.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.communicate()
        pytest.fail(f"the launcher still waits, 30 s on, for a store whose transfers {mode}")
    return subprocess.CompletedProcess(command, launcher.returncode, stdout, stderr)


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_the_last_push_after_the_job_is_bounded_by_the_bytes_it_moves(make_job: MakeJob, mode: str) -> None:
    # The launcher's own last push ran on its main thread with no bound: a store that hung held the exit,
    # and the machine, for good. 1 MiB trickled (~1.9 s) outlasts the 1.5 s bound and is kept.
    job = make_job("cr.save_bytes(b'w' * (1 << 20), step=3)\ncr.exit_preempted()\n")
    done = _run_with_transfers(job, mode)
    if mode == "trickle":
        assert done.returncode == 75, done.stderr
        assert json.loads((job.remote / "LATEST.json").read_text())["step"] == 3
        return
    assert done.returncode == 77, done.stderr  # preempted, and the store holds no checkpoint
    folder = job.root / "attempt-1" / "checkpoints"
    assert f"the last checkpoint push to {job.remote} has moved nothing for 1.5 s" in done.stderr
    assert "(COSTAWARE_STORE_STALL_SECONDS sets how long)" in done.stderr
    assert "checkpoint step 3 may not be in the store, which holds none known to this attempt" in done.stderr
    assert (
        f"it stays in {folder}; once {job.remote} answers, push it with costaware_runtime.push("
        in done.stderr
    )
    assert (folder / "_costaware_checkpoint.json").exists()


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_the_restore_is_bounded_by_the_bytes_it_moves(make_job: MakeJob, mode: str) -> None:
    # The restore ran on the launcher's main thread with no bound, the job never started: billed for good.
    from costaware_runtime import push, save_bytes

    job = make_job("cr.exit_preempted()\n")
    save_bytes(b"r" * (1 << 20), step=3, directory=job.root / "earlier")
    push(job.root / "earlier", str(job.remote))
    done = _run_with_transfers(job, mode)
    if mode == "trickle":
        assert done.returncode == 75, done.stderr
        assert "starting from checkpoint step 3" in done.stderr
        return
    assert done.returncode == 74, done.stderr  # a store failure: retried, and the store still holds step 3
    said = f"could not restore the checkpoint: the restore from {job.remote} has moved nothing for 1.5 s"
    assert said in done.stderr
    assert "the store keeps it, for the next attempt (exit 74, retried)" in done.stderr
    assert json.loads((job.remote / "LATEST.json").read_text())["step"] == 3


#: Runs costaware-run with a checkpoint store whose requests that move no bytes are slow (argv[1]): "reads",
#: each marker read of a step folder takes 0.4 s (many unfinished folders to look into before a restore);
#: "modified", each dating of a step folder takes 0.4 s (many folders of another writer to prune); "listing",
#: listing the step folders takes 3 s once this push's step-3 folder is there (a slow list at the prune).
#: The tests give a 2 s bound: five times each request's 0.4 s, for a loaded machine's pauses.
SLOW_REQUEST_STORE_LAUNCHER = """
import sys, time
from costaware_runtime import launcher, stores
mode = sys.argv[1]
read, modified, folders = stores.LocalStore.read, stores.LocalStore.modified, stores.LocalStore.folders
def slow_read(self, key):
    if mode == "reads" and key.startswith("step-"):
        time.sleep(0.4)
    return read(self, key)
def slow_modified(self, folder):
    if mode == "modified":
        time.sleep(0.4)
    return modified(self, folder)
def slow_folders(self, prefix=""):
    found = folders(self, prefix)
    if mode == "listing" and any(name.startswith("step-3-") for name in found):
        time.sleep(3)
    return found
stores.LocalStore.read, stores.LocalStore.modified = slow_read, slow_modified
stores.LocalStore.folders = slow_folders
sys.exit(launcher.main(["--poll-seconds", "3600", "--", sys.executable, sys.argv[2]]))
"""


def _run_with_slow_requests(job: Job, mode: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", SLOW_REQUEST_STORE_LAUNCHER, mode, str(job.script)]
    return subprocess.run(
        command, env=job.env(COSTAWARE_STORE_STALL_SECONDS="2"), capture_output=True, text=True, timeout=60
    )


def test_a_restore_that_looks_into_many_folders_is_not_given_up_while_the_store_answers(
    make_job: MakeJob,
) -> None:
    # Only bytes moved counted as progress: a restore looking into many step folders (a marker read each, no
    # bytes moved) was given up as a hung store (exit 74) though each read answered within the bound.
    from costaware_runtime import push, save_bytes

    job = make_job("cr.exit_preempted()\n")
    save_bytes(b"r", step=2, directory=job.root / "earlier")
    push(job.root / "earlier", str(job.remote))
    for number in range(8):  # unfinished pushes of a later step: each looked into, none resumed from
        (job.remote / f"step-3-{number:08x}").mkdir()
    done = _run_with_slow_requests(job, "reads")  # 8 reads at 0.4 s: 3.2 s against a 2 s bound
    assert done.returncode == 75, done.stderr
    assert "moved nothing" not in done.stderr
    assert "starting from checkpoint step 2" in done.stderr


@pytest.mark.parametrize("mode", ["modified", "listing"])
def test_a_last_push_whose_prune_is_slow_is_said_to_be_in_the_store(make_job: MakeJob, mode: str) -> None:
    # The prune after the last push moves no bytes: dating many folders of another writer was given up as a
    # stalled push, and a prune that stalled after LATEST.json named the new step said "checkpoint step 3
    # may not be in the store" (exit 77 where the store held none before).
    from costaware_runtime import push, save_bytes

    job = make_job("cr.save_bytes(b'new', step=3)\ncr.exit_preempted()\n")
    if mode == "modified":
        for step in range(1, 3):  # another writer's 8 folders, all recent: dated (0.4 s each) and kept
            for copy in range(4):
                save_bytes(b"old", step=step, directory=job.root / f"earlier-{step}-{copy}")
                push(job.root / f"earlier-{step}-{copy}", str(job.remote))
    done = _run_with_slow_requests(job, mode)
    assert done.returncode == 75, done.stderr
    assert json.loads((job.remote / "LATEST.json").read_text())["step"] == 3
    assert "may not be in the store" not in done.stderr
    assert "could not be pushed" not in done.stderr
    if mode == "modified":  # each folder dated within the bound: nothing given up
        assert "moved nothing" not in done.stderr
    else:
        said = (
            f"the last checkpoint is in {job.remote} (the job's last commit, step 3, is in the store "
            "already), but pruning the older step folders there stalled: the last checkpoint push to"
        )
        assert said in done.stderr


def test_a_watchers_push_that_stalls_pruning_says_the_last_checkpoint_is_in_the_store(
    make_job: MakeJob,
) -> None:
    # The watcher pushed step 3 while the job ran on, then stalled listing the folders to prune: LATEST.json
    # named step 3 and the exit was 75, but the log said "could not push the last checkpoint ... push it
    # with costaware_runtime.push(...)" and "checkpoint step 3 could not be pushed".
    launcher = SLOW_REQUEST_STORE_LAUNCHER.replace('"--poll-seconds", "3600"', '"--poll-seconds", "0.1"')
    job = make_job("cr.save_bytes(b'new', step=3)\nimport time; time.sleep(0.6)\ncr.exit_preempted()\n")
    command = [sys.executable, "-c", launcher, "listing", str(job.script)]
    done = subprocess.run(
        command, env=job.env(COSTAWARE_STORE_STALL_SECONDS="1"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 75, done.stderr
    assert json.loads((job.remote / "LATEST.json").read_text())["step"] == 3
    assert "could not push the last checkpoint" not in done.stderr
    assert "could not be pushed" not in done.stderr
    assert "costaware_runtime.push(" not in done.stderr
    assert ", pruning the older step folders there: going on without it" in done.stderr
    said = (
        f"the last checkpoint is in {job.remote} (the job's last commit, step 3, is in the store already), "
        "but pruning the older step folders there stalled: a checkpoint push to"
    )
    assert said in done.stderr


def test_a_behind_writers_last_push_whose_prune_stalls_says_it_is_behind(make_job: MakeJob) -> None:
    # Another writer's step 5 is the store's latest; this job's step 3 is uploaded, then its prune stalls:
    # the "this writer is behind" warning, said after the prune, was lost, and the line said both "the last
    # checkpoint is in" the store and "checkpoint step 3 may not be in the store".
    from costaware_runtime import push, save_bytes

    job = make_job("cr.save_bytes(b'new', step=3)\ncr.exit_preempted()\n")
    save_bytes(b"other", step=5, directory=job.root / "other")
    push(job.root / "other", str(job.remote))
    command = [sys.executable, "-c", SLOW_REQUEST_STORE_LAUNCHER, "listing", str(job.script)]
    done = subprocess.run(
        command, env=job.env(COSTAWARE_STORE_STALL_SECONDS="1"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 75, done.stderr
    assert json.loads((job.remote / "LATEST.json").read_text())["step"] == 5
    assert "checkpoint step 3 is older than step 5" in done.stderr
    assert "this writer is behind" in done.stderr
    assert "may not be in the store" not in done.stderr
    said = (
        f"the last checkpoint is in {job.remote} (the job's last commit, step 3, is in the store, behind "
        "step 5, which LATEST.json names), but pruning the older step folders there stalled"
    )
    assert said in done.stderr


#: Runs costaware-run with a store whose writes under argv[2] (the output URI, or the result file) hang for
#: good (argv[1] "hang") or trickle, 64 KiB every 0.12 s (argv[1] "trickle"); argv[3] is the job.
AFTER_SUCCESS_STORE_LAUNCHER = """
import sys, threading, time
from costaware_runtime import launcher, stores
mode, target = sys.argv[1], sys.argv[2]
put = stores.LocalStore.put

class Trickling:
    def __init__(self, source):
        self.source = source
    def read(self, size=-1):
        time.sleep(0.12)
        return self.source.read(64 << 10)

def slow_put(self, key, source, progress=None):
    if not self.url(key).startswith(target):
        return put(self, key, source, progress)
    if mode == "hang":
        threading.Event().wait()
    return put(self, key, Trickling(source), progress)

stores.LocalStore.put = slow_put
sys.exit(launcher.main(["--", sys.executable, sys.argv[3]]))
"""

#: A job that succeeds with a 1 MiB model: trickled, it takes ~1.9 s, past the tests' 1.5 s bound.
SUCCEEDING_JOB = (
    "Path(os.environ['COSTAWARE_OUTPUT_DIR'], 'model.bin').write_bytes(b'm' * (1 << 20))\n"
    "cr.write_metrics({'loss': 0.5})\n"
)


@pytest.mark.parametrize("written", ["outputs", "result"])
@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_the_upload_after_a_success_is_bounded_by_the_bytes_it_moves(
    make_job: MakeJob, written: str, mode: str
) -> None:
    # The outputs' upload and the result's write ran with no bound: a store that hung after the training
    # held the launcher, and the machine, for good. One that trickles on is waited for past the bound.
    job = make_job(SUCCEEDING_JOB)
    target = str(job.outputs if written == "outputs" else job.result)
    command = [sys.executable, "-c", AFTER_SUCCESS_STORE_LAUNCHER, mode, target, str(job.script)]
    env = job.env(COSTAWARE_STORE_STALL_SECONDS="1.5")  # wide of the 0.12 s between a trickle's chunks
    launcher = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = launcher.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.communicate()
        pytest.fail(f"the launcher still waits, 30 s on, for a store whose {written} writes {mode}")
    if mode == "trickle":
        assert launcher.returncode == 0, stderr
        assert "has moved nothing" not in stderr
        assert json.loads(job.result.read_text())["bytes"] == 1 << 20
        return
    assert launcher.returncode == 74, stderr  # a store failure: retried
    what = (
        f"the output upload to {job.outputs}" if written == "outputs" else f"the result write to {job.result}"
    )
    assert f"{what} has moved nothing for 1.5 s (COSTAWARE_STORE_STALL_SECONDS sets how long)" in stderr
    assert "check that the store answers (a hung mount, a stalled connection); exit 74, retried" in stderr
    assert not job.result.exists()


#: Runs costaware-run (argv[1] is the job) with the outputs read from a disk that gives 24 MiB a second, as a
#: slow mount does: hashing the job's 24 MiB model takes a second, twice the test's 0.5 s bound.
SLOW_DISK_LAUNCHER = """
import builtins, sys, time
from costaware_runtime import launcher, outputs

class SlowDisk:
    def __init__(self, source):
        self.source = source
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.source.close()
    def readable(self):
        return True
    def seek(self, *args):
        return self.source.seek(*args)
    def read(self, size=-1):
        data = self.source.read(size)
        time.sleep(len(data) / (24 << 20))
        return data
    def readinto(self, buffer):
        size = self.source.readinto(buffer)
        time.sleep(size / (24 << 20))
        return size

outputs.open = lambda path, mode="r": SlowDisk(builtins.open(path, mode))
sys.exit(launcher.main(["--", sys.executable, sys.argv[1]]))
"""


def test_hashing_an_output_longer_than_the_stall_bound_is_not_a_stall(make_job: MakeJob) -> None:
    # Hashing a file reported no progress: one that took longer than the bound to hash turned a job that had
    # succeeded into exit 74 (retried, and billed again each time). Hashing is work moving, not a stall.
    # 64 MiB at 24 MiB/s: ~2.7 s of hashing against a 1.5 s bound; a 1 MiB chunk ~0.04 s leaves a busy CI room
    model = bytes(range(256)) * (64 << 12)
    job = make_job(
        f"Path(os.environ['COSTAWARE_OUTPUT_DIR'], 'model.bin').write_bytes(bytes(range(256)) * {64 << 12})\n"
        "cr.write_metrics({'loss': 0.5})\n"
    )
    command = [sys.executable, "-c", SLOW_DISK_LAUNCHER, str(job.script)]
    done = subprocess.run(
        command, env=job.env(COSTAWARE_STORE_STALL_SECONDS="1.5"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "has moved nothing" not in done.stderr
    manifest = json.loads((job.outputs / "_costaware_manifest.json").read_text())
    assert manifest["files"] == [
        {"path": "model.bin", "bytes": len(model), "sha256": hashlib.sha256(model).hexdigest()}
    ]
    assert (job.outputs / "model.bin").read_bytes() == model
