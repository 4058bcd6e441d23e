"""SGLang's own pools for one launch, built by SGLang's own KV-cache configurator.

``KVCacheConfigurator._init_pools`` is the step of SGLang's model runner that turns pool sizes into
a request-to-token pool, a KV pool and an allocator; it picks every class (``SWAKVPool``,
``HybridLinearKVPool``, ``MHATokenToKVPoolMXFP8``, ``HybridReqToTokenPool`` …) from the model
and the launch line. kvdoctor calls it with sizes of its own choosing (a real server derives them
from free GPU memory) so the pools hold exactly the requests of one round trip, on kvdoctor's
``--device``. Nothing here picks a class: if SGLang's choice changes, the round trip follows it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kvdoctor.engines.sglang._runtime import Runtime, _refusal, import_sglang, quiet
from kvdoctor.engines.sglang._support import Lazy, Missing, fitted_call, unsupported


@dataclass(frozen=True)
class PoolPlan:
    """How many requests, token pages and recurrent-state slots the round trip needs."""

    rows: int  # request rows (req_to_token_pool size)
    pages: int  # token pages per KV sub-pool
    page_size: int
    mamba_slots_per_request: int = 1

    @property
    def tokens(self) -> int:
        return self.pages * self.page_size


@dataclass
class EnginePools:
    """What SGLang's configurator built, plus the handles the round trip reads."""

    req_to_token_pool: Any
    kv_pool: Any  # allocator.get_kvcache()
    allocator: Any
    page_size: int
    device: str

    @property
    def mamba_pool(self) -> Any | None:
        return getattr(self.req_to_token_pool, "mamba_pool", None)

    @property
    def sub_pools(self) -> dict[str, Any]:
        """The token-indexed KV pools by role: "full" and, for hybrid SWA, "swa"."""
        kv = self.kv_pool
        out: dict[str, Any] = {}
        full = getattr(kv, "full_kv_pool", None)
        out["full"] = full if full is not None else kv
        swa = getattr(kv, "swa_kv_pool", None)
        if swa is not None:
            out["swa"] = swa
        return out

    @property
    def full_to_swa(self) -> Any | None:
        return getattr(self.allocator, "full_to_swa_index_mapping", None)

    def classes(self) -> dict[str, str]:
        names = {
            "req_to_token_pool": type(self.req_to_token_pool).__name__,
            "kv_pool": type(self.kv_pool).__name__,
            "allocator": type(self.allocator).__name__,
        }
        for role, pool in self.sub_pools.items():
            if pool is not self.kv_pool:
                names[f"{role}_pool"] = type(pool).__name__
        if self.mamba_pool is not None:
            names["mamba_pool"] = type(self.mamba_pool).__name__
        return names


class _SingleRankGroup:
    """The pipeline-parallel group of a one-rank deployment (what ``pp_group`` is on one GPU)."""

    world_size = 1
    rank_in_group = 0
    is_first_rank = True
    is_last_rank = True


_MAX_TRACKING_SLOTS = 2  # a slot count only sizes kvdoctor's tiny pools: more is harmless, fewer fails alloc


def _single_rank_state(attn_dp_size: int) -> Any:
    """SGLang's ``ParallelState`` of a one-rank deployment (the versions whose configurator takes one)."""
    wrapper = import_sglang("sglang.srt.distributed.parallel_state_wrapper")
    return wrapper.ParallelState.trivial(attn_dp_size=attn_dp_size)


def mamba_slots_per_request(runtime: Runtime) -> int:
    """Mamba slots one request takes: its state slot, plus ping-pong tracking buffers when SGLang's
    extra-buffer strategy is on (``HybridReqToTokenPool.alloc``)."""
    ctx = import_sglang("sglang.srt.runtime_context")
    if not ctx.get_exec().mamba.enable_mamba_extra_buffer:
        return 1
    pool_mod = import_sglang("sglang.srt.mem_cache.memory_pool")
    overlap = not ctx.get_schedule().disable_overlap_schedule
    tracking = getattr(pool_mod, "get_mamba_tracking_slots", None)
    if tracking is None:  # SGLang 0.5.20 sizes the ping-pong buffer inside the pool: room for its largest (2)
        return 1 + _MAX_TRACKING_SLOTS
    return 1 + int(tracking(extra_buffer=True, overlap=overlap))


def build(runtime: Runtime, plan: PoolPlan, device: str) -> EnginePools:
    """Run SGLang's configurator on PLAN's sizes and return the pools it built on DEVICE (exit 2, one line, when
    this SGLang lacks a piece the configurator call needs)."""
    try:
        return _build(runtime, plan, device)
    except Missing as exc:
        raise unsupported(runtime.info.version, f"building the pools needs {exc}") from None


def _build(runtime: Runtime, plan: PoolPlan, device: str) -> EnginePools:
    kcc = import_sglang("sglang.srt.mem_cache.kv_cache_configurator")
    ctx = import_sglang("sglang.srt.runtime_context")
    spec_info = import_sglang("sglang.srt.speculative.spec_info")
    aux = import_sglang("sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state")
    load_utils = import_sglang("sglang.srt.model_executor.model_runner_components.load_model_utils")
    mc = runtime.model_config
    arch = import_sglang("sglang.srt.configs.model_config").AttentionArch
    version = runtime.info.version
    configurator = fitted_call(
        kcc.KVCacheConfigurator,
        version,
        device=device,
        gpu_id=0,
        attn_dp_size=ctx.get_parallel().attn_dp_size,
        pp_size=1,
        ps=Lazy(lambda: _single_rank_state(ctx.get_parallel().attn_dp_size)),  # SGLang 0.5.20: one ParallelState
        pp_group=_SingleRankGroup(),
        model=None,
        model_config=mc,
        server_args=runtime.server_args,
        kv_cache_dtype=runtime.kv_cache_dtype,
        kv_cache_dtype_str=runtime.kv_cache_dtype_str,
        model_dtype=mc.dtype,
        page_size=ctx.get_schedule().page_size,
        sliding_window_size=load_utils.resolve_sliding_window_size(None, mc),
        spec_algorithm=spec_info.SpeculativeAlgorithm.from_string(None),
        is_draft_worker=False,
        post_capture_kv_active=False,
        spec_aux_config=aux.SpecAuxHiddenStateConfig(),
        is_hybrid_swa=mc.is_hybrid_swa,
        is_hybrid_swa_compress=mc.is_hybrid_swa_compress,
        use_mla_backend=mc.attention_arch == arch.MLA,
        layer_info=runtime.layer_info,
        forward_stream=None,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=None,
        memory_pool_config=None,
    )
    tokens = plan.tokens
    sizes = fitted_call(
        kcc._PoolSizes,
        version,
        max_total_num_tokens=tokens,
        max_running_requests=plan.rows,
        full_max_total_num_tokens=tokens if mc.is_hybrid_swa else None,
        swa_max_total_num_tokens=tokens if mc.is_hybrid_swa else None,
        c4_max_total_num_tokens=0,
        c128_max_total_num_tokens=0,
        c4_state_pool_size=0,
        c128_state_pool_size=0,
        c4_state_dtype=None,
        c128_state_dtype=None,
    )
    mamba_size = plan.rows * plan.mamba_slots_per_request
    try:
        with quiet(), ctx.get_schedule().override(max_mamba_cache_size=mamba_size):
            built = configurator._init_pools(sizes=sizes, req_to_token_pool=None, token_to_kv_pool_allocator=None)
    except Exception as exc:
        raise _refusal(exc, "cannot build the pools for this launch") from None
    allocator = built.token_to_kv_pool_allocator
    return EnginePools(
        req_to_token_pool=built.req_to_token_pool,
        kv_pool=allocator.get_kvcache(),
        allocator=allocator,
        page_size=int(ctx.get_schedule().page_size),
        device=device,
    )


def _sized(pools: EnginePools, tokens: int | None) -> Any:
    """The allocator, reporting kvdoctor's pool size to the ratio rule when kvdoctor has one."""
    if tokens is None:
        return pools.allocator
    kv = copy.copy(pools.kv_pool)
    kv.size = tokens
    allocator = copy.copy(pools.allocator)
    allocator.get_kvcache = lambda: kv
    return allocator


def full_tokens_per_layer(pools: EnginePools) -> int:
    """The model runner's ``full_max_total_num_tokens``: 0 for an all-SWA model, whose full sub-pool holds no
    layer (``model_executor/pool_configurator.py:865-877``), though its allocator reports a ``size_full``."""
    full = pools.sub_pools.get("full")
    all_swa = full is not None and not int(getattr(full, "layer_num", 1) or 0)
    return 0 if all_swa else int(pools.allocator.size_full)


def resolve_backup(runtime: Runtime, pools: EnginePools, tokens: int | None) -> tuple[str, Any]:
    """SGLang's ``resolve_decode_retraction_backup`` on the built pools: the backend and the hicache ratio.

    It reads a TP worker; a facade over the built pools stands in for it (a GPU process here). With
    TOKENS the KV pool reports that size to the ratio rule (a tiny pool would skew the ratio).
    """
    builder = import_sglang("sglang.srt.mem_cache.kv_cache_builder")
    ctx = import_sglang("sglang.srt.runtime_context")
    spec_info = import_sglang("sglang.srt.speculative.spec_info")
    allocator = _sized(pools, tokens)

    class _Runner:
        mtp_draft_device_pools = ()
        spec_algorithm = spec_info.SpeculativeAlgorithm.from_string(None)
        model_config = runtime.model_config

    class _Worker:
        """The TP worker facade ``resolve_decode_retraction_backup`` reads (a GPU process here)."""

        model_runner = _Runner()
        is_hybrid_swa = runtime.model_config.is_hybrid_swa

        @staticmethod
        def get_memory_pool() -> tuple[Any, Any]:
            return pools.req_to_token_pool, allocator

        @staticmethod
        def get_tokens_per_layer_info() -> tuple[int, int]:
            return full_tokens_per_layer(pools), getattr(pools.allocator, "size_swa", 0)

    with quiet():
        backend = builder.resolve_decode_retraction_backup(tp_worker=_Worker())
    return backend, ctx.get_memory().hicache_ratio
