"""The one SGLang release every rule of this package restates, and the citations the rules make of it.

Every module of the package cites SGLang through :func:`cite`; each call records its :class:`~kvdoctor.core.cite.Cite`
in :data:`CITATIONS`, which the engine suite (``tests/engines/sglang/test_sglang_citations.py``) opens in the installed
SGLang.
"""

from __future__ import annotations

from kvdoctor.core.cite import Citations

RULES_REVISION = "sglang==0.5.23 (retraction semantics of PR #35840, MXFP8 CPU offload of #35888)"

CITATIONS = Citations("sglang", RULES_REVISION)
cite = CITATIONS.cite
