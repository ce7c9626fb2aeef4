"""mkdocs hooks: the pages the site builds from the code and the stores, not from files.

- ``algorithms/*.md``: one page per recipe (``tools.docs.algorithm_pages``);
- ``leaderboard/``: ``rlbench publish`` over the committed reference stores
  (``tools.docs.leaderboard``).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from tools.docs.algorithm_pages import algorithm_pages
from tools.docs.leaderboard import publish_reference_stores

_LOG = logging.getLogger("mkdocs.plugins.rlbench")
_scratch: tempfile.TemporaryDirectory | None = None


def on_files(files: Files, config: MkDocsConfig) -> Files:
    global _scratch
    for path, text in algorithm_pages().items():
        files.append(File.generated(config, path, content=text))
    _scratch = tempfile.TemporaryDirectory(prefix="rlbench-docs-")
    site = Path(_scratch.name) / "site"
    publish_reference_stores(Path(_scratch.name) / "stores", site, echo=False)
    pages = sorted(p for p in site.rglob("*") if p.is_file())
    for path in pages:
        relative = path.relative_to(site).as_posix()
        files.append(File.generated(config, f"leaderboard/{relative}", abs_src_path=str(path)))
    _LOG.info("rlbench: the leaderboard of the reference stores, %d files, goes to "
              "leaderboard/ in the site", len(pages))
    return files


def on_post_build(config: MkDocsConfig) -> None:
    global _scratch
    if _scratch is not None:
        _scratch.cleanup()
        _scratch = None
