"""Sphinx configuration of the jupyter-gpudev documentation.

Built offline with warnings as errors (``scripts/test.sh``): no intersphinx, nothing fetched.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(ROOT))  # the package itself, for the configuration reference

project = "jupyter-gpudev"
author = "jupyter-gpudev contributors"
copyright = "jupyter-gpudev contributors"
release = version = json.loads((ROOT / "package.json").read_text())["version"]

extensions = ["myst_parser", "gpudev_config"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # links such as shared-mode.md#owners work here and on GitHub

# The reference has a hundred options: the page's own table of contents lists its classes.
toc_object_entries = False

html_theme = "pydata_sphinx_theme"
html_title = "jupyter-gpudev"
html_static_path: list[str] = []
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 4,
    "footer_start": ["copyright"],
    "footer_end": [],
}
# The pages are one level deep, all in the header: no left column of section navigation.
html_sidebars: dict[str, list[str]] = {"**": []}
