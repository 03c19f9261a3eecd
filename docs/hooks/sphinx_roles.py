"""MkDocs hook: render the docstrings' Sphinx roles (``:class:`Foo```) as the plain code they name.

The docstrings are Google style but name objects with Sphinx roles, which Markdown renders as
``:class:<code>Foo</code>``. The role adds nothing a reader needs here, so the page shows ``Foo`` alone.
"""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod|obj):(?=<code>)")


def on_page_content(html: str, **kwargs) -> str:
    return ROLE.sub("", html)
