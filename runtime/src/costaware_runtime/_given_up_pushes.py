"""A checkpoint sync whose push was given up: the push that ends late, and the folders the next sync prunes.

Split from ``sync`` (whose module docstring tells why a given-up sync's step folders go at once); the messages
keep ``sync``'s logger.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from costaware_runtime.errors import StoreError
from costaware_runtime.stores import Store

log = logging.getLogger("costaware_runtime.sync")


class GivenUpPushes:
    """What :class:`~costaware_runtime.sync.CheckpointSync`, its one subclass, keeps of a push given up.

    Args:
        given_up_folders: Shared by this process's syncs of one folder and location (see :meth:`give_up`).
    """

    store: Store
    #: The step folders this sync pushed, which it alone may point ``LATEST.json`` at.
    _own: set[str]

    def __init__(self, given_up_folders: set[str] | None) -> None:
        #: Whether a push of this sync was given up (``cr.push()`` then drops it): one ending later is late.
        self.given_up = False
        self._pushing = False
        #: The step folder of the last push, where it ended behind ``LATEST.json`` (see :meth:`give_up`).
        self._behind_folder: str | None = None
        self._pushes_lock = threading.Lock()  # given_up and _pushing: a push's end and its give-up may race
        #: The step folders of syncs of this folder given up earlier in this process (the set is theirs
        #: too): once their push has ended, this one prunes them at once, as its own.
        self.given_up_folders: set[str] = set() if given_up_folders is None else given_up_folders

    @contextlib.contextmanager
    def _pushing_now(self) -> Iterator[None]:
        """Note a push running; where it was given up meanwhile, its end hands this sync's folders over."""
        with self._pushes_lock:
            self._pushing = True
        try:
            yield
        finally:
            with self._pushes_lock:
                self._pushing = False
                ended_given_up = self.given_up
            if ended_given_up:
                self._drop_behind_folder()
                self._hand_over()

    def give_up(self) -> None:
        """Note that :meth:`push_changed` was given up (its caller drops this sync): it ends late, if ever.

        Once it has ended, the step folders this sync pushed go to ``given_up_folders``, which the next sync
        of the folder prunes at once as its own: no writer points ``LATEST.json`` at them any more.
        """
        with self._pushes_lock:
            self.given_up = True
            ended = not self._pushing
        if ended:  # it ended between the give-up and now
            self._hand_over()

    def _hand_over(self) -> None:
        self.given_up_folders.update(self._own)

    def _drop_behind_folder(self) -> None:
        """Delete the folder of a given-up push that ended behind ``LATEST.json``: no push will name it.

        Left to the next sync's prune, it stayed :data:`STALE_FOLDER_SECONDS` (6 h, billed) where the push
        that moved ``LATEST.json`` past it was the job's last. No restore reads it either: ``LATEST.json``
        names a later step, and never goes back. On the given-up push's own thread, which nothing waits on.
        """
        folder, self._behind_folder = self._behind_folder, None
        if folder is None:
            return
        try:
            self.store.delete_folder(folder)
        except StoreError as e:  # left to the next sync of the folder, which prunes it as its own
            log.warning("could not delete %s, which no push will name: %s", self.store.url(folder), e)
            return
        self._own.discard(folder)
