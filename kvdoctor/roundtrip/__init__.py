"""The round trip's contract, shared by every engine that runs one (torch-free, pandas-free).

``kvdoctor roundtrip`` runs on kvdoctor's own pools (``kvdoctor.state.run``) or on the installed
SGLang's (``kvdoctor.engines.sglang.roundtrip``). Both take the same :mod:`~kvdoctor.roundtrip.options`,
walk the same five steps in the same order (:mod:`~kvdoctor.roundtrip.steps`: fill, retract, reuse,
restore, diff) and return the same :mod:`~kvdoctor.roundtrip.result`, which the CLI renders as tables,
``--json``, JUnit and the step summary. With ``--server vllm --engine vllm`` vLLM's offloading worker
(``kvdoctor.engines.vllm.roundtrip``) stores and loads one request's blocks instead of the five steps and
returns the same result, a row per group component. :mod:`~kvdoctor.roundtrip.faults` holds each engine's
``--inject`` faults. Nothing here imports torch, pandas or a server.
"""
