"""The wait state a remote training keeps in XCom: where its resume and the reconcile find the job.

The value is the operator's attempt state (``AttemptState.to_json()``) with ``WAIT_STATE_AWS_CONN_KEY``;
a stop at the cap the wait sent is kept in its ``current`` under ``CAP_STOP_KEY``.
"""

from __future__ import annotations

#: The XCom (of the waiting try) holding the attempt state a deferred wait watches. Airflow resumes a wait
#: that timed out (or whose trigger failed) with nothing of the deferral but the error: this is how that
#: resume finds the job to stop and bill. The wait keeps a stop at the cap it sent there too.
WAIT_STATE_XCOM_KEY = "costaware_wait_state"
#: The wait state's key of the task's AWS connection, which the task's serialized definition does not keep
#: (not a template field): a run-end listener and ``costaware jobs reconcile`` stop and bill with it.
WAIT_STATE_AWS_CONN_KEY = "aws_conn_id"
#: The state's ``current`` key of a stop at the cap this wait sent: ``{"job_id", "sent_at"}``, with the
#: job's ``job`` status and ``seen_at`` as last seen before it, and ``gone_at`` (its first 404) where the
#: job was already gone (a deleted pod: nothing was sent), ``unsent`` once such a job is listed again (its
#: SIGTERM is owed), and ``again_at`` where it was stopped again past its grace period. Kept (see
#: ``_keep_cap_stop``) so that a wait re-created by a triggerer restart stops the job once and bills it to
#: its (latest) grace period's end.
CAP_STOP_KEY = "cap_stop"
