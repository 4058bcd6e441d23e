"""kvdoctor's rule model of vLLM (``vllm==0.33.0``): pure Python, no torch, no vLLM.

vLLM keeps per-request state as *KV cache specs* reported per layer (``FullAttentionSpec``,
``SlidingWindowSpec``, ``MLAAttentionSpec``, ``MambaSpec``, ``CircularBufferSpec``), groups layers
with the same spec into *KV cache groups* that share a block table, and moves groups between the GPU
and elsewhere only through a *KV connector* (offloading, PD transfer). Preemption is recompute only.

- ``rules``: the one home of what vLLM does, each fact citing the 0.33.0 file and lines it restates;
- ``server_flags`` / ``architectures``: data generated from the wheel (``scripts/vllm-tables.py``);
- ``flags``: a ``vllm serve`` line → MODEL and one frozen ``VllmFlags`` (unknown flags listed);
- ``specs``: config + flags → one ``LayerSpec`` per layer (with vLLM's hybrid block-size alignment);
- ``grouping``: ``get_kv_cache_groups`` restated; ``connectors``: which groups a connector carries;
- ``hazards``: KVD1xx rules; ``analysis``: one call from a model and a launch line to all of it.
"""
