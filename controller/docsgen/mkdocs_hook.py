"""The MkDocs hook (``hooks:`` in ``mkdocs.yml``) that adds the generated reference pages to
the site at build time (:func:`controller.docsgen.generate_pages`).

MkDocs 1.6 builds pages from files it is given in ``on_files``; ``File.generated`` makes one
from a string, so nothing is written into ``docs/`` and nothing generated is committed
(mkdocs-gen-files does the same as a plugin; the hook needs no extra package).
"""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    from controller.docsgen import generate_pages

    for rel, text in generate_pages().items():
        if files.get_file_from_path(rel) is not None:
            files.remove(files.get_file_from_path(rel))  # type: ignore[arg-type]
        files.append(File.generated(config, rel, content=text))
    return files
