"""A planted fault for the sweep's own tests: the recurrent state of two live requests swapped once, but only in a
server that runs BOTH ``--schedule-policy lpm`` and ``--enable-mixed-chunk`` (either alone: the fault never fires).

The sweep is told nothing about it beyond ``--fault-file``: it must find the configurations where the fault shows
and minimize them to exactly those two flags. The swap is ``examples/fault_files/swap_state_slots.py``'s.
"""

from kvdoctor.engines import faultkit

done = False


@faultkit.wrap("sglang.srt.managers.scheduler:Scheduler.run_batch", role="single")
def swap_where_flags_meet(original, scheduler, batch, *args, **kwargs):
    global done
    server_args = scheduler.server_args
    if not (server_args.schedule_policy == "lpm" and server_args.enable_mixed_chunk):
        faultkit.unchanged("not both --schedule-policy lpm and --enable-mixed-chunk")
        return original(scheduler, batch, *args, **kwargs)
    reqs = list(batch.reqs or [])
    if done or not batch.forward_mode.is_decode() or len(reqs) < 2:
        faultkit.unchanged("not the first decode step with two or more requests")
        return original(scheduler, batch, *args, **kwargs)
    import torch

    first, last = reqs[0], reqs[-1]
    pool = scheduler.req_to_token_pool
    mamba = getattr(pool, "mamba_pool", None)
    if mamba is None or first.kv.mamba_pool_idx is None or last.kv.mamba_pool_idx is None:
        faultkit.unchanged("this model keeps no recurrent state")
        return original(scheduler, batch, *args, **kwargs)
    slots = torch.cat([first.kv.mamba_pool_idx.reshape(1), last.kv.mamba_pool_idx.reshape(1)]).to(torch.int64)
    slots = pool.translate_mamba_indices(slots).to(torch.int64)
    swapped = slots.flip(0)
    cache = mamba.mamba_cache
    for state in [*cache.conv, cache.temporal]:
        if state is not None and state.numel():
            state[:, slots] = state[:, swapped]
    done = True
    faultkit.note(f"swapped the state of {first.rid} and {last.rid} where lpm and mixed chunks meet")
    return original(scheduler, batch, *args, **kwargs)
