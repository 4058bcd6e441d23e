"""Repo-wide test setup: without CUDA, Triton kernels run under the interpreter on CPU tensors.

``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates a kernel, so it must be set before any
kernel module is imported; conftest.py is imported before every test module, which guarantees it.
Importing torch does not import triton, so probing CUDA here is safe.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
