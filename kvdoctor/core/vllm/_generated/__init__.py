"""Tables generated from vLLM's own source and parser (data, not logic); see ``scripts/``."""
