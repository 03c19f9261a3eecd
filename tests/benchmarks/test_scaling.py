"""benchmarks/scaling.py in its smallest mode (WebShop, 1 and 2 workers, local threads vs Ray actors on a local Ray
instance): every row is measured on the same episodes, the modelled calls really wait, the page has its sections,
and a saved scaling.json renders the same page again."""

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason='the ray extra is not installed (pip install -e ".[ray]")')

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import scaling  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_quick_mode_measures_both_backends_and_renders_the_same_page(tmp_path):
    scaling.main(["--quick", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "scaling.json").read_text())

    rows = data["throughput"]["r3l/WebShop-v0"]["rows"]
    assert {(r["backend"], r["workers"]) for r in rows} == {("local", 1), ("local", 2), ("ray", 1), ("ray", 2)}
    assert rows[0]["steps"] > 0 and all(r["steps"] == rows[0]["steps"] for r in rows)  # the same episodes
    overhead = data["overhead"]["r3l/WebShop-v0"]
    for backend in ("local", "ray"):
        assert {k: v["n"] for k, v in overhead[backend].items()} == {"step": 5, "restore": 5, "noop": 5}

    args = data["args"]
    waited = [r for r in data["modelled"] if r["latency_s"]]
    assert len(waited) == 4 and len(data["modelled"]) == 8
    for r in waited:  # at most `at_once` calls wait at a time, so their waits add up to at least this
        at_once = r["workers"] + (r["backend"] == "local" and r["workers"] > 1)  # + the caller (EnvOps.gather)
        assert r["calls"] == args["rounds"] * args["slots"]
        assert all(wall >= args["rounds"] * math.ceil(args["slots"] / at_once) * r["latency_s"] for wall in r["walls"])

    page = (tmp_path / "RESULTS.md").read_text()
    assert page.count("<!-- begin:scaling -->") == 1
    for heading in ("**WebShop**", "Overhead per call", "Modelled latency", "Dispatch ceiling", "On paper"):
        assert heading in page
    scaling.main(["--render", str(tmp_path / "scaling.json"), "--out", str(tmp_path)])
    assert (tmp_path / "RESULTS.md").read_text() == page
