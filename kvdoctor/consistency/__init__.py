"""``kvdoctor consistency``: a real SGLang deployment under forced retraction, every greedy token checked.

Modules, one concept each: ``workload`` (seeded token-id prompts), ``compare`` (token-by-token diffs and
the noise floor), ``gates`` (the verdict), ``shrink`` (a tiny config keeping every layer kind),
``checkpoint`` (a seeded random checkpoint and offline tokenizer, cached), ``runnable`` (what SGLang
cannot run on CPU, with its file:line), ``deploy`` (the launch plans, built on ``kvdoctor.pd.plan``),
``context_limit`` (the longest request each server serves whole, known before launch), ``footprint`` (the
checkpoint, servers and replies a run holds against this machine's memory and disk), ``client`` (``/generate``
with logprobs), ``attribution`` (the pressured decode's state trace joined with
the comparison: why a request diverged), ``run`` (orchestration on ``kvdoctor.pd.supervisor``) and
``result`` (the report).
"""
