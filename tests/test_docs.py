"""The README and the documentation site: the quickstart runs as written, the API reference names every public
name, and the strict build (what `make docs` and `make test` run) fails on a broken link, cross-reference, anchor
or docstring."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
R3L_CLI = "import sys; from r3l_learn.cli.main import main; sys.exit(main(sys.argv[1:]))"  # `r3l` with this Python


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def test_readme_fits_on_two_screens():
    assert len(_readme().splitlines()) <= 150


def test_readme_links_point_at_files_that_ship():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", _readme())
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local, "the README links to its docs"
    assert [t for t in local if not (ROOT / t).exists()] == []


def test_readme_quickstart_runs_as_written(tmp_path):
    quickstart = _readme().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    code = quickstart.split("```python\n", 1)[1].split("```", 1)[0]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, timeout=300)
    # the `r3l show` the README runs next, on the file the quickstart wrote
    shown = subprocess.run(
        [sys.executable, "-c", R3L_CLI, "show", "groups.jsonl"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "2 bases (0 won), 2 retries (2 won, 2 beat their base)" in shown.stdout


def _public_names() -> dict[str, list[str]]:
    import r3l_envs
    import r3l_learn
    import wrappers

    return {
        "r3l_envs": [n for n in r3l_envs.__all__ if n not in ("__version__",)],
        "wrappers": list(wrappers.__all__),
        "r3l_learn": list(r3l_learn.__all__),
    }


@pytest.mark.parametrize("package", ["r3l_envs", "wrappers", "r3l_learn"])
def test_api_reference_renders_every_public_name(package):
    page = (ROOT / "docs" / "api" / f"{package}.md").read_text(encoding="utf-8")
    rendered = {line.split()[1].rsplit(".", 1)[-1] for line in page.splitlines() if line.startswith("::: ")}
    assert [n for n in _public_names()[package] if n not in rendered] == []


# --- the strict build, on a copy of the docs with one fault injected -------------------------------------------

BROKEN_DOCSTRING = '''
def scale(x: float) -> float:
    """Scale a value.

    Args:
        factor: a parameter the function does not have.
    """
    return x
'''

# fault -> (page, text appended to it, what the build's warning names)
FAULTS = {
    "link": ("guides/envs.md", "\nSee [the missing page](no-such-page.md).\n", "no-such-page.md"),
    "cross-reference": ("guides/envs.md", "\nSee [TextEnv][r3l_envs.NoSuchName].\n", "r3l_envs.NoSuchName"),
    "anchor": ("guides/envs.md", "\nSee [results](../benchmarks/RESULTS.md#no-such-section).\n", "#no-such-section"),
    "docstring": ("api/r3l_envs.md", "\n::: broken_doc.scale\n", "Parameter 'factor' does not appear"),
}


def _make_recipe(target: str) -> str:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]


def _docs_build_args() -> list[str]:
    """The arguments `make docs` gives mkdocs (so a flag that silences the strict check fails these tests)."""
    line = next(x for x in _make_recipe("docs").splitlines() if "mkdocs build" in x)
    return line.split("mkdocs", 1)[1].split()


def test_make_test_builds_the_docs_strict():
    assert "$(MAKE) --no-print-directory docs" in _make_recipe("test")
    assert "--strict" in _docs_build_args()


def _build_copy(tmp_path: Path, faults: list[str]) -> subprocess.CompletedProcess:
    """Build a copy of the site (same config, pages and hook) with ``faults`` injected, as `make docs` builds it;
    returns the finished build."""
    yaml = pytest.importorskip("yaml")
    pytest.importorskip("mkdocs")
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(ROOT / "docs"), str(docs)], check=True)
    src = tmp_path / "src"
    src.mkdir()
    (src / "broken_doc.py").write_text(BROKEN_DOCSTRING, encoding="utf-8")
    for fault in faults:
        page, text, _ = FAULTS[fault]
        with open(docs / page, "a", encoding="utf-8") as f:
            f.write(text)
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config.update(docs_dir=str(docs), site_dir=str(tmp_path / "site"))
    config["hooks"] = [str(ROOT / h) for h in config["hooks"]]
    mkdocstrings = next(p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    mkdocstrings["handlers"]["python"]["paths"] = [str(ROOT), str(src)]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", *_docs_build_args(), "-f", str(tmp_path / "mkdocs.yml")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.mark.slow
def test_the_site_builds_strict_and_loads_nothing_from_the_network(tmp_path):
    done = _build_copy(tmp_path, [])
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    assert (site / "api" / "wrappers.html").is_file()  # pages are files: the site reads from disk
    assert (site / "benchmarks" / "RESULTS.html").is_file()
    external = re.compile(r"""<(?:script|link|img)\b[^>]*(?:src|href)=["']?(?:https?:)?//""")
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert not external.search(html), page
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page
        assert not re.search(r":(?:class|func|meth|mod|data|attr):<code>", html), page  # the roles hook ran


@pytest.mark.slow
def test_the_strict_build_fails_on_each_broken_link_reference_anchor_and_docstring(tmp_path):
    # one build with every fault (a build takes seconds): each must be a warning, which --strict turns into failure
    done = _build_copy(tmp_path, sorted(FAULTS))
    log = done.stdout + done.stderr
    assert done.returncode != 0 and "Aborted with" in log
    warnings = [line for line in log.splitlines() if line.startswith("WARNING")]  # what --strict counts
    assert [fault for fault, (_, _, name) in FAULTS.items() if not any(name in w for w in warnings)] == []
