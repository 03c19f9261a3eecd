"""The learner gives free heap pages back to the OS between phases (r3l_learn/loop/memory.py)."""

import subprocess
import sys
import textwrap

import pytest

from r3l_learn.loop.memory import release_free_memory, resident_mb

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")


@linux
def test_resident_mb_reads_this_process():
    found = resident_mb()
    assert set(found) == {"rss_mb", "peak_rss_mb"}
    assert 0 < found["rss_mb"] <= found["peak_rss_mb"]


@linux
def test_release_returns_a_fragmented_heaps_free_pages():
    # 256 MB of 64 KB blocks (below glibc's mmap threshold: they live in the heap), every one freed but the
    # last, which pins the heap's top so free() cannot shrink it on its own. Only a trim gives the pages back.
    script = textwrap.dedent(
        """
        from r3l_learn.loop.memory import release_free_memory, resident_mb
        blocks = [bytearray(64 << 10) for _ in range(4096)]
        last = blocks[-1]
        del blocks
        held = resident_mb()["rss_mb"]
        released = release_free_memory()
        print(held, resident_mb()["rss_mb"], released)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    held, after, released = out.split()
    if released != "True":
        pytest.skip("this C library has no malloc_trim")
    assert float(held) - float(after) > 128  # MB: most of the 256 freed


def test_release_is_harmless_to_call_twice():
    assert release_free_memory() == release_free_memory()
