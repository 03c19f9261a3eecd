"""benchmarks/results_page.py: a benchmark's section of RESULTS.md is replaced in place, the others kept."""

import json
from pathlib import Path

from benchmarks import results_page

ROOT = Path(__file__).resolve().parents[2]


def test_write_section_replaces_its_own_section_in_the_files_it_is_given(tmp_path):
    md, results = tmp_path / "RESULTS.md", tmp_path / "results"
    md.write_text("# Benchmark results\n\n<!-- begin:other -->\nkept\n<!-- end:other -->\n")
    results_page.write_section("mine", "first", {"n": 1}, results_md=md, results_dir=results)
    results_page.write_section("mine", "second\n", {"n": 2}, results_md=md, results_dir=results)
    text = md.read_text()
    assert text == (
        "# Benchmark results\n\n<!-- begin:other -->\nkept\n<!-- end:other -->\n\n"
        "<!-- begin:mine -->\nsecond\n<!-- end:mine -->\n"
    )
    assert json.loads((results / "mine.json").read_text()) == {"n": 2}
    assert results_page.RESULTS_MD == ROOT / "benchmarks" / "RESULTS.md"  # the defaults stay the real files
