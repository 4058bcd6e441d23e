"""kvdoctor's rule model of SGLang (``sglang==0.5.23``): pure Python, no torch, no SGLang."""
