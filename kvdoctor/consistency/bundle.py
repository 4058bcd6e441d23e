"""A reproduction bundle for a red real-server run: what a maintainer runs without kvdoctor installed.

Written into ``<run-dir>/bundle/`` for every red SGLang consistency run whose red is the server's own (no
``--inject``, no ``--fault-file``: a planted fault is kvdoctor's, not the server's, and only kvdoctor installs it),
and copied to ``--bundle DIR``. It holds:

- ``run.py`` (:mod:`kvdoctor.consistency.repro.run`, stand-alone: the standard library and the server's HTTP API):
  launches the servers of the red deployment, sends the workload, compares with the reference, exit 0/1/2/3;
- ``bundle.json``: every server's command line and environment as the red run launched them (the checkpoint, ports
  and the bundle's own folder as placeholders; kvdoctor's own ``KVDOCTOR_*`` variables and its trace left out), the
  prompts as token ids, the request bodies, the concurrency, the reference's tokens and logprobs (expected), the
  red run's (observed), the retraction counter and the logprob tolerance;
- ``checkpoint/`` (kvdoctor's seeded checkpoint, each file's sha256 in ``bundle.json``; a model of the user's own is
  named by path and digest, not copied);
- ``enablers/``: the CPU enablers the servers ran with, stand-alone (the ``sgl_kernel`` import-only stand-in; a
  ``sitecustomize`` that sets ``MooncakeKVSender.supports_host_tensor_indices = False``), none on a GPU;
- ``trace/``: the state trace (``digests*.jsonl``) and kvdoctor's result; ``versions.json``;
- ``ISSUE.md``: title, steps, expected vs observed, the cited lines, the workaround.

Files are written into a new folder beside the destination and renamed into place at the end: never half a bundle,
never over a folder that holds anything. ``--bundle`` is checked before launch (:func:`check_destination`). A bundle
is made to be posted publicly: every text file in it is scrubbed of the user's absolute paths (:class:`Scrub`), and
``trace/result.json``'s environments are written as ``bundle.json``'s (no ``KVDOCTOR_*``, no kvdoctor path).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import kvdoctor
from kvdoctor._exceptions import EXIT_GATE, InputError
from kvdoctor.consistency import attribution, client
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.report import json_document
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.deploy import plan
from kvdoctor.deploy.metrics import COUNTER
from kvdoctor.report.atomic import unwind_on_sigterm

BUNDLE_DIR = "bundle"
REPRO = Path(__file__).resolve().parent / "repro"
OVERLAP_WORKAROUND = "--disable-overlap-schedule"
DEFAULT_TOLERANCE = 1e-4  # when the run measured no drift threshold
DISTRIBUTIONS = ("sglang", "sglang-router", "mooncake-transfer-engine", "torch", "triton", "transformers")


@dataclass(frozen=True)
class Written:
    path: Path  # the bundle: --bundle's folder when given (and copied), else the run directory's
    reason: str  # what was written, for the terminal
    warning: str | None = None  # the copy to --bundle failed after the run: the run directory's bundle stands


def check_destination(
    dest: Path | None, *, inject: str | None = None, fault_file: Path | None = None, server: str = "sglang"
) -> None:
    """``--bundle DIR``, refused before anything launches (exit 2, one line) when no bundle could ever land there:
    the run can never write one (``--inject``, ``--fault-file``: the red would be kvdoctor's fault; a server other
    than SGLang), DIR holds anything or is no folder, DIR is a symbolic link (the bundle replaces DIR whole, which
    would replace the link and leave its target empty: give the folder itself), DIR is a mount point (it cannot be
    replaced), or nothing can be created in DIR's parent (proven by creating a folder of our own there and removing
    it: to root, ``os.access`` says yes for ``/proc``)."""
    if dest is None:
        return
    if inject or fault_file is not None:
        flag = f"--inject {inject}" if inject else f"--fault-file {fault_file}"
        raise InputError(
            f"--bundle {dest} with {flag}: such a run never gets a bundle (its red is kvdoctor's fault, which only "
            "kvdoctor installs, not the server's own); drop one of them"
        )
    if server != "sglang":
        raise InputError(f"--bundle {dest} with --server {server}: a bundle reproduces SGLang runs only; drop --bundle")
    try:
        _check_folder(dest)
    except OSError as exc:
        raise InputError(f"--bundle {dest}: {exc.strerror or exc}") from None


def _check_folder(dest: Path) -> None:
    if dest.is_symlink():
        raise InputError(
            f"--bundle {dest}: it is a symbolic link (to {os.readlink(dest)}); the bundle replaces its folder whole, "
            "which would replace the link and leave its target empty: give the folder itself"
        )
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError(f"--bundle {dest}: it exists and is not an empty folder (kvdoctor overwrites nothing)")
    if dest.exists() and os.path.ismount(dest):
        raise InputError(f"--bundle {dest}: it is a mount point, which cannot be replaced: give a new folder in it")
    parent = dest.absolute().parent
    if not parent.exists():
        raise InputError(f"--bundle {dest}: its parent folder {dest.parent} does not exist")
    if not parent.is_dir():
        raise InputError(f"--bundle {dest}: its parent {dest.parent} is not a folder")
    with unwind_on_sigterm():
        try:
            probe = tempfile.mkdtemp(prefix=f".{dest.name}-probe-", dir=parent)
        except OSError as exc:
            raise InputError(
                f"--bundle {dest}: no folder can be created in its parent {dest.parent} ({exc.strerror or exc})"
            ) from None
        os.rmdir(probe)


def why_not(result: ConsistencyResult, fault: str | None) -> str | None:
    """Why this run gets no bundle (None: it gets one)."""
    if result.server != "sglang":
        return f"a bundle reproduces SGLang runs ({result.server}'s is not written yet)"
    if result.exit_code != EXIT_GATE:
        return "the run is not red: nothing to reproduce"
    if fault:
        return f"the red comes from kvdoctor's fault {fault}, which only kvdoctor installs: not the server's own"
    return None


def _ports(steps: Sequence[plan.Step], bootstrap: int | None) -> list[int]:
    found = [int(m.group(1)) for s in steps for m in [re.search(r":(\d+)$", s.url.rstrip("/"))] if m]
    return sorted({*found, *([bootstrap] if bootstrap else [])})


def _template(text: str, ports: dict[int, str], model_dir: str) -> str:
    if text == model_dir:
        return "{checkpoint}"
    for port, name in ports.items():
        if text == str(port):
            return "{" + name + "}"
        text = re.sub(rf":{port}(?=\D|$)", ":{" + name + "}", text)
    return text


def _env(env: dict[str, str], shims: str | None, hook: str | None) -> dict[str, str]:
    """A step's environment without kvdoctor's own variables; kvdoctor's site hook and stand-in on the path become
    the bundle's stand-alone enablers."""
    out = {k: v for k, v in env.items() if not k.startswith("KVDOCTOR_") and k != "PYTHONPATH"}
    path = []
    patches = env.get("KVDOCTOR_PATCHES", "").split(",")
    for entry in env.get("PYTHONPATH", "").split(":"):
        if hook and entry == hook and "mooncake-host-indices" in patches:
            path.append("{bundle}/enablers/site")
            out["REPRO_PATCHES"] = "mooncake-host-indices"
        elif shims and entry == shims:
            path.append("{bundle}/enablers/shims")
            out["KVDOCTOR_STANDIN_LOG"] = "{bundle}/logs/stand-in-calls.log"  # the stand-in's own contract
    if path:
        out["PYTHONPATH"] = ":".join(path)
    return out


class Scrub:
    """The user's own absolute paths, each rewritten to a placeholder wherever the bundle would carry it: a bundle is
    made to be posted publicly. Longest first, each only as a whole path (``/root`` is not ``/rootfs``); the JSON
    spelling of a path (escaped) too. ``--bundle``'s folder is ``{bundle}``, the run directory ``{run_dir}`` (its
    parent ``{output_dir}``), a copied checkpoint ``{checkpoint}`` (as in ``bundle.json``), kvdoctor's checkout (or
    install) ``{kvdoctor}``, a virtual environment ``{venv}``, the working directory ``{cwd}``, the home ``~``."""

    def __init__(self, run_dir: Path, checkpoint: str | None, copy_to: Path | None) -> None:
        named: list[tuple[Path | str | None, str]] = [
            (copy_to, "{bundle}"),
            (run_dir, "{run_dir}"),
            (checkpoint, "{checkpoint}"),
            (run_dir.parent, "{output_dir}"),
            (Path(kvdoctor.__file__).parent.parent, "{kvdoctor}"),
            (sys.prefix if sys.prefix != sys.base_prefix else None, "{venv}"),
            (_cwd(), "{cwd}"),
            (Path.home(), "~"),
        ]
        spelled: dict[str, str] = {}
        for path, placeholder in named:
            if not path:
                continue
            for p in {os.path.abspath(path), os.path.realpath(path)}:
                for text in (p.rstrip("/"), json.dumps(p)[1:-1].rstrip("/")):
                    if text and text not in spelled:  # "/" names no one; the first placeholder named wins
                        spelled[text] = placeholder
        self.rules = [
            (re.compile(rf"(?<![\w.~-]){re.escape(text)}(?![\w.~-])"), placeholder)
            for text, placeholder in sorted(spelled.items(), key=lambda kv: -len(kv[0]))
        ]

    def text(self, text: str) -> str:
        """TEXT with every path of the user's as its placeholder."""
        for pattern, placeholder in self.rules:
            text = pattern.sub(placeholder, text)
        return text

    def file(self, path: Path) -> None:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            return  # no text: nothing kvdoctor wrote
        scrubbed = self.text(text)
        if scrubbed != text:
            path.write_text(scrubbed, encoding="utf-8")


def _envs(value: Any, shims: str | None, hook: str | None) -> Any:
    """VALUE (a JSON document) with every environment in it (a mapping with kvdoctor's own variables or
    ``PYTHONPATH``) as ``bundle.json`` writes it: kvdoctor's variables and its path left out. The user's paths in
    it are :class:`Scrub`'s, when the file is written."""
    if isinstance(value, dict):
        if any(isinstance(k, str) and (k.startswith("KVDOCTOR_") or k == "PYTHONPATH") for k in value):
            value = _env({str(k): str(v) for k, v in value.items()}, shims, hook)
        return {k: _envs(v, shims, hook) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_envs(v, shims, hook) for v in value]
    return value


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed meanwhile: no path to scrub
        return None


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version(), "platform": platform.platform()}
    for name in DISTRIBUTIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _gen(g: Generation) -> dict[str, Any]:
    return {"tokens": list(g.tokens), "logprobs": list(g.logprobs)}


def _found(deployment: Any, suffix: str) -> str | None:
    """The PYTHONPATH entry of kvdoctor's ending in SUFFIX that a server ran with (its site hook, its stand-in)."""
    paths = (p for s in deployment.steps for p in s.env.get("PYTHONPATH", "").split(":"))
    return next((p for p in paths if p.endswith(suffix)), None)


def _spec(
    result: ConsistencyResult,
    deployment: Any,
    prompts: Sequence[Sequence[int]],
    tokens: tuple[Sequence[Generation], Sequence[Generation]],
    workload: Any,
    extra_args: Sequence[str],
    copied: bool,
) -> dict[str, Any]:
    """``bundle.json``: the red deployment's servers (the reference's left out), the workload, the tokens."""
    shims, hook = _found(deployment, "cpu_shims"), _found(deployment, "site_hook")
    roles = [s for s in deployment.steps if "reference" not in s.role]
    ports = {p: f"port{i}" for i, p in enumerate(_ports(roles, deployment.bootstrap_port))}
    model_dir = result.model_dir or ""

    def t(text: str) -> str:
        return _template(text, ports, model_dir)

    steps = [
        {
            "role": s.role,
            "argv": ["{python}" if i == 0 and a == "python" else t(a) for i, a in enumerate(s.argv)],
            "env": {k: t(v) for k, v in _env(dict(s.env), shims, hook).items()},
            "health_url": t(f"{s.url}{s.health_path}"),
            "takes_extra_flags": "sglang.launch_server" in " ".join(s.argv),
        }
        for s in roles
    ]
    warm = {**client.body(prompts[0], workload), "sampling_params": {"temperature": 0.0, "max_new_tokens": 4}}
    return {
        "what": result.summary_line(),
        "ports": len(ports),
        "steps": steps,
        "generate_url": t(f"{deployment.pressured_url}/generate"),
        "metrics_url": t(f"{deployment.pressured_metrics}/metrics"),
        "retraction_counter": COUNTER,
        "warm_up": warm,
        "bodies": [client.body(p, workload) for p in prompts],
        "concurrency": workload.concurrency,
        "expected": [_gen(g) for g in tokens[0]],
        "observed": [_gen(g) for g in tokens[1]],
        "logprob_tolerance": float((result.logprob_drift or {}).get("threshold", DEFAULT_TOLERANCE)),
        "stand_in_log": "{bundle}/logs/stand-in-calls.log" if shims else None,
        "checkpoint": "checkpoint/" if copied else model_dir,
        "weights_digest": result.weights_digest,
        "extra_server_flags": list(extra_args),
        "enablers": {"site": hook, "shims": shims},
    }


def _stage(
    staging: Path, run_dir: Path, result: ConsistencyResult, spec: dict[str, Any], copied: bool, scrub: Scrub
) -> None:
    """Every file of the bundle into STAGING, the user's paths and kvdoctor's variables scrubbed from each file written
    here (the checkpoint's bytes are the run's, digested, and ``run.py`` and the enablers are kvdoctor's own files,
    copied as they are)."""
    (staging / "logs").mkdir()
    shutil.copy2(REPRO / "run.py", staging / "run.py")
    hook, shims = spec["enablers"]["site"], spec["enablers"]["shims"]
    if hook:
        (staging / "enablers" / "site").mkdir(parents=True)
        shutil.copy2(REPRO / "sitecustomize.py", staging / "enablers" / "site" / "sitecustomize.py")
    if shims:
        shutil.copytree(
            Path(shims) / "sgl_kernel",
            staging / "enablers" / "shims" / "sgl_kernel",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    if copied:
        shutil.copytree(result.model_dir or "", staging / "checkpoint")
        spec["checkpoint_sha256"] = {
            str(f.relative_to(staging / "checkpoint")): _sha256(f)
            for f in sorted((staging / "checkpoint").rglob("*"))
            if f.is_file()
        }
    spec["enablers"] = {k: bool(v) for k, v in spec["enablers"].items()}  # kvdoctor's paths stay out of it
    (staging / "trace").mkdir()
    for name in (attribution.DIGEST_LOG, attribution.REFERENCE_DIGEST_LOG):
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, staging / "trace" / name)
    plain = json.loads(json.dumps(_plain(result), default=str))
    (staging / "trace" / "result.json").write_text(json.dumps(_envs(plain, shims, hook), indent=1), "utf-8")
    versions = _versions()
    (staging / "versions.json").write_text(json.dumps(versions, indent=1), encoding="utf-8")
    (staging / "bundle.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    (staging / "ISSUE.md").write_text(issue_text(result, spec, versions), encoding="utf-8")
    for f in sorted(staging.rglob("*")):
        if f.is_file() and f.relative_to(staging).parts[0] not in ("checkpoint", "enablers", "run.py"):
            scrub.file(f)


def _copy(bundle: Path, dest: Path) -> None:
    """BUNDLE to DEST (a new or empty folder), whole or not at all."""
    check_destination(dest)
    temp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        shutil.copytree(bundle, temp / "b")
        if dest.exists():
            dest.rmdir()  # empty (checked): replaced by the whole bundle at once
        os.replace(temp / "b", dest)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def write(
    run_dir: Path,
    result: ConsistencyResult,
    deployment: Any,
    prompts: Sequence[Sequence[int]],
    tokens: tuple[Sequence[Generation], Sequence[Generation]],
    *,
    workload: Any,
    extra_args: Sequence[str],
    copy_to: Path | None = None,
) -> Written:
    """The bundle of red RESULT in RUN_DIR/bundle (and COPY_TO); TOKENS: the reference's and the red run's."""
    copied = result.checkpoint is not None and Path(result.model_dir or "").is_dir()
    spec = _spec(result, deployment, prompts, tokens, workload, extra_args, copied)
    scrub = Scrub(run_dir, result.model_dir if copied else None, copy_to)
    dest = run_dir / BUNDLE_DIR
    staging = Path(tempfile.mkdtemp(prefix=".bundle-", dir=run_dir))
    try:
        _stage(staging, run_dir, result, spec, copied, scrub)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if copy_to is not None:
        try:
            _copy(dest, copy_to)
        except (OSError, InputError) as exc:  # checked before launch; the folder changed during the run
            why = f"not copied to --bundle {copy_to}: {exc}"
            return Written(dest, f"reproduction bundle: {dest} ({why}; python3 {dest}/run.py)", f"the bundle {why}")
    where = copy_to or dest
    return Written(where, f"reproduction bundle: {where} (python3 {where}/run.py; {where}/ISSUE.md)")


def _plain(result: ConsistencyResult) -> dict[str, Any]:
    return json_document(result)


def _workaround(result: ConsistencyResult) -> str | None:
    finding = result.state_trace.finding if result.state_trace else None
    kinds = {k["kind"] for k in (finding or {}).get("kinds", [])}
    return OVERLAP_WORKAROUND if "state_ahead_overlap" in kinds else None


def issue_text(result: ConsistencyResult, spec: dict[str, Any], versions: dict[str, str | None]) -> str:
    """The issue a maintainer reads first: title, steps, expected vs observed, the cited lines, the workaround."""
    first = result.first_divergence
    trace = result.state_trace
    finding = trace.finding if trace else None
    component = (finding or {}).get("component") or "state"
    drift = result.logprob_drift
    changed = {d.index for d in result.requests if d.diverged} | set((drift or {}).get("requests", []))
    title = (
        f"{result.family} over {result.topology.upper() if result.topology == 'pd' else result.topology}: "
        f"{len(changed)}/{result.total} greedy requests change (tokens or logprobs) under "
        f"{'decode retraction' if result.topology == 'pd' else 'retraction'} ({component})"
    )
    lines = [f"# {title}", "", f"SGLang {versions.get('sglang')}, {versions.get('platform')}.", ""]
    lines += [
        "## Steps",
        "",
        "In an environment with the SGLang above (and `sglang-router`, "
        "`mooncake-transfer-engine` for PD), from this folder:",
        "",
        "```console",
        "python3 run.py",
    ]
    workaround = _workaround(result)
    if workaround:
        lines.append(f"python3 run.py -- {workaround}   # the workaround: identical")
    lines += [
        "```",
        "",
        "`run.py` launches the servers in `bundle.json` (the red deployment, with the checkpoint in "
        "`checkpoint/`), sends the prompts (token ids) with the same concurrency, and compares every token and "
        "logprob with the roomy reference's. Exit 1: reproduced; 0: identical with retractions counted; 2: "
        "nothing was retracted; 3: no verdict (a server did not start, a request failed, or the retraction counter "
        "is no count or went backwards); 130/143: stopped by Ctrl-C/SIGTERM, every server it started stopped.",
        "",
    ]
    lines += ["## Expected vs observed", ""]
    lines.append(f"- {result.identical}/{result.total} requests identical; retractions: {result.retractions}.")
    if first is not None:
        lines.append(
            f"- first divergence: request {first.index} at token {first.position}: expected {first.ref_token}, "
            f"observed {first.got_token} (the reference's top-2 margin {first.ref_margin})."
        )
    if drift and drift["requests"]:
        lines.append(
            f"- logprobs move by more than {drift['threshold']:.2g} in {len(drift['requests'])} requests before any "
            f"token diverges (max {drift['max']:.2g}); the reference repeated against itself stays under a hundredth "
            "of that threshold."
        )
    if finding:
        lines += ["", "## Where", "", finding["sentence"], ""]
        lines += [f"- `{c}`" for c in finding.get("cite", [])]
    sb = (trace.state_bytes or {}) if trace else {}
    if sb.get("kept"):
        lines += ["", "From the state's bytes (both decodes kept the recurrent state):", "", f"- {sb['summary']}"]
        lines += [f"- request {r['index']} {c['sentence']}" for r in sb["requests"][:6] for c in r["cycles"][:1]]
    lines += ["", "## Workaround", "", f"`{workaround}` on the decode server." if workaround else "None known.", ""]
    lines += ["## CPU enablers", ""]
    lines += [f"- {e['name']} ({e['where']}): {e['why']}" for e in result.cpu_enablers] or ["- none"]
    lines += ["", f"Found by kvdoctor ({spec['what']}).", ""]
    return "\n".join(lines)


__all__ = ["BUNDLE_DIR", "Written", "check_destination", "issue_text", "why_not", "write"]
