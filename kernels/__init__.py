"""Triton kernels for kvdoctor (installed as ``kvdoctor_kernels``); nothing but kernels lives here."""
