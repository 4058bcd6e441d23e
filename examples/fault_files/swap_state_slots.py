"""Swap two live requests' recurrent state (a state-slot mix-up), once, on the pressured SGLang server.

    kvdoctor consistency lfm2-1.2b --shrink --fault-file examples/fault_files/swap_state_slots.py

Right before the pressured server runs its first decode step with two or more requests, the conv/SSM state of the
batch's first and last request trade places in the server's recurrent-state pool. Both requests then decode from
the other's state: kvdoctor names them as the first divergences, and the run is red (exit 1) with the fault-fired
gate green. The bug class of sglang#39830 / vllm#57908: a request reads another request's recurrent state.
See docs/fault-file.md.
"""

from kvdoctor.engines import faultkit

done = False  # once per server process: the fault is a single mix-up, not a storm


@faultkit.wrap("sglang.srt.managers.scheduler:Scheduler.run_batch", role="single")
def swap_state_slots(original, scheduler, batch, *args, **kwargs):
    global done
    reqs = list(batch.reqs or [])
    if done or not batch.forward_mode.is_decode() or len(reqs) < 2:
        faultkit.unchanged("not the first decode step with two or more requests")
        return original(scheduler, batch, *args, **kwargs)
    import torch  # the server's own modules and torch: inside the function, never at the top of the file

    first, last = reqs[0], reqs[-1]
    pool = scheduler.req_to_token_pool
    mamba = getattr(pool, "mamba_pool", None)
    if mamba is None or first.kv.mamba_pool_idx is None or last.kv.mamba_pool_idx is None:
        faultkit.unchanged("this model keeps no recurrent state")
        return original(scheduler, batch, *args, **kwargs)
    slots = torch.cat([first.kv.mamba_pool_idx.reshape(1), last.kv.mamba_pool_idx.reshape(1)]).to(torch.int64)
    slots = pool.translate_mamba_indices(slots).to(torch.int64)  # virtual -> physical slots (identity here)
    swapped = slots.flip(0)
    cache = mamba.mamba_cache
    for state in [*cache.conv, cache.temporal]:  # each (layers, slots, ...): dimension 1 is the slot
        if state is not None and state.numel():
            state[:, slots] = state[:, swapped]  # the right side is a copy: a true swap
    done = True
    faultkit.note(f"swapped the state of {first.rid} and {last.rid} (slots {slots.tolist()})")
    return original(scheduler, batch, *args, **kwargs)
