"""``inspect --server vllm --engine vllm``: the installed vLLM's own answers beside the rule model's.

What vLLM itself computes here, on CPU, from its own classes and functions (no model weights):
- each layer's spec as vLLM's spec class (``FullAttentionSpec``, ``SlidingWindowSpec``,
  ``MLAAttentionSpec``, ``MambaSpec``) and its ``page_size_bytes``; every attention spec is built in vLLM's own
  cache dtype and quant mode (``get_kv_quant_mode``), without content bytes, and customized by the backend vLLM
  selects for that mode (``customize_attention_spec``, as ``GPUModelRunner.get_kv_cache_spec`` applies it:
  TRITON_ATTN for a per-token-head mode, FLASH_ATTN otherwise; nvfp4's packed bytes stay kvdoctor's input); Mamba state
  shapes and dtypes from vLLM's ``MambaStateShapeCalculator`` / ``MambaStateDtypeCalculator`` on the config's
  fields (Granite 4.0, Jamba, LFM2: the architecture's own ``get_mamba_state_shape_from_config`` /
  ``get_mamba_state_dtype_from_config``, the model class vLLM's registry loads, on vLLM's own config object); the
  Mamba block and cache mode from vLLM's ``MambaModelConfig`` (``cache_config.py`` here);
- the groups, from vLLM's ``get_kv_cache_groups`` (hybrid manager on or off as decided below);
- the connector's HMA support, from ``KVConnectorFactory.supports_hma_config`` on a real
  ``KVTransferConfig`` (which imports the connector class);
- per group, what the offloading connector does: ``prefix_cacheable`` and
  ``get_sliding_window_size_in_chunks`` (offloading/config.py), and whether vLLM's own
  ``build_offloading_config`` accepts the groups at all (a hybrid without prefix caching fails its assertion).
- ``max_model_len``, from vLLM's own ``_get_and_verify_max_len`` on the config object vLLM's ``get_config``
  builds from the model's config.json (``cache_config.py``), beside the rule model's (``core/vllm/model_len.py``).
Inputs kvdoctor supplies (printed as such): which layer is which kind and the block size.
Each disagreement is a ``KVD115-VLLM-DRIFT`` error. vLLM's own code failing in a way it does not refuse is no answer
and no drift: exit 3, one line naming its error and vLLM's file:line (:func:`server_failures`; ``drift`` makes it
that cell's error, :func:`failure`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdoctor._exceptions import DeploymentError, EngineUnavailable
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.registry import ERROR, Hazard
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.analysis import (
    VllmAnalysis,
    VllmAnswersFacts,
    VllmBesideReport,
    VllmCheck,
    VllmGroupAnswer,
    VllmUnavailable,
)
from kvdoctor.core.vllm.connectors import Status
from kvdoctor.core.vllm.refusals import total_kv_heads
from kvdoctor.core.vllm.specs import LayerSpec, SpecKind
from kvdoctor.engines import Inspected, InspectQuestion, failures
from kvdoctor.engines.vllm import _runtime as rt
from kvdoctor.engines.vllm import cache_config

OFFLOADING_CONFIG = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.config"
# The one backend of vLLM 0.33 listing the per-token-head KV dtypes (rules.PER_TOKEN_HEAD_BACKEND).
TOKEN_HEAD_BACKEND = ("vllm.v1.attention.backends.triton_attn", "TritonAttentionBackend")
# The backend a plain KV dtype gets on CUDA by default (platforms/cuda.py:169-181 _get_backend_priorities: FLASH_ATTN
# first below SM100; SM100 prefers FLASHINFER, whose module needs flashinfer, which is not installed here).
PLAIN_BACKEND = ("vllm.v1.attention.backends.flash_attn", "FlashAttentionBackend")
REFUSES_CODE = "KVD114-VLLM-REFUSES"
NONE = "none"


_KVDOCTOR = str(Path(__file__).resolve().parents[2])  # kvdoctor's own package: its frames are never vLLM's


def _where(exc: BaseException) -> tuple[str, bool]:
    """The innermost frame inside vLLM that raised EXC as ``vllm/<file>:<line>``, and True; when none is vLLM's,
    kvdoctor's own innermost frame (``kvdoctor's own kvdoctor/<file>:<line>``), and False."""
    tb, vllm, ours = exc.__traceback__, None, None
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if path.startswith(_KVDOCTOR):
            ours = f"kvdoctor's own kvdoctor/{path[len(_KVDOCTOR) :].lstrip('/')}:{tb.tb_lineno}"
        elif "/vllm/" in path:
            vllm = f"vllm/{path.rsplit('/vllm/', 1)[1]}:{tb.tb_lineno}"
        tb = tb.tb_next
    return (vllm, True) if vllm else (ours or "outside vLLM", False)


def failure(exc: BaseException) -> str:
    """vLLM's failure in words: its type, message and where it was raised (``vllm/<file>:<line>``)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]} at {_where(exc)[0]}"


def failed_inside(exc: BaseException, during: str) -> DeploymentError | None:
    """EXC as exit 3 when vLLM's own code raised it (no answer came: not drift, not kvdoctor's bug); None for
    kvdoctor's own errors and for a failure no frame of vLLM's raised (kvdoctor's bug, exit 4)."""
    return failures.failed_inside(exc, during, title="vLLM", raised_in=lambda e: _where(e)[1], failure=failure)


def server_failures(during: str) -> contextlib.AbstractContextManager[None]:
    """Inside the block, an exception vLLM's own code raised ends the run with exit 3 (:func:`failed_inside`)."""
    return failures.server_failures(lambda exc: failed_inside(exc, during))


def check(question: str, kvdoctor: str, vllm: str) -> VllmCheck:
    """One question both sides answered, as text; they agree when the texts are equal."""
    return VllmCheck(question, kvdoctor, vllm, kvdoctor == vllm)


@dataclass
class VllmAnswers:
    info: EngineRef
    checks: list[VllmCheck] = field(default_factory=list)
    groups: list[dict[str, Any]] | None = None
    refusals: list[str] = field(default_factory=list)  # what vLLM's own start-up checks raised
    rule_refuses: bool = False  # the rule model reported a start-up refusal (KVD114) itself
    inputs: tuple[str, ...] = ("layer kinds", "block size")  # what kvdoctor supplied to vLLM's code

    @property
    def drifts(self) -> list[VllmCheck]:
        return [c for c in self.checks if not c.agree]

    def hazards(self) -> list[Hazard]:
        """One ``KVD115-VLLM-DRIFT`` error hazard per question vLLM answers differently, and what the
        installed vLLM refuses as a ``KVD114-VLLM-REFUSES`` error when the rule model reported no
        refusal itself: a launch the installed server refuses never passes."""
        found = [
            Hazard(
                ERROR,
                "KVD115-VLLM-DRIFT",
                f"{c.question}: kvdoctor says {c.kvdoctor}, vLLM {self.info.version} says {c.vllm}",
            )
            for c in self.drifts
        ]
        if self.refusals and not self.rule_refuses:
            found += [
                Hazard(ERROR, REFUSES_CODE, f"the installed vLLM {self.info.version} refuses this launch: {r}")
                for r in self.refusals
            ]
        return found

    def facts(self) -> VllmAnswersFacts:
        """vLLM's answers as ``inspect``'s typed result carries them (its ``--json`` key ``vllm``)."""
        groups = None
        if self.groups is not None:
            groups = tuple(
                VllmGroupAnswer(g["spec"], tuple(g["layers"]), g["block_size"], g["page_size_bytes"])
                for g in self.groups
            )
        return VllmAnswersFacts(
            available=True,
            name=self.info.name,
            version=self.info.version,
            path=self.info.path,
            inputs_from_kvdoctor=self.inputs,
            checks=tuple(self.checks),
            groups=groups,
        )


def vllm_spec(spec: LayerSpec, cache_dtype: str, mamba: tuple[tuple[Any, ...], tuple[Any, ...]] | None) -> Any:
    """The rule model's layer as vLLM's own spec class (Mamba shapes/dtypes from vLLM's calculators).

    An attention layer is built as vLLM's ``Attention.get_kv_cache_spec`` builds it: vLLM's own cache dtype
    (``kv_cache_dtype_str_to_dtype``; ``auto`` is the model dtype the rule model resolved) and vLLM's own quant mode
    (``get_kv_quant_mode``), no content bytes, then customized by the backend vLLM selects for that mode
    (``customize_attention_spec``, as ``GPUModelRunner.get_kv_cache_spec`` applies it; :func:`attention_backend`).
    Which quant mode the layer has is vLLM's answer, never the rule's flag: a rule that forgets a per-token-head
    mode builds a plain page and drifts against vLLM's."""
    iface = rt.load("vllm.v1.kv_cache_interface")
    if spec.kind is SpecKind.MAMBA:
        assert mamba is not None
        return iface.MambaSpec(
            shapes=mamba[0], dtypes=mamba[1], block_size=spec.block_size, page_size_padded=spec.page_size_padded
        )
    quant = iface.get_kv_quant_mode(cache_dtype)
    model = types.SimpleNamespace(dtype=rt.torch_dtype(spec.dtype))  # read only for "auto": the model dtype
    dtype = rt.load("vllm.utils.torch_utils").kv_cache_dtype_str_to_dtype(cache_dtype, model)
    backend = attention_backend(cache_dtype)
    # nvfp4 packs per FlashInfer's customize_spec, whose module needs flashinfer (not importable on CPU): the
    # rule's packed content bytes are kvdoctor's input there (VllmAnswers.inputs says so).
    content = spec.state_content_bytes if backend is None and quant.is_nvfp4 else None
    common = {
        "block_size": spec.block_size,
        "num_kv_heads": spec.num_kv_heads,
        "head_size": spec.head_size,
        "dtype": dtype,
        "kv_quant_mode": quant,
        "state_content_bytes": content,
    }
    if spec.kind is SpecKind.MLA:  # MLA backends are not asked (none customizes a plain MLA spec's bytes here)
        return iface.MLAAttentionSpec(**common, cache_dtype_str=cache_dtype)
    if spec.kind is SpecKind.SLIDING:
        built = iface.SlidingWindowSpec(**common, head_size_v=spec.head_size_v, sliding_window=spec.sliding_window)
    else:
        built = iface.FullAttentionSpec(**common, head_size_v=spec.head_size_v)
    if backend is None:
        return built
    return rt.load("vllm.v1.worker.utils").customize_attention_spec(backend, built)


def attention_backend(cache_dtype: str) -> Any:
    """The attention backend class vLLM would select for CACHE_DTYPE, by vLLM's own quant mode: TRITON_ATTN for a
    per-token-head mode (the one backend listing them, rules.PER_TOKEN_HEAD_BACKEND), FLASH_ATTN (the CUDA default)
    for a plain one; None for nvfp4 (FlashInfer, not importable here). FLASH_ATTN's GPU-dependent kernel block sizes
    (FA4 on SM90/SM100) are answered as this machine's platform sees them: no GPU, ``MultipleOf(16)``."""
    quant = rt.load("vllm.v1.kv_cache_interface").get_kv_quant_mode(cache_dtype)
    if quant.is_per_token_head:
        module, name = TOKEN_HEAD_BACKEND
    elif quant.is_nvfp4:
        return None
    else:
        module, name = PLAIN_BACKEND
    return getattr(rt.load(module), name)


def mamba_state(a: VllmAnalysis) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """vLLM's MambaStateShapeCalculator / MambaStateDtypeCalculator on the config (mamba_utils.py)."""
    if not a.specs.has_mamba:
        return None
    mu = rt.load("vllm.model_executor.layers.mamba.mamba_utils")
    cfg, flags, tp = a.config, a.flags, a.flags.tensor_parallel_size
    model_dtype = next(s.dtypes[0] for s in a.specs.layers.values() if s.kind is SpecKind.MAMBA)
    model_dtype = model_dtype if flags.mamba_cache_dtype == "auto" else "bfloat16"
    if a.specs.family in MODEL_CLASS_STATE:
        return model_class_state(a, model_dtype)
    if a.specs.family.value == "gdn":
        shapes = mu.MambaStateShapeCalculator.gated_delta_net_state_shape(
            tp,
            cfg.get("linear_num_key_heads"),
            cfg.get("linear_num_value_heads"),
            cfg.get("linear_key_head_dim"),
            cfg.get("linear_value_head_dim"),
            cfg.get("linear_conv_kernel_dim"),
            0,
        )
        dtypes = mu.MambaStateDtypeCalculator.gated_delta_net_state_dtype(
            rt.torch_dtype(model_dtype), flags.mamba_cache_dtype, flags.mamba_ssm_cache_dtype
        )
    else:
        heads, head_dim = cfg.get("mamba_num_heads"), cfg.get("mamba_head_dim")
        shapes = mu.MambaStateShapeCalculator.mamba2_state_shape(
            tp_world_size=tp,
            intermediate_size=heads * head_dim,
            n_groups=cfg.get("n_groups"),
            num_heads=heads,
            head_dim=head_dim,
            state_size=cfg.get("ssm_state_size"),
            conv_kernel=cfg.get("conv_kernel"),
        )
        ssm = flags.mamba_ssm_cache_dtype
        if ssm == "auto":  # NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype, vLLM's own default
            conf = rt.load("vllm.model_executor.models.config")
            ssm = cfg.get("mamba_ssm_cache_dtype") or conf.NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE
        dtypes = mu.MambaStateDtypeCalculator.mamba2_state_dtype(
            rt.torch_dtype(model_dtype), flags.mamba_cache_dtype, ssm
        )
    return tuple(tuple(s) for s in shapes), tuple(dtypes)


# Families whose Mamba state the model class itself is asked for (its IsHybrid classmethods).
MODEL_CLASS_STATE = frozenset(
    {rules.Family.MAMBA2_LAYER_TYPES, rules.Family.MAMBA1_HYBRID, rules.Family.SHORT_CONV_HYBRID}
)


def model_class_state(a: VllmAnalysis, model_dtype: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The architecture's own ``get_mamba_state_shape_from_config`` / ``get_mamba_state_dtype_from_config`` (the
    model class vLLM's registry loads, e.g. granitemoehybrid.py:605-646) on vLLM's own config object for the model's
    config.json (``get_config``: transformers' class, its defaults and legacy layer names) and a stand-in VllmConfig
    carrying what they read: the TP width, the Mamba cache dtypes, the model dtype, no speculative tokens."""
    registry = rt.load("vllm.model_executor.models.registry").ModelRegistry
    cls = registry._try_load_model_cls(a.specs.architecture)
    if cls is None:
        raise EngineUnavailable(f"--engine vllm: vLLM's registry cannot load {a.specs.architecture} here")
    hf_config, text = cache_config.hf_configs(a)
    stand_in = types.SimpleNamespace(
        model_config=types.SimpleNamespace(hf_config=hf_config, hf_text_config=text, dtype=rt.torch_dtype(model_dtype)),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=a.flags.tensor_parallel_size),
        cache_config=types.SimpleNamespace(
            mamba_cache_dtype=a.flags.mamba_cache_dtype, mamba_ssm_cache_dtype=a.flags.mamba_ssm_cache_dtype
        ),
        num_speculative_tokens=0,
        speculative_config=None,
    )
    shapes = cls.get_mamba_state_shape_from_config(stand_in)
    dtypes = cls.get_mamba_state_dtype_from_config(stand_in)
    return tuple(tuple(s) for s in shapes), tuple(dtypes)


def _group_text(kind: str, block: int, page: int, names: Any) -> str:
    return f"{kind} block {block} page {page} B x {len(list(names))} layers"


def _status_of(spec: Any, block_size: int, offloading: Any) -> str:
    """What vLLM's offloading config makes of one group spec."""
    if not spec.prefix_cacheable:
        return Status.LEFT.value
    if offloading is None:
        return Status.CARRIED.value
    window = offloading.get_sliding_window_size_in_chunks(spec, block_size)
    iface = rt.load("vllm.v1.kv_cache_interface")
    return Status.WINDOW.value if window is not None and not isinstance(spec, iface.MambaSpec) else Status.CARRIED.value


def parallel_refusals(a: VllmAnalysis) -> list[str]:
    """What vLLM's own start-up checks of ``--tensor-parallel-size`` raise for this model:
    ``ModelConfig.verify_with_parallel_config`` (run on a stand-in model config that carries the
    config's head counts, and a parallel config of this TP width alone), and ``distributed.utils.divide``
    as ``QKVParallelLinear`` calls it on the KV heads (split over TP, or replicated when fewer)."""
    tp = a.flags.tensor_parallel_size
    if tp <= 1:
        return []
    model = rt.load("vllm.config.model")
    dist = rt.load("vllm.distributed.utils")
    heads = a.config.get("num_attention_heads")
    heads = heads if isinstance(heads, int) else 0
    kv = total_kv_heads(a.config)
    mla = a.specs.family is rules.Family.MLA
    arch = types.SimpleNamespace(total_num_attention_heads=heads, total_num_kv_heads=kv)
    stand_in = types.SimpleNamespace(
        model_arch_config=arch, use_mla=mla, multimodal_config=None, get_total_num_kv_heads=lambda: kv
    )
    parallel = types.SimpleNamespace(
        enable_hc_sp=False,
        tensor_parallel_size=tp,
        enable_expert_parallel=False,
        pipeline_parallel_size=1,
        decode_context_parallel_size=1,
        world_size_across_dp=tp,
    )
    found: list[str] = []
    try:
        model.ModelConfig.verify_with_parallel_config(stand_in, parallel)
    except ValueError as exc:
        found.append(str(exc))
    attention = any(s.kind is not SpecKind.MAMBA for s in a.specs.layers.values())
    if attention and not mla and kv > 0:
        try:
            dist.divide(tp, kv) if tp >= kv else dist.divide(kv, tp)
        except AssertionError as exc:
            found.append(str(exc))
    return found


def beside(a: VllmAnalysis) -> VllmAnswers:
    """Ask the installed vLLM; ``EngineUnavailable`` when it cannot be imported."""
    answers = VllmAnswers(rt.engine_info())
    answers.refusals = parallel_refusals(a)
    answers.rule_refuses = (
        bool(a.refusals) or a.refusal is not None or any(r.status is Status.REFUSED for r in a.connector.rows)
    )
    answers.checks.append(
        check(
            "start-up refusals (tensor parallel)",
            "; ".join(r.message for r in a.refusals if r.where is not rules.MAX_LEN_CHECK) or NONE,
            "; ".join(answers.refusals) or NONE,
        )
    )
    length = cache_config.vllm_max_model_len(a)  # vLLM's own _get_and_verify_max_len on its own config object
    ours = a.specs.max_model_len
    answers.checks.append(
        check(
            "max model length", NONE if ours is None else "refused" if ours.refusal else str(ours.tokens), length.answer
        )
    )
    if length.refusal is not None:
        answers.refusals.append(length.refusal)
    if rt.load("vllm.v1.kv_cache_interface").get_kv_quant_mode(a.flags.kv_cache_dtype).is_nvfp4:
        answers.inputs = (*answers.inputs, "nvfp4 content bytes")  # FlashInfer's customize_spec not importable
    mamba = mamba_state(a)
    specs = {name: vllm_spec(s, a.flags.kv_cache_dtype, mamba) for name, s in a.specs.layers.items()}
    if mamba is not None:  # the Mamba block and cache mode as vLLM's config code resolves them
        mode, block = cache_config.mamba_cache(a, length)
        specs = {
            n: cache_config.with_mamba_cache(s, mode, block) if n in _mamba_layers(a) else s for n, s in specs.items()
        }
    for name, rule_spec in a.specs.layers.items():
        theirs = specs[name]
        answers.checks.append(check(f"{name} page bytes", str(rule_spec.page_size_bytes), str(theirs.page_size_bytes)))
        if getattr(theirs, "kv_quant_mode", None) is not None and theirs.kv_quant_mode.is_per_token_head:
            # vLLM's own quant mode decides the question (a rule that forgot the mode answers None)
            ours, vllm = str(rule_spec.state_content_bytes), str(getattr(theirs, "state_content_bytes", None))
            answers.checks.append(check(f"{name} content bytes per (token, head)", ours, vllm))
        if rule_spec.kind is SpecKind.MAMBA:
            ours = f"{[list(s) for s in rule_spec.shapes]} {list(rule_spec.dtypes)}"
            vllm = f"{[list(s) for s in theirs.shapes]} {[str(d).removeprefix('torch.') for d in theirs.dtypes]}"
            answers.checks.append(check(f"{name} Mamba state", ours, vllm))
    hma = _supports_hma(a, answers)
    hybrid = a.hybrid.enabled if hma is None else (hma and a.flags.disable_hybrid_kv_cache_manager is not True)
    planning = rt.load("vllm.v1.core.kv_cache_planning")
    try:
        groups = planning.get_kv_cache_groups(rt.planning_config(hybrid_manager=hybrid), dict(specs))
    except (ValueError, AssertionError, NotImplementedError) as exc:
        answers.checks.append(
            check("KV cache groups", "refused" if a.groups is None else f"{len(a.groups)} groups", "refused")
        )
        answers.groups = None
        answers.refusals.append(f"get_kv_cache_groups raises {type(exc).__name__}: {exc}")
        return answers
    ours = [_group_text(g.kind.value, g.spec.block_size, g.spec.page_size_bytes, g.layer_names) for g in a.groups or ()]
    theirs = [
        _group_text(
            type(g.kv_cache_spec).__name__, g.kv_cache_spec.block_size, g.kv_cache_spec.page_size_bytes, g.layer_names
        )
        for g in groups
    ]
    answers.checks.append(
        check("KV cache groups", "; ".join(ours) if a.groups is not None else "refused", "; ".join(theirs))
    )
    answers.checks.append(
        check(
            "group layers",
            str([list(g.layer_names) for g in a.groups or ()]),
            str([list(g.layer_names) for g in groups]),
        )
    )
    answers.groups = [
        {
            "spec": type(g.kv_cache_spec).__name__,
            "layers": list(g.layer_names),
            "block_size": g.kv_cache_spec.block_size,
            "page_size_bytes": g.kv_cache_spec.page_size_bytes,
        }
        for g in groups
    ]
    rule = a.connector.rule
    if rule is not None and rule.name == "OffloadingConnector" and a.groups is not None:
        offloading = rt.load(OFFLOADING_CONFIG)
        ours_s = [r.status.value for r in a.connector.rows]
        theirs_s = [_status_of(g.kv_cache_spec, g.kv_cache_spec.block_size, offloading) for g in groups]
        refused = cache_config.offloading_refusal(a, list(groups), length)  # vLLM's build_offloading_config
        if refused is not None:
            theirs_s = [Status.REFUSED.value for _ in groups]
            answers.refusals.append(refused)
        answers.checks.append(check("OffloadingConnector per group", str(ours_s), str(theirs_s)))
    return answers


def _mamba_layers(a: VllmAnalysis) -> set[str]:
    return {name for name, s in a.specs.layers.items() if s.kind is SpecKind.MAMBA}


def _supports_hma(a: VllmAnalysis, answers: VllmAnswers) -> bool | None:
    """vLLM's KVConnectorFactory.supports_hma_config on a real KVTransferConfig (imports the class)."""
    transfer = a.flags.transfer
    if transfer is None:
        return None
    kv = rt.load("vllm.config.kv_transfer")
    factory = rt.load("vllm.distributed.kv_transfer.kv_connector.factory")
    config = kv.KVTransferConfig(
        kv_connector=transfer.connector,
        kv_role=transfer.role or "kv_both",
        kv_connector_module_path=transfer.module_path,
        kv_connector_extra_config=dict(transfer.extra),
    )
    try:
        hma = bool(factory.KVConnectorFactory.supports_hma_config(config))
    except Exception as exc:  # the connector's module needs a package not installed here (lmcache, nixl, ...)
        answers.checks.append(
            check(
                f"{transfer.connector} SupportsHMA",
                str(a.connector.supports_hma),
                f"not importable here ({type(exc).__name__})",
            )
        )
        raise EngineUnavailable(
            f"--engine vllm: importing connector {transfer.connector} failed "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None
    answers.checks.append(check(f"{transfer.connector} SupportsHMA", str(a.connector.supports_hma), str(hma)))
    return hma


def inspect_beside(question: InspectQuestion) -> Inspected:
    """vLLM's own answers beside the rule model's report, drift hazards appended; when vLLM cannot be
    imported, the rule model's report says why, a note says so on stderr, and the engine stays kvdoctor."""
    analysis: VllmAnalysis = question.analysis
    report = analysis.report()
    base = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    try:
        with server_failures("inspect --engine vllm"):
            answers = beside(analysis)
    except EngineUnavailable as exc:  # the rule model answered; say why vLLM did not
        unavailable = VllmBesideReport(**base, vllm=VllmUnavailable(available=False, reason=str(exc)))
        return Inspected(unavailable, notes=(f"{exc}; kvdoctor's rule model answered alone",))
    base["hazards"] = (*report.hazards, *answers.hazards())
    return Inspected(VllmBesideReport(**base, vllm=answers.facts()), answers.info, len(answers.drifts))
