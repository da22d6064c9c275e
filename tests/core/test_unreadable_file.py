"""The error for a file that cannot be read gives advice that fits why it cannot be read."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from costaware.adapters.carbon_data import load_carbon
from costaware.core.errors import InvalidPriceDataError, unreadable_file


def test_a_folder_given_as_a_file_is_told_to_give_a_file_in_it(tmp_path: Path) -> None:
    # It said "check the path" whatever the error: a folder's path was right, and checking it told nothing.
    folder = tmp_path / "GB_2026.csv"
    folder.mkdir()
    with pytest.raises(InvalidPriceDataError) as raised:
        load_carbon(folder)
    assert ": Is a directory; that is a folder: give the path of a file in it" in str(raised.value)


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        (
            errno.EACCES,
            "you may not read it: allow your user to read it (chmod/chown), or copy it where you can",
        ),
        (
            errno.EPERM,
            "you may not read it: allow your user to read it (chmod/chown), or copy it where you can",
        ),
        (errno.ENOTDIR, "a part of the path before the file's name is a file, not a folder: check the path"),
        (errno.ENOENT, "check the path"),
    ],
)
def test_each_os_error_gets_its_own_advice(code: int, advice: str, tmp_path: Path) -> None:
    # Tests run as root, whom no file refuses: the error is made as the OS would raise it.
    path = tmp_path / "prices.csv"
    message = unreadable_file("price file", path, OSError(code, "refused", str(path)))
    assert message == f"cannot read price file {str(path)!r}: refused; {advice}"


def test_a_relative_path_not_found_is_told_where_it_was_looked_for() -> None:
    message = unreadable_file("price file", "prices.csv", FileNotFoundError(errno.ENOENT, "No such file"))
    assert message.endswith(": No such file; check the name, or give the file's full path")
    assert f"read as {Path('prices.csv').absolute()}" in message
