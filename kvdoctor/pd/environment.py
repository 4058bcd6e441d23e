"""What ``pd-eval``'s launches need before anything starts: the server environment for kvdoctor's own launchers, a
program that exists for a user's, torch and transformers for a shrunk checkpoint.

A launcher whose first word is ``python`` runs in kvdoctor's own interpreter (``kvdoctor.deploy.supervisor``), so
the module it runs (``-m sglang.launch_server``: SGLang, with Mooncake for PD; ``-m sglang_router...``, without
``--mini-lb``) must be importable here; any other launcher names a program that must be on ``PATH``. Without this,
a missing SGLang was a launch that died at once (exit 3, "prefill exited with code 1") and a missing transformers an
internal error after the run directory was made. Deployments given by URL (``--router-url`` ...) start nothing and
need nothing here.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from kvdoctor._exceptions import InputError
from kvdoctor.core import environments
from kvdoctor.deploy.plan import split_command

if TYPE_CHECKING:
    from kvdoctor.pd.options import PdEvalOptions

COMMAND = "kvdoctor pd-eval"


def check(o: PdEvalOptions, *, mini_lb: bool) -> None:
    """Refuse (exit 2, one line) a launch that cannot start here: O's launchers, MINI_LB as the plan decides it."""
    if o.prefill_url or o.decode_url or o.router_url:
        return
    launchers = [("--launcher", o.launcher)] + ([] if mini_lb else [("--router-launcher", o.router_launcher)])
    needs: list[str] = []
    for option, command in launchers:
        words = split_command(option, command)
        if words[0] != "python":
            if shutil.which(words[0]) is None:
                raise InputError(f"{option} {command!r}: {words[0]} is not a program on PATH")
        elif words[1:2] == ["-m"] and len(words) > 2:  # a module run by this interpreter: it must be importable here
            top = words[2].split(".")[0]
            needs.append(top)
            if top == environments.SGLANG_SERVER.modules[0]:  # the server pd-eval deploys (SGLang), PD over Mooncake
                needs += [*environments.SGLANG_SERVER.modules, *environments.PD_MODULES]
    if o.shrink:  # the shrunk checkpoint is written by kvdoctor itself, in this Python
        needs += ["torch", "transformers"]
    environments.require(environments.SGLANG_SERVER, COMMAND, modules=tuple(dict.fromkeys(needs)))
