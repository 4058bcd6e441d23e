"""``kvdoctor consistency``: a real SGLang deployment under forced retraction, every greedy token checked.

Modules, one concept each: ``workload`` (seeded token-id prompts), ``compare`` (token-by-token diffs and
the noise floor), ``gates`` (the verdict), ``shrink`` (a tiny config keeping every layer kind),
``checkpoint`` (a seeded random checkpoint and offline tokenizer, cached), ``runnable`` (what SGLang
cannot run on CPU, with its file:line), ``deploy`` (the launch plans, built on ``kvdoctor.deploy.plan``),
``scenario`` (what a run puts under test, one record each), ``prepared`` (the options and what is known before
anything starts), ``servers`` (each server's side of the run behind one ``Deployment`` protocol: its checks,
plan, client API, probes, evidence, in-server log and faults, one room per server),
``context_limit`` (the longest request each server serves whole, known before launch), ``footprint`` (the
checkpoint, servers and replies a run holds against this machine's memory and disk), ``client`` (``/generate``
with logprobs), ``attribution`` (the pressured decode's state trace joined with
the comparison: why a request diverged), ``run`` (one prepare and one deploy-and-compare for every server, on
``kvdoctor.deploy.supervisor``) and ``result`` (the report).
"""
