"""The waits `airflow dags test` runs inline, and the kills (SIGTERM, Ctrl-C) that come around them."""

from __future__ import annotations


class InlineWaits:
    """The waits `airflow dags test` runs inline in this process (one at a time, in its main thread)."""

    def __init__(self) -> None:
        self.running = 0
        #: The trainings (``RemoteTrainingJobTrigger.training``) whose task got a SIGTERM while deferred,
        #: outside its inline wait: the wait about to start, or the resume about to bill its event.
        self.killed_outside: set[str] = set()


INLINE_WAITS = InlineWaits()


def note_kill_outside_inline_wait(training: str) -> None:
    """A SIGTERM came while ``training``'s task was deferred in `airflow dags test`, but no wait ran."""
    INLINE_WAITS.killed_outside.add(training)


def take_kill_outside_inline_wait(training: str) -> bool:
    """Whether ``training`` was killed outside its inline wait (see above); the kill is handled once."""
    killed = training in INLINE_WAITS.killed_outside
    INLINE_WAITS.killed_outside.discard(training)
    return killed


def inline_wait_running() -> bool:
    """Whether `airflow dags test` runs a trigger's wait inline now, and has taken no event from it yet.

    A KeyboardInterrupt then cancels the wait, and the trigger stops and bills its job. Once the wait has
    delivered its event (its job ended, say), the task's resumed run bills the job: a KeyboardInterrupt
    before that run starts ended the command with the attempt unbilled and its hold open.
    """
    return INLINE_WAITS.running > 0


def in_dags_test() -> bool:
    """Whether this runs in `airflow dags test` (its in-process supervisor), not a worker or a triggerer.

    There a Ctrl-C is a person's: a worker's supervisor also forwards a SIGINT (the worker shut down with
    Ctrl-C), a triggerer cancels a trigger to hand it to another.
    """
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:  # another Airflow: no inline run known
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)
