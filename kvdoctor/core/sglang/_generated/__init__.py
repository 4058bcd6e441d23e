"""Tables generated from SGLang's own source and parser (data, not logic); see ``scripts/``."""
