"""vLLM's room of the consistency check: its Deployment (``deployment.py``) and its plan (``plan.py``), the only
code here that imports vLLM's engine room. Kept empty so ``plan`` imports without the client (httpx): the vLLM
engine suite reads the plan's owned flags in an environment without httpx."""
