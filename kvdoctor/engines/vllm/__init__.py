"""The vLLM engine adapter: ``_runtime`` (the one door into vLLM) and ``inspect`` (its own answers)."""
