"""MkDocs hook: publish ``benchmarks/RESULTS.md`` and the plots it shows as pages of the site.

The results page lives beside the benchmarks that regenerate it, outside ``docs/``. Adding it here (rather than
copying it) keeps one source, lets the guides link to its sections, and makes the strict build check those links.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = (
    "benchmarks/RESULTS.md",
    "benchmarks/learning/*.png",
    "benchmarks/learning/*/*.png",
    "benchmarks/results/learning*.json",
)


def on_files(files: Files, config) -> Files:
    for pattern in PUBLISHED:
        for path in sorted(ROOT.glob(pattern)):
            rel = path.relative_to(ROOT).as_posix()
            files.append(File(rel, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
