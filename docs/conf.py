"""Sphinx configuration of jaxmagic's documentation (``make docs``: build/docs/html/index.html).

Sphinx + myst-nb, as JAX, Flax and Optax build theirs (docs/design/docs_and_release.md says why). Everything is local:
no theme, font, script or style sheet comes from the internet, at build time or when a page is viewed
(tests/test_docs.py checks the built pages). The demo notebooks are the executed copies `make demo`
wrote; they are never executed here.
"""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # document this checkout's jaxmagic, not another installed copy

import jaxmagic  # noqa: E402

project = "jaxmagic"
author = "the jaxmagic authors"
copyright = "the jaxmagic authors"
release = version = jaxmagic.__version__

extensions = [
    "myst_nb",  # Markdown pages (MyST) and notebooks with their saved outputs
    "sphinx.ext.autodoc",  # the probes' API from their docstrings
    "jaxmagic_docs",  # docs/_ext: magic help, the API page, generated pages, the executed notebooks
]

root_doc = "index"
exclude_patterns = ["_build", "_ext", "img/README*", "**/.ipynb_checkpoints", "notebooks/README.md"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}

# Notebooks: shown as `make demo` left them, never executed by the docs build.
nb_execution_mode = "off"
nb_merge_streams = True
# Widget views need ipywidgets' JavaScript from a CDN: none is loaded. The explorers' static caption
# (their output's text/html or text/plain) is what the page shows.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/vnd.jupyter.widget-state+json", None),
]

# The notebooks are the chapter's text: its sections go from H1 to H3, and a traceback that IPython's
# lexer cannot read whole is shown highlighted in relaxed mode. Neither is a broken page.
suppress_warnings = ["myst.header", "misc.highlighting_failure"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# autodoc: signatures as written, members in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_mock_imports: list[str] = []

# The text of help messages and reports is code-like: "--ref" must not become an en dash, nor quotes curly.
smartquotes = False

html_theme = "furo"
html_title = f"jaxmagic {release}"
html_static_path = ["_static"]
html_css_files = ["jaxmagic.css"]
html_theme_options = {
    "source_repository": "",
    "navigation_with_keys": True,
}
html_show_sourcelink = False
html_copy_source = False
# No MathJax: the pages hold no formulas, and MathJax would come from a CDN.
html_math_renderer = None
