"""kvdoctor: diagnose how an inference server keeps a request's KV-cache state alive."""

__version__ = "0.1.0"
