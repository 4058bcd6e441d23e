"""pd-eval: the real PD deployment judged by GSM8K or the token oracle, with proof that retraction happened."""
