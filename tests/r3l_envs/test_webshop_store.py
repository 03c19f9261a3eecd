"""The shared catalogue folder: record files, once-only concurrent builds, crash safety."""

import multiprocessing as mp
import time
from pathlib import Path

import pytest

from r3l_envs.cache import build_dir_once as build_once
from r3l_envs.webshop.catalogue import open_catalogue
from r3l_envs.webshop.store import RecordFile, write_records


def _slow_build(tmp: Path, log: Path) -> None:
    with open(log, "a") as f:
        f.write("built\n")
    time.sleep(0.3)  # long enough for the other builders to queue on the lock
    write_records(tmp, "things", ({"i": i} for i in range(5)))


def _builder(folder: str, log: str) -> None:
    build_once(Path(folder), lambda tmp: _slow_build(tmp, Path(log)))
    assert RecordFile(Path(folder), "things")[4] == {"i": 4}


def test_concurrent_builders_build_once(tmp_path):
    folder, log = tmp_path / "cat", tmp_path / "log"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_builder, args=(str(folder), str(log))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert log.read_text() == "built\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == [".cat.lock", "cat", "log"]  # no temp debris


def test_failed_build_leaves_nothing_and_can_be_retried(tmp_path):
    folder = tmp_path / "cat"

    def broken(tmp):
        write_records(tmp, "things", [{"i": 0}])
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        build_once(folder, broken)
    assert not folder.exists() and [p.name for p in tmp_path.iterdir()] == [".cat.lock"]
    build_once(folder, lambda tmp: write_records(tmp, "things", [{"i": 1}]))
    assert folder.is_dir() and RecordFile(folder, "things")[0] == {"i": 1}


def test_record_file_random_access_and_bounds(tmp_path):
    records = [{"asin": f"B{i}", "title": "ünïcödé ☃" * i} for i in range(50)]
    assert write_records(tmp_path, "p", records) == 50
    store = RecordFile(tmp_path, "p")
    assert len(store) == 50 and store[49] == records[49] and store[0] == records[0]
    with pytest.raises(IndexError):
        store[50]


def test_generated_catalogue_is_deterministic_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("R3L_CACHE_DIR", str(tmp_path / "a"))
    a = open_catalogue(num_products=50, seed=7)
    monkeypatch.setenv("R3L_CACHE_DIR", str(tmp_path / "b"))
    b = open_catalogue(num_products=50, seed=7)
    assert a is not b and a.folder != b.folder
    assert (a.folder / "products.jsonl").read_bytes() == (b.folder / "products.jsonl").read_bytes()
    assert (a.folder / "goals.jsonl").read_bytes() == (b.folder / "goals.jsonl").read_bytes()
    assert open_catalogue(num_products=50, seed=7) is b
    other = open_catalogue(num_products=50, seed=8)
    assert other.products[0] != b.products[0]
    assert {p["category"] for p in (b.products[i] for i in range(50))} == {
        "beauty",
        "electronics",
        "fashion",
        "food",
        "furniture",
    }
