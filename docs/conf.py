"""Sphinx configuration of dfgnn's documentation (built by tools/docs.sh into build/docs).

The Python reference comes from the installed package's docstrings (autodoc + napoleon), so the
package must be importable (tools/docs.sh runs Sphinx in the test venv, where tools/python-tests.sh
installed it). The C reference is rendered from runtime/include/dfgnn/dfgnn.h and the CLI pages
run the built tools' --help (both by _ext/dfgnn_docs.py).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

project = "dfgnn"
author = "the dfgnn developers"
copyright = "2026, the dfgnn developers"
try:
    import dfgnn

    release = dfgnn.__version__
except ImportError:  # the API pages then fail (autodoc warns), everything else still builds
    release = "unknown"
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "dfgnn_docs",
]
exclude_patterns = ["_build", "requirements.txt"]
root_doc = "index"
# every public name of these modules must be documented (checked by _ext/dfgnn_docs.py)
dfgnn_api_modules = ["dfgnn", "dfgnn.ops", "dfgnn.torch"]

# autodoc: members in source order, documented members only (private helpers stay out), and
# signatures without type hints (the code has none; the docstrings say the types).
autodoc_default_options = {"members": True, "member-order": "bysource", "show-inheritance": True}
autodoc_typehints = "none"
# a method without a docstring must not borrow its base's (torch.nn.Module.forward's says nothing
# about these layers): it stays undocumented and the completeness check reports it
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = True

# Furo: a clean, searchable theme whose left sidebar always shows the whole page tree, so a
# reader can move between the tutorial, the references and the results from any page.
html_theme = "furo"
html_title = f"dfgnn {release}"
html_static_path = []

primary_domain = "py"
default_role = "code"
