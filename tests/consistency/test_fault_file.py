"""``kvdoctor consistency --fault-file``: refused before anything starts (exit 2, one line), sent to the servers of
the roles it names (and armed), and judged by the fault-fired gate: a fault file that never ran is never a pass."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor._exceptions import EXIT_GATE, EXIT_PASS, InputError
from kvdoctor.consistency import deploy, fault_file, gates
from kvdoctor.consistency.attribution import UNREQUESTED, unrequested_gates
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.result import ConsistencyResult, settled
from kvdoctor.consistency.workload import Workload
from kvdoctor.engines import arming, hook_log
from kvdoctor.engines.fault_file import FAULT_FILE_ENV

HEAD = "from kvdoctor.engines import faultkit\n"
EXAMPLE = Path(__file__).parents[2] / "examples" / "fault_files" / "swap_state_slots.py"
TARGET = "pkg.mod:Cls.fn"


def write(tmp_path: Path, *roles: str, name: str = "mine.py", target: str = TARGET) -> Path:
    lines = ["from kvdoctor.engines import faultkit", ""]
    for i, role in enumerate(roles):
        lines += [f"@faultkit.wrap({target!r}, role={role!r})", f"def f{i}(original, *a, **k):", "    return 1", ""]
    path = tmp_path / name
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def options(path: Path, **kw: object) -> ConsistencyOptions:
    return ConsistencyOptions(model="lfm2-1.2b", shrink=True, fault_file=path, **kw)  # type: ignore[arg-type]


# ---- before anything starts ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("roles", "topology", "said"),
    [
        (("prefill",), "single", "role prefill, which needs --topology pd; this run is --topology single"),
        (("single", "decode"), "single", "role decode, which needs --topology pd"),
        (("single",), "pd", "role single, which needs --topology single; this run is --topology pd"),
    ],
)
def test_a_role_the_topology_lacks_is_refused(tmp_path: Path, roles: tuple[str, ...], topology: str, said: str) -> None:
    with pytest.raises(InputError, match=said):
        fault_file.check(options(write(tmp_path, *roles), topology=topology))


@pytest.mark.parametrize(("roles", "topology"), [(("any",), "single"), (("any",), "pd"), (("prefill", "decode"), "pd")])
def test_roles_the_topology_has_pass(tmp_path: Path, roles: tuple[str, ...], topology: str) -> None:
    fault_file.check(options(write(tmp_path, *roles), topology=topology))


def test_inject_beside_a_fault_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--inject drop-kv and --fault-file .* cannot be combined"):
        fault_file.check(options(write(tmp_path, "any"), topology="pd", inject="drop-kv"))


# ---- the plan: the file goes to the servers of its roles, armed ---------------------------------------------------
def plan(topology: str) -> deploy.Deployment:
    o = deploy.DeployOptions("/m", topology, "cpu", Workload(), has_recurrent=True)
    return deploy.build(o, list(range(30000, 30008)))


@pytest.mark.parametrize(
    ("topology", "roles", "placed"),
    [
        ("single", ("single",), {"pressured": "single"}),
        ("single", ("any",), {"pressured": "single"}),
        ("pd", ("prefill",), {"prefill": "prefill"}),
        ("pd", ("decode",), {"decode-pressured": "decode"}),
        ("pd", ("any",), {"prefill": "prefill", "decode-pressured": "decode"}),
    ],
)
def test_the_file_goes_to_the_servers_of_its_roles_only_with_the_arm_file(
    tmp_path: Path, topology: str, roles: tuple[str, ...], placed: dict[str, str]
) -> None:
    path = write(tmp_path, *roles)
    planned = fault_file.place(plan(topology), options(path, topology=topology), tmp_path / "run")
    got = {s.role: s.env[FAULT_FILE_ENV] for s in planned.steps if FAULT_FILE_ENV in s.env}
    assert got == {role: f"{r}:{path.resolve()}" for role, r in placed.items()}
    assert planned.arm_file == str(tmp_path / "run" / "armed")
    assert all(s.env[arming.ARM_ENV] == planned.arm_file for s in planned.steps if FAULT_FILE_ENV in s.env)
    assert fault_file.place(plan(topology), ConsistencyOptions("m", topology=topology), tmp_path) == plan(topology)


# ---- after the run: the fault-fired gate --------------------------------------------------------------------------
def log(*lines: str) -> hook_log.EventLog:
    return hook_log.parse(f"1 {line}" for line in lines)


LOADED = "fault-file-loaded mine role=single wraps=1 /x/mine.py"
INSTALLED = f"fault-installed mine {TARGET} single"


@pytest.mark.parametrize(
    ("lines", "reason", "said"),
    [
        ((), "no_teeth", "no server process loaded the fault file"),
        ((LOADED,), "no_teeth", "no process of that role imported pkg.mod"),
        (
            (LOADED, f"fault-unresolved mine {TARGET} single: no module named 'pkg' on this server's path"),
            "no_teeth",
            "no module named 'pkg' on this server's path (the target cannot be imported in that server)",
        ),
        ((LOADED, INSTALLED), "no_teeth", "never fired: pkg.mod:Cls.fn (single) was never called"),
        (
            (LOADED, INSTALLED, f"fault-unchanged mine {TARGET} single only one request"),
            "no_teeth",
            "called 1 time(s) while armed, each left unchanged (only one request)",
        ),
        (
            (LOADED, f"fault-refused mine {TARGET} single: AttributeError: no fn"),
            "fault_failed",
            "failed inside the server: mine pkg.mod:Cls.fn single: AttributeError: no fn",
        ),
        (("fault-refused mine: /x/mine.py defines no fault",), "fault_failed", "defines no fault"),
    ],
)
def test_a_fault_file_that_did_not_fire_is_never_a_pass(
    tmp_path: Path, lines: tuple[str, ...], reason: str, said: str
) -> None:
    g = fault_file.gate(fault_file.read(write(tmp_path, "single")), log(*lines))
    assert (g.name, g.passed, g.reason) == ("fault-fired", False, reason) and said in g.message


def test_every_wrap_must_fire(tmp_path: Path) -> None:
    found = fault_file.read(write(tmp_path, "single", "any"))
    fired = f"fault-fired mine {TARGET} single swapped"
    g = fault_file.gate(found, log(LOADED, INSTALLED, fired, fired))
    assert not g.passed and "(any) was never installed" in g.message
    g = fault_file.gate(found, log(LOADED, INSTALLED, fired, fired, f"fault-installed mine {TARGET} any"))
    assert not g.passed and f"{TARGET} (any) was never called" in g.message
    g = fault_file.gate(
        found,
        log(LOADED, INSTALLED, fired, fired, f"fault-installed mine {TARGET} any", f"fault-fired mine {TARGET} any"),
    )
    assert g.passed and g.message == f"fault file mine fired: {TARGET} (single) 2, {TARGET} (any) 1"


def result(*gs: gates.Gate) -> ConsistencyResult:
    r = ConsistencyResult("lfm2-1.2b", "lfm2", "single", "cpu", True, Workload().to_dict())
    return settled(replace(r, gates=list(gs)))


DIVERGED = gates.Gate("tokens", False, "diverged", "2 of 8 requests diverged")


def test_a_divergence_without_a_firing_is_not_credited_to_the_fault(tmp_path: Path) -> None:
    o = options(write(tmp_path, "single"))
    judged = fault_file.judge(o, log(LOADED, INSTALLED), result(DIVERGED))
    assert judged.exit_code == EXIT_GATE and judged.exit_reason == "no_teeth"
    assert [g.name for g in judged.gates] == ["fault-fired", "tokens"]


def test_a_fired_fault_that_diverged_is_red_for_the_divergence(tmp_path: Path) -> None:
    o = options(write(tmp_path, "single"))
    judged = fault_file.judge(o, log(LOADED, INSTALLED, f"fault-fired mine {TARGET} single"), result(DIVERGED))
    assert (judged.exit_code, judged.exit_reason) == (EXIT_GATE, "diverged")
    assert judged.gates[-1].name == "fault-fired" and judged.gates[-1].passed
    clean = fault_file.judge(o, log(LOADED, INSTALLED, f"fault-fired mine {TARGET} single"), result())
    assert clean.exit_code == EXIT_PASS  # the server survived the user's fault: green is the user's finding


def test_the_files_own_events_are_requested_another_faults_are_not(tmp_path: Path) -> None:
    o = options(write(tmp_path, "single"))
    mine = log(LOADED, INSTALLED, f"fault-fired mine {TARGET} single")
    by_reader = result(*unrequested_gates(mine, None))  # what a server's reader saw: "a fault nobody asked for"
    assert by_reader.exit_reason == UNREQUESTED
    assert fault_file.judge(o, mine, by_reader).exit_code == EXIT_PASS
    stray = log(LOADED, INSTALLED, f"fault-fired mine {TARGET} single", "fault-installed drop-kv Req.offload_kv_cache")
    judged = fault_file.judge(o, stray, result(*unrequested_gates(stray, None)))
    assert judged.exit_reason == UNREQUESTED and "drop-kv" in judged.gates[0].message


def test_without_a_fault_file_or_with_a_failed_run_nothing_changes(tmp_path: Path) -> None:
    r = result(DIVERGED)
    assert fault_file.judge(ConsistencyOptions("m"), log(), r) is r
    dead = replace(r, exit_code=3, exit_reason="deployment_failed")
    judged = fault_file.judge(options(write(tmp_path, "single")), log(), dead)
    assert replace(judged, fault_file=None) == dead  # no gate, the same outcome: only the file's record
    assert judged.fault_file and judged.fault_file["loaded"] == 0 and not judged.fault_file["wraps"][0]["installed"]


# ---- the command ---------------------------------------------------------------------------------------------------
def kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", "consistency", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("body", "extra", "said"),
    [
        (None, (), "no such file"),
        ("def f(:\n", (), "is not Python"),
        ("x = 1\n", (), "defines no fault"),
        (HEAD + "faultkit.wrap('a:f', role='router')(print)\n", (), "unknown role"),
        (HEAD + "faultkit.wrap('a', role='single')(print)\n", (), "malformed target"),
        (HEAD + "faultkit.wrap('a:f', role='prefill')(print)\n", (), "--topology pd"),
        (
            HEAD + "faultkit.wrap('a:f', role='any')(print)\n",
            ("--inject", "drop-kv"),
            "cannot be combined",
        ),
    ],
)
def test_the_command_refuses_a_bad_fault_file_in_one_line_before_any_work(
    tmp_path: Path, body: str | None, extra: tuple[str, ...], said: str
) -> None:
    path = tmp_path / "in" / "f.py"
    path.parent.mkdir()
    if body is not None:
        path.write_text(textwrap.dedent(body), encoding="utf-8")
    out = tmp_path / "out"
    done = kvdoctor("lfm2-1.2b", "--shrink", "--fault-file", str(path), "--output-dir", str(out), *extra)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvdoctor: error: --")
    assert said in lines[0]
    assert not out.exists()  # no run directory, no checkpoint, nothing launched


def test_the_dry_run_shows_the_file_on_the_pressured_server_only() -> None:
    done = kvdoctor("lfm2-1.2b", "--shrink", "--fault-file", str(EXAMPLE), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    steps = {s["role"]: s["env"] for s in json.loads(done.stdout)["deployment"]["steps"]}
    assert steps["pressured"][FAULT_FILE_ENV] == f"single:{EXAMPLE.resolve()}"
    assert "kvdoctor/engines/sglang/site_hook" in steps["pressured"]["PYTHONPATH"]  # the hook that loads it
    assert FAULT_FILE_ENV not in steps["reference"] and arming.ARM_ENV in steps["pressured"]


def test_the_docs_worked_example_is_the_example_file_and_reads_clean() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "fault-file.md").read_text(encoding="utf-8")
    listing = doc.split("<!-- example: examples/fault_files/swap_state_slots.py -->\n```python\n", 1)[1]
    assert listing.split("\n```\n", 1)[0] + "\n" == EXAMPLE.read_text(encoding="utf-8")
    found = fault_file.read(EXAMPLE)
    assert (found.name, found.describe()) == (
        "swap_state_slots",
        "sglang.srt.managers.scheduler:Scheduler.run_batch (single)",
    )
