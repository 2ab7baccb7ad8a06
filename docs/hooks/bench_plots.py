"""mkdocs hook: publish bench/plots/*.png on the site as plots/*.png, so the pages (and bench/README.md,
which docs/benchmark-notes.md includes) show the figures `python -m bench.* --publish` last wrote,
with no copy of them under docs/ to go stale."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

BENCH = Path(__file__).resolve().parents[2] / "bench"


def on_files(files: Files, config) -> Files:
    for png in sorted((BENCH / "plots").glob("*.png")):
        files.append(File(f"plots/{png.name}", src_dir=str(BENCH), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files
