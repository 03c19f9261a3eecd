"""write_atomically: the target holds the old bytes or the new ones whole, and a failed write leaves nothing behind."""

from __future__ import annotations

import pytest

from wrappers.data import write_atomically


def test_write_replaces_the_file_and_returns_what_the_writer_returned(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    assert write_atomically(path, lambda tmp: tmp.write_text("new")) == 3
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_writer_that_raises_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")

    def half_then_fail(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, half_then_fail)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_the_file_is_absent_until_the_writer_finishes(tmp_path):
    path = tmp_path / "new.txt"
    seen = []
    write_atomically(path, lambda tmp: (seen.append(path.exists()), tmp.write_text("x")))
    assert seen == [False] and path.read_text() == "x"
