"""The golden cases: one kvdoctor command line each, its environment and what it writes.

Each case runs in a fresh scratch directory (its cwd), so report paths are relative and land there;
``files`` are written there before the run (a bad config, an earlier step summary). ``runs_in`` says which
environment runs it: "main" (the system python, no SGLang) or "sglang" (.venv-sglang/, marker ``sglang``).
``without_sglang`` cases show what a machine without SGLang says, so they are skipped where it is installed.
``{scratch}`` in an env value is the scratch directory's absolute path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    runs_in: Literal["main", "sglang"] = "main"
    files: Mapping[str, str] = field(default_factory=dict)
    without_sglang: bool = False


SUMMARY = {"GITHUB_STEP_SUMMARY": "{scratch}/summary.md"}
EARLIER_STEP = {"summary.md": "earlier step\n"}  # a summary is appended to, never overwritten

INKLING = ("inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode", "--page-size", "128")
INKLING_README = (*INKLING, "--max-total-tokens", "65536")
HOST_POOL = (*INKLING, "--disaggregation-decode-retraction-backup", "host_pool")
LMCACHE = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
QWEN_NEXT_LMCACHE = ("qwen3-next-80b-a3b", "--server", "vllm", "--kv-transfer-config", LMCACHE)
PRESET = ("inkling-small", "--preset", "inkling-mxfp8")
SMALL_RUN = ("--requests", "4", "--tokens", "64", "--layers", "2")  # a small round trip: the same paths, faster
VLLM_CPU = ("llama-3.1-8b", "--shrink", "--server", "vllm", "--device", "cpu")
VLLM_CUDA = ("llama-3.1-8b", "--shrink", "--server", "vllm", "--device", "cuda")
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there
EXTERNAL_CLOSED = ("--prefill-url", CLOSED, "--decode-url", CLOSED, "--router-url", CLOSED)

# A config no model could have: a negative layer count (kvdoctor/core/validate.py names file and field).
BAD_CONFIG = """{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 4096,
  "num_hidden_layers": -2,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "head_dim": 128,
  "vocab_size": 128256
}
"""
# A Nemotron-H layer pattern with a letter that is no layer kind (M Mamba, * attention, - MLP, E MoE).
BAD_LAYER_KIND = """{
  "architectures": ["NemotronHForCausalLM"],
  "model_type": "nemotron_h",
  "num_hidden_layers": 4,
  "hybrid_override_pattern": "M*-X"
}
"""

CASES: tuple[Case, ...] = (
    # --- help: every command's usage text
    Case("help", ("--help",)),
    Case("inspect-help", ("inspect", "--help")),
    Case("roundtrip-help", ("roundtrip", "--help")),
    Case("pd-eval-help", ("pd-eval", "--help")),
    Case("drift-help", ("drift", "--help")),
    Case("consistency-help", ("consistency", "--help")),
    Case("bench-help", ("bench", "--help")),
    # --- inspect: the rule model on the bundled fixtures
    Case("inspect-inkling-mxfp8-decode", ("inspect", *INKLING_README)),
    Case("inspect-inkling-mxfp8-decode-json", ("inspect", *INKLING_README, "--json")),
    Case("inspect-inkling-mxfp8-decode-cols60", ("inspect", *INKLING_README), env={"COLUMNS": "60"}),
    Case("inspect-qwen3-next", ("inspect", "qwen3-next-80b-a3b")),
    Case("inspect-qwen3-next-json", ("inspect", "qwen3-next-80b-a3b", "--json")),
    Case("inspect-llama-3.1-8b", ("inspect", "llama-3.1-8b")),
    Case("inspect-llama-3.1-8b-json", ("inspect", "llama-3.1-8b", "--json")),
    Case("inspect-lfm2", ("inspect", "lfm2-1.2b", "--disaggregation-mode", "decode", "--max-total-tokens", "32768")),
    Case("inspect-lfm2-json", ("inspect", "lfm2-1.2b", "--json")),
    Case("inspect-gpt-oss-20b", ("inspect", "gpt-oss-20b")),
    Case("inspect-gpt-oss-20b-json", ("inspect", "gpt-oss-20b", "--json")),
    Case("inspect-deepseek-v3", ("inspect", "deepseek-v3", "--disaggregation-mode", "decode")),
    Case("inspect-deepseek-v3-json", ("inspect", "deepseek-v3", "--json")),
    Case("inspect-deepseek-v3-mxfp8-strict", ("inspect", "deepseek-v3", "--kv-cache-dtype", "mxfp8", "--strict")),
    Case("inspect-nemotron-h-8b", ("inspect", "nemotron-h-8b", "--tp-size", "2")),
    Case("inspect-nemotron-h-8b-json", ("inspect", "nemotron-h-8b", "--json")),
    Case("inspect-falcon-h1", ("inspect", "falcon-h1-1.5b")),
    Case("inspect-falcon-h1-json", ("inspect", "falcon-h1-1.5b", "--json")),
    # error hazards: a warning without --strict, exit 1 with it; JUnit and step summary agree
    Case("inspect-host-pool", ("inspect", *HOST_POOL)),
    Case("inspect-host-pool-strict", ("inspect", *HOST_POOL, "--strict")),
    Case(
        "inspect-host-pool-junit-summary",
        ("inspect", *HOST_POOL, "--junit", "inspect.xml"),
        env=SUMMARY,
        files=EARLIER_STEP,
    ),
    Case(
        "inspect-host-pool-strict-junit-summary",
        ("inspect", *HOST_POOL, "--strict", "--junit", "inspect.xml"),
        env=SUMMARY,
        files=EARLIER_STEP,
    ),
    Case("inspect-clean-junit", ("inspect", *INKLING, "--junit", "inspect.xml")),
    Case("inspect-mxfp8-page-size-16", ("inspect", "llama-3.1-8b", "--kv-cache-dtype", "mxfp8", "--page-size", "16")),
    Case(
        "inspect-not-modelled-flags",
        ("inspect", "llama-3.1-8b", "--enable-torch-compile", "--chunked-prefill-size", "4096"),
    ),
    Case(
        "inspect-launch-line",
        ("inspect", "--", "python", "-m", "sglang.launch_server", "--model-path", "qwen3-8b", "--tp", "2"),
    ),
    Case("inspect-sm90-mxfp8", ("inspect", *INKLING, "--gpu-arch", "sm90")),
    # --- inspect --server vllm
    Case(
        "inspect-vllm-qwen3-next-offload",
        ("inspect", "qwen3-next-80b-a3b", "--server", "vllm", "--kv-offloading-size", "8"),
    ),
    Case(
        "inspect-vllm-qwen3-next-offload-json",
        ("inspect", "qwen3-next-80b-a3b", "--server", "vllm", "--kv-offloading-size", "8", "--json"),
    ),
    Case("inspect-vllm-lmcache-strict", ("inspect", *QWEN_NEXT_LMCACHE, "--strict")),
    Case("inspect-vllm-lmcache-json", ("inspect", *QWEN_NEXT_LMCACHE, "--json")),
    Case(
        "inspect-vllm-lmcache-junit-summary",
        ("inspect", *QWEN_NEXT_LMCACHE, "--junit", "vllm.xml"),
        env=SUMMARY,
    ),
    Case("inspect-vllm-gpt-oss-20b", ("inspect", "gpt-oss-20b", "--server", "vllm")),
    Case("inspect-vllm-deepseek-v3-json", ("inspect", "deepseek-v3", "--server", "vllm", "--json")),
    Case("inspect-vllm-llama-tp3", ("inspect", "llama-3.1-8b", "--server", "vllm", "--tensor-parallel-size", "3")),
    Case(
        "inspect-vllm-llama-tp3-json",
        ("inspect", "llama-3.1-8b", "--server", "vllm", "--tensor-parallel-size", "3", "--json"),
    ),
    Case(
        "inspect-vllm-bad-transfer-config",
        ("inspect", "llama-3.1-8b", "--server", "vllm", "--kv-transfer-config", "{nope"),
    ),
    Case("inspect-vllm-unknown-flag", ("inspect", "llama-3.1-8b", "--server", "vllm", "--max-model-lenn", "4096")),
    # --- without SGLang installed
    Case("inspect-engine-sglang-absent", ("inspect", *INKLING, "--engine", "sglang"), without_sglang=True),
    Case("drift-absent", ("drift",), without_sglang=True),
    # --- bad input: one line and exit 2
    Case("inspect-unknown-fixture", ("inspect", "no-such-model")),
    Case("inspect-unknown-flag", ("inspect", "llama-3.1-8b", "--strcit")),
    Case("inspect-bad-flag-value", ("inspect", "llama-3.1-8b", "--mem-fraction-static", "abc")),
    Case("inspect-repeated-option", ("inspect", "llama-3.1-8b", "--junit", "a.xml", "--junit=b.xml")),
    Case("inspect-bad-config-field", ("inspect", "bad.json"), files={"bad.json": BAD_CONFIG}),
    Case("inspect-bad-layer-kind", ("inspect", "bad.json"), files={"bad.json": BAD_LAYER_KIND}),
    Case("schema-nonsense", ("schema", "nonsense")),
    Case("roundtrip-bad-device", ("roundtrip", "inkling-small", "--device", "gpu")),
    Case("roundtrip-engine-vllm", ("roundtrip", "inkling-small", "--engine", "vllm")),
    Case("roundtrip-repeated-inject", ("roundtrip", *INKLING, "--inject", "missing-mamba", "--inject", "drop-swa")),
    # --- schema
    Case("schema-inspect", ("schema", "inspect")),
    # --- faults: the one fault registry
    Case("faults", ("faults",)),
    Case("faults-vllm-cols80", ("faults", "--server", "vllm"), env={"COLUMNS": "80"}),
    Case("faults-json", ("faults", "--json")),
    Case("faults-bad-path", ("faults", "--path", "nowhere")),
    # --- roundtrip (kvdoctor's own model, CPU)
    Case("roundtrip-demo", ("roundtrip", *INKLING, "--device", "cpu")),
    Case(
        "roundtrip-missing-mamba-junit-summary",
        ("roundtrip", *INKLING, "--device", "cpu", *SMALL_RUN, "--inject", "missing-mamba", "--junit", "rt.xml"),
        env=SUMMARY,
    ),
    Case(
        "roundtrip-drop-block-scale-json",
        ("roundtrip", *INKLING, "--device", "cpu", *SMALL_RUN, "--inject", "drop-block-scale", "--json"),
    ),
    # --- pd-eval: plans, and refusals before anything starts
    Case("pd-eval-dry-run-preset", ("pd-eval", *PRESET, "--dry-run")),
    Case("pd-eval-dry-run-preset-json", ("pd-eval", *PRESET, "--dry-run", "--json")),
    Case(
        "pd-eval-dry-run-llama",
        ("pd-eval", "llama-3.1-8b", "--dry-run", "--tp", "2", "--num-questions", "50", "--", "--page-size", "32"),
    ),
    Case("pd-eval-typo", ("pd-eval", "inkling-small", "--treshold", "0.99")),
    Case("pd-eval-option-after-dashdash", ("pd-eval", "inkling-small", "--dry-run", "--", "--api", "generate")),
    Case("pd-eval-plan-flag-after-dashdash", ("pd-eval", "inkling-small", "--dry-run", "--", "--tp", "4")),
    Case("pd-eval-bad-url", ("pd-eval", "inkling-small", "--prefill-url", "ftp://x", "--dry-run")),
    Case(
        "pd-eval-closed-port",
        ("pd-eval", "inkling-small", *EXTERNAL_CLOSED, "--timeout", "1"),  # 1 s: the deadline, then exit 3
    ),
    # --- consistency: the plan and its input errors
    Case("consistency-dry-run", ("consistency", "llama-3.1-8b", "--shrink", "--topology", "pd", "--dry-run")),
    Case("consistency-bad-topology", ("consistency", "llama-3.1-8b", "--topology", "ring", "--dry-run")),
    # --server vllm's plan: the preempt scenario byte-identical to before --scenario existed, and prefix-cache's
    Case("consistency-vllm-dry-run", ("consistency", *VLLM_CPU, "--dry-run")),
    Case(
        "consistency-vllm-prefix-cache-dry-run", ("consistency", *VLLM_CPU, "--scenario", "prefix-cache", "--dry-run")
    ),
    # --scenario offload: planned on a GPU (both launch lines), refused on a CPU with vLLM's own message (exit 2)
    Case("consistency-vllm-offload-dry-run", ("consistency", *VLLM_CUDA, "--scenario", "offload", "--dry-run")),
    Case("consistency-vllm-offload-cpu-dry-run", ("consistency", *VLLM_CPU, "--scenario", "offload", "--dry-run")),
    # --- the installed SGLang (.venv-sglang/)
    Case("drift-inkling-decode", ("drift", "--fixture", "inkling-small", "--case", "decode"), runs_in="sglang"),
    Case(
        "drift-inkling-decode-json",
        ("drift", "--fixture", "inkling-small", "--case", "decode", "--json"),
        runs_in="sglang",
    ),
    Case(
        "drift-lfm2-colocated-junit",
        ("drift", "--fixture", "lfm2-1.2b", "--case", "colocated", "--junit", "drift.xml"),
        runs_in="sglang",
    ),
    Case("drift-unknown-fixture", ("drift", "--fixture", "no-such-model"), runs_in="sglang"),
    Case("engine-inspect-inkling", ("inspect", *INKLING_README, "--engine", "sglang"), runs_in="sglang"),
    Case("engine-inspect-inkling-json", ("inspect", *INKLING_README, "--engine", "sglang", "--json"), runs_in="sglang"),
    Case("engine-inspect-qwen3-next", ("inspect", "qwen3-next-80b-a3b", "--engine", "sglang"), runs_in="sglang"),
    Case(
        "engine-inspect-qwen3-next-json",
        ("inspect", "qwen3-next-80b-a3b", "--engine", "sglang", "--json"),
        runs_in="sglang",
    ),
    Case("engine-inspect-lfm2", ("inspect", "lfm2-1.2b", "--engine", "sglang"), runs_in="sglang"),
    Case("engine-inspect-lfm2-json", ("inspect", "lfm2-1.2b", "--engine", "sglang", "--json"), runs_in="sglang"),
)
