#!/usr/bin/env bash
# GPU check: run kvdoctor's device checks on a CUDA machine and print one summary table.
#
#   scripts/gpu-check.sh [--bench-size 4GiB] [--repeats 20] [--out DIR] [--no-sweep] [--only STEP,...]
#
# Steps (--only picks some; default all): mxfp8, roundtrip, finding.
# 1. MXFP8 bit-exactness suite on the device (tests/mxfp8: Triton kernels on CUDA vs the torch
#    reference, golden vectors, hardware-cast proof).  Without CUDA the same suite runs on CPU
#    under the Triton interpreter; this script refuses to run there.
# 2. `kvdoctor bench mxfp8` at a size several times the L2 (default 4 GiB of bf16), plus a
#    1 GiB run for the issue's ">= 80% of the traffic floor at 1 GiB" target, and a tile sweep.
# 3. roundtrip: the round-trip suite, `kvdoctor roundtrip` (kvdoctor's model and SGLang's own pools) and every
#    injected fault, `kvdoctor bench roundtrip`.
# 4. finding: the overlap finding (issue 31) on CUDA: `kvdoctor consistency lfm2-1.2b --shrink --topology pd
#    --device cuda` on real SGLang servers sharing the one GPU, red with the overlap schedule (each request's first
#    backup equal to the reference's state one position past its KV, from the state's bytes) and green with
#    `--disable-overlap-schedule`. It needs an SGLang built for CUDA (with sglang-router and
#    mooncake-transfer-engine): the environment named by GPU_SERVER_ENV (default .venv-server-cuda; its bin/ goes
#    first on PATH, where the servers' `python -m` is found). Without one the step is SKIPPED, never passed.
# Everything lands in $OUT (default kvdoctor-out/gpu-check): junit XML, bench JSON, logs. Exit 0: every step
# ran and came out right; 1: one did not; 2: bad usage or no CUDA; 3: what ran was right but a step was skipped.
set -uo pipefail

BENCH_SIZE="4GiB"
REPEATS=20
OUT_DIR="${OUT:-kvdoctor-out/gpu-check}"
SWEEP="--sweep"
ONLY="mxfp8,roundtrip,finding"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bench-size) BENCH_SIZE="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --no-sweep) SWEEP=""; shift ;;
    --only) ONLY="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
done

[[ -n "${ONLY//,/}" ]] || { echo "gpu-check: --only names no step (mxfp8, roundtrip, finding)" >&2; exit 2; }
for step in ${ONLY//,/ }; do
  case "$step" in
    mxfp8|roundtrip|finding) ;;
    *) echo "gpu-check: unknown step $step in --only (mxfp8, roundtrip, finding)" >&2; exit 2 ;;
  esac
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }

cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT_DIR"
printf '%s\n' "$ONLY" >"$OUT_DIR/steps.txt"
PY="${PYTHON:-python}"

if ! "$PY" -c "import kvdoctor.mxfp8.kernels" 2>/dev/null; then
  # Not installed here: import the checkout directly.
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  "$PY" -c "import kvdoctor.mxfp8.kernels" \
    || { echo "gpu-check: cannot import kvdoctor (missing torch/triton/typer/rich?)" >&2; exit 2; }
fi
kvdoctor() { "$PY" -c "from kvdoctor.cli.app import main; main()" "$@"; }
DEVICE=cuda
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  if [[ "${GPU_CHECK_ALLOW_CPU:-0}" != "1" ]]; then
    echo "gpu-check: no CUDA device visible; run 'pytest tests/mxfp8' for the interpreter suite" >&2
    echo "           (GPU_CHECK_ALLOW_CPU=1 dry-runs this script on CPU)" >&2
    exit 2
  fi
  DEVICE=cpu
  echo "DRY RUN on CPU (Triton interpreter)" | tee "$OUT_DIR/device.txt"
else
  unset TRITON_INTERPRET  # the device suite must run the kernels on the GPU
  "$PY" -c "import torch; p = torch.cuda.get_device_properties(0); \
print(f'{p.name}, {p.total_memory / 2**30:.0f} GiB, sm_{p.major}{p.minor}, \
torch {torch.__version__}')" | tee "$OUT_DIR/device.txt"
fi

status=0
skipped=0
if want mxfp8; then
  echo "== mxfp8 bit-exactness suite on the device"
  "$PY" -m pytest -q -p no:cacheprovider tests/mxfp8 --junitxml="$OUT_DIR/mxfp8-tests.xml" \
    >"$OUT_DIR/mxfp8-tests.log" 2>&1 || status=1
  tail -n 3 "$OUT_DIR/mxfp8-tests.log"

  echo "== bench mxfp8 at $BENCH_SIZE (several x L2)"
  kvdoctor bench mxfp8 --device "$DEVICE" --size "$BENCH_SIZE" --repeats "$REPEATS" $SWEEP --json \
    >"$OUT_DIR/bench-mxfp8.json" 2>"$OUT_DIR/bench-mxfp8.err" || status=1
  TARGET_SIZE="1GiB"
  [[ "$DEVICE" == cpu ]] && TARGET_SIZE="$BENCH_SIZE"
  echo "== bench mxfp8 at $TARGET_SIZE (target size)"
  kvdoctor bench mxfp8 --device "$DEVICE" --size "$TARGET_SIZE" --repeats "$REPEATS" --json \
    >"$OUT_DIR/bench-mxfp8-1gib.json" 2>"$OUT_DIR/bench-mxfp8-1gib.err" || status=1
fi

if want roundtrip; then
  echo "== roundtrip suite on the device (tests/state incl. the CUDA-only stream/pinned tests, CLI)"
  "$PY" -m pytest -q -p no:cacheprovider tests/state tests/cli/test_roundtrip_cli.py \
    --junitxml="$OUT_DIR/roundtrip-tests.xml" >"$OUT_DIR/roundtrip-tests.log" 2>&1 || status=1
  tail -n 3 "$OUT_DIR/roundtrip-tests.log"

  ROUNDTRIP_INKLING=(inkling-small --kv-cache-dtype mxfp8 --disaggregation-mode decode --page-size 128)
  echo "== roundtrip: Inkling MXFP8 (page-interleaved scales) on $DEVICE, then every injected fault"
  kvdoctor roundtrip "${ROUNDTRIP_INKLING[@]}" --device "$DEVICE" --requests 16 --tokens 2048 --json \
    >"$OUT_DIR/roundtrip-inkling.json" 2>"$OUT_DIR/roundtrip-inkling.err" || status=1
  for fault in missing-mamba double-mamba drop-block-scale drop-swa host-pool-on-ssm restore-order clobber-padding; do
    kvdoctor roundtrip "${ROUNDTRIP_INKLING[@]}" --device "$DEVICE" --inject "$fault" --json \
      >"$OUT_DIR/roundtrip-fault-$fault.json" 2>"$OUT_DIR/roundtrip-fault-$fault.err"
    [[ $? -eq 1 ]] || status=1  # a fault must turn the verdict red (exit 1), never pass or crash
  done

  echo "== roundtrip --engine sglang: SGLang's own pools and retraction code on $DEVICE (real D2H copies,"
  echo "   compiled Triton: MXFP8 written by SGLang's quant_store_kv_mxfp8), then every injected fault"
  if [ ! -x .venv-sglang/bin/kvdoctor ]; then make sglang-env >"$OUT_DIR/sglang-env.log" 2>&1 || status=1; fi
  if [ -x .venv-sglang/bin/kvdoctor ]; then
    .venv-sglang/bin/kvdoctor roundtrip "${ROUNDTRIP_INKLING[@]}" --engine sglang --device "$DEVICE" --json \
      >"$OUT_DIR/roundtrip-engine-sglang.json" 2>"$OUT_DIR/roundtrip-engine-sglang.err" || status=1
    for fault in missing-mamba double-mamba drop-block-scale drop-swa host-pool-on-ssm restore-order clobber-padding; do
      .venv-sglang/bin/kvdoctor roundtrip "${ROUNDTRIP_INKLING[@]}" --engine sglang --device "$DEVICE" \
        --inject "$fault" --json >"$OUT_DIR/roundtrip-engine-fault-$fault.json" 2>/dev/null
    done
  fi

  echo "== bench roundtrip (64 requests x 2048 tokens, Inkling MXFP8 decode)"
  kvdoctor bench roundtrip --device "$DEVICE" --json \
    >"$OUT_DIR/bench-roundtrip.json" 2>"$OUT_DIR/bench-roundtrip.err" || status=1
fi

if want finding; then
  echo "== the overlap finding on $DEVICE: LFM2 over PD (shrunk) on real SGLang servers, overlap on, then off"
  SERVER_ENV="${GPU_SERVER_ENV:-.venv-server-cuda}"
  [[ "$DEVICE" == cpu ]] && SERVER_ENV="${GPU_SERVER_ENV:-.venv-server}"  # the CPU dry run: make server-env's
  rm -f "$OUT_DIR"/finding-*.json "$OUT_DIR"/finding.skip
  if [[ ! -x "$SERVER_ENV/bin/kvdoctor" ]] \
    || ! "$SERVER_ENV/bin/python" -c "import sglang, sglang_router, mooncake" 2>/dev/null; then
    echo "no SGLang server environment at $SERVER_ENV (set GPU_SERVER_ENV): kvdoctor installed, sglang," \
      "sglang_router and mooncake importable" | tee "$OUT_DIR/finding.skip"
    skipped=1
  else
    # The workload of tests/consistency/test_bundle_servers.py. On CUDA the prefill and both decodes share the one
    # GPU (each takes a fifth of it; their pools are bounded by kvdoctor's sizing anyway) and skip CUDA-graph capture
    # to stay within minutes: the overlap schedule and the retraction path run the same without graphs.
    FINDING=(lfm2-1.2b --shrink --topology pd --device "$DEVICE" --requests 16 --prompt-tokens 16
      --max-new-tokens 48 --concurrency 16 --output-dir "$OUT_DIR/finding" --json)
    ON_GPU=()
    [[ "$DEVICE" == cuda ]] && ON_GPU=(--mem-fraction-static 0.2 --disable-cuda-graph)
    for run in overlap no-overlap; do
      flags=("${ON_GPU[@]}")
      [[ "$run" == no-overlap ]] && flags+=(--disable-overlap-schedule)
      PATH="$PWD/$SERVER_ENV/bin:$PATH" "$SERVER_ENV/bin/kvdoctor" consistency "${FINDING[@]}" \
        ${flags[@]+-- "${flags[@]}"} >"$OUT_DIR/finding-$run.json" 2>"$OUT_DIR/finding-$run.err"
      rc=$?
      # the finding is red (exit 1) with the overlap schedule and green (exit 0) without it
      if [[ "$run" == overlap ]]; then [[ $rc -eq 1 ]] || status=1; else [[ $rc -eq 0 ]] || status=1; fi
      echo "   $run: exit $rc"
    done
  fi
fi
"$PY" - "$OUT_DIR" <<'PYEOF'
"""One summary table for every gpu-check step (reads the files the steps left in OUT)."""
import json
import pathlib
import sys
import xml.etree.ElementTree as ET

from rich.console import Console
from rich.table import Table

out = pathlib.Path(sys.argv[1])
table = Table(title="kvdoctor gpu-check: " + (out / "device.txt").read_text().strip())
for col in ("check", "result", "detail"):
    table.add_column(col)


def tests(name: str, path: pathlib.Path) -> None:
    if not path.exists():
        table.add_row(name, "[red]MISSING[/red]", f"no {path.name}")
        return
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    n, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    ok = f == 0 and e == 0 and n > 0
    verdict = "[green]PASS[/green]" if ok else "[red]FAIL[/red]"
    table.add_row(name, verdict, f"{n} tests, {f} failed, {e} errors, {s} skipped, "
                  f"{float(suite.get('time', 0)):.1f} s")


def bench(label: str, path: pathlib.Path, target: float | None) -> None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        table.add_row(label, "[red]ERROR[/red]", f"see {path.with_suffix('.err').name}")
        return
    size = f"{data['input_bytes'] / 2**30:.2f} GiB {data['dtype']}"
    peak = f"peak {data['peak_gbps']:.0f} GB/s ({data['peak_source']})"
    table.add_row(label, "", f"{size}, {peak}")
    for r in data["rows"]:
        frac = r["floor_fraction"]
        verdict = ""
        if r["bytes_match"] is False:
            verdict = "[red]BYTES DIFFER[/red]"
        elif target is not None and r["op"] == "quantize" and r["backend"] == "triton":
            verdict = "[green]MEETS[/green]" if frac >= target else "[yellow]BELOW[/yellow]"
            verdict += f" {target:.0%} target"
        ratio = "" if r["vs_cast"] is None else f", {r['vs_cast']:.2f}x cast"
        table.add_row(f"  {r['op']} {r['backend']}", verdict,
                      f"{r['gbps']:,.0f} GB/s = {frac:.0%} of floor, "
                      f"{r['median_s'] * 1e6:,.0f} us{ratio}")


steps = (out / "steps.txt").read_text().strip().split(",")
if "mxfp8" in steps:
    tests("mxfp8 bit-exactness (device)", out / "mxfp8-tests.xml")
    bench("bench mxfp8 (bench size)", out / "bench-mxfp8.json", None)
    bench("bench mxfp8 (target size)", out / "bench-mxfp8-1gib.json", 0.80)


def roundtrip(label: str, path: pathlib.Path, expect_ok: bool) -> None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        table.add_row(label, "[red]ERROR[/red]", f"see {path.with_suffix('.err').name}")
        return
    right = data["ok"] is expect_ok and (expect_ok or data["failing"] == data["expected_red"])
    verdict = "[green]PASS[/green]" if right else "[red]FAIL[/red]"
    detail = "all components bit-exact" if data["ok"] else f"red: {', '.join(data['failing'])}"
    table.add_row(label, verdict, f"{detail} ({data['device']}, {data['elapsed_s']} s)")


def bench_roundtrip(label: str, path: pathlib.Path) -> None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        table.add_row(label, "[red]ERROR[/red]", f"see {path.with_suffix('.err').name}")
        return
    verdict = "[green]bytes identical[/green]" if data["bytes_match"] else "[red]BYTES DIFFER[/red]"
    table.add_row(label, verdict, f"{data['bytes_per_round'] / 2**30:.2f} GiB per round")
    for r in data["rows"]:
        extra = "" if r["vs_naive"] is None else f", {r['vs_naive']:.2f}x naive"
        extra += "" if r["vs_pinned"] is None else f", {r['vs_pinned']:.0%} of pinned memcpy"
        table.add_row(f"  {r['path']} {r['direction']}", "", f"{r['gbps']:,.1f} GB/s{extra}")


if "roundtrip" in steps:
    tests("roundtrip suite (device)", out / "roundtrip-tests.xml")
    roundtrip("roundtrip inkling mxfp8", out / "roundtrip-inkling.json", True)
    for fault_file in sorted(out.glob("roundtrip-fault-*.json")):
        roundtrip(f"  --inject {fault_file.stem.removeprefix('roundtrip-fault-')}", fault_file, False)
    roundtrip("roundtrip --engine sglang", out / "roundtrip-engine-sglang.json", True)
    for fault_file in sorted(out.glob("roundtrip-engine-fault-*.json")):
        roundtrip(f"  sglang --inject {fault_file.stem.removeprefix('roundtrip-engine-fault-')}", fault_file, False)
    bench_roundtrip("bench roundtrip", out / "bench-roundtrip.json")


def finding(label: str, path: pathlib.Path, red: bool) -> None:
    """The overlap finding: red with the overlap schedule, each request's first backup one position past its KV
    (from the state's bytes); green without it. Either side without retractions proves nothing and fails."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        table.add_row(label, "[red]ERROR[/red]", f"see {path.with_suffix('.err').name}")
        return
    retracted = (doc.get("retractions") or {}).get("pressured") or 0
    sb = (doc.get("state_trace") or {}).get("state_bytes") or {}
    firsts = [r["cycles"][0] for r in sb.get("requests", []) if r["cycles"]]
    # a request's first backup against its KV (later ones follow a double feed that moved the state off the path)
    off = 1 if red else 0
    where = [
        c for c in firsts if c["backup"] and c["kv_tokens"] is not None and c["backup"]["pos"] == c["kv_tokens"] + off
    ]
    doubles = sum(bool(c["double_feed"]) for c in firsts)
    right = doc["exit_code"] == (1 if red else 0) and retracted > 0 and bool(firsts)
    right = right and len(where) == len(firsts) and doubles == (len(firsts) if red else 0)
    verdict = "[green]PASS[/green]" if right else "[red]FAIL[/red]"
    said = "one position past their KV" if red else "in step with their KV"
    table.add_row(label, verdict, f"exit {doc['exit_code']} on {doc['device']}, {doc['identical']}/{doc['total']} "
                  f"identical, {retracted} retractions; first backups {said}: {len(where)}/{len(firsts)}, "
                  f"double feeds {doubles} ({doc['wall_s']:.0f} s)")
    if red and sb.get("summary"):
        table.add_row("", "", sb["summary"])


if "finding" in steps:
    skip = out / "finding.skip"
    if skip.exists():
        table.add_row("overlap finding (LFM2 PD)", "[yellow]SKIPPED[/yellow]", skip.read_text().strip())
    else:
        finding("overlap finding: overlap on (red)", out / "finding-overlap.json", True)
        finding("  --disable-overlap-schedule (green)", out / "finding-no-overlap.json", False)

Console(width=140).print(table)
PYEOF
# 0: every step ran and came out right; 1: one did not; 3: all that ran was right, but a step was skipped
[[ $status -eq 0 && $skipped -eq 1 ]] && status=3
exit $status
