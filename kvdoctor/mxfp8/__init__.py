"""MXFP8 codec (OCP MX: E4M3 payload + one E8M0 scale byte per 32 elements), byte-exact everywhere.

Three scale conventions (``scale_mode``; mxfp8.md §2):

* ``"sglang"`` — SGLang's MXFP8 KV kernel: byte = RCEIL(max(amax, 1e-30)) clamped to 254, so an
  all-zero block gets 19 and a block with +/-Inf gets 254; never 0xFF.
* ``"rceil"`` — cuBLAS / TransformerEngine / torchao RCEIL: 2^ceil(log2(amax / 448)), computed as
  fl(amax * fl(1/448)) rounded up to a power of two from its bits.
* ``"floor"`` — OCP spec / torchao FLOOR: 2^(floor(log2 amax) - 8), elements saturate to 448.

NaN policy (identical on the torch, Triton-GPU and Triton-interpreter backends; applied to the
integer |x| bits *before* the max reduction, so NaN-propagating and NaN-dropping max agree):

* ``rceil`` / ``floor``: a NaN counts as +Inf, so a block holding NaN or +/-Inf gets scale 0xFF and
  every payload byte of that block is NaN (torchao's convention).
* ``sglang``: a NaN is ignored for the scale (as SGLang's GPU kernel's ``tl.max`` does); the NaN
  element itself is stored as NaN.
* Every NaN payload byte is the canonical 0x7F, whatever the input's sign bit.

Elements are encoded by round-to-nearest-even with saturation to +/-448 (Inf -> +/-448 when the
scale is finite); -0.0 stays 0x80.  Dequantize multiplies the exact E4M3 value by 2^(byte - 127)
(byte 0 -> 2^-127, 0xFF -> NaN) in fp32 and rounds once to the output dtype.

Backends: ``"torch"`` (the reference in ``reference.py``), ``"triton"`` (``kvdoctor.mxfp8.kernels``; on
CPU tensors it needs ``TRITON_INTERPRET=1`` set before triton is imported) and ``"auto"`` (Triton on
CUDA, torch elsewhere).  All give the same bytes; the tests prove it.
"""

from kvdoctor.mxfp8.codec import dequantize, quantize, quantize_scatter, resolve_backend
from kvdoctor.mxfp8.format import BLOCK, MXFP8Tensor
from kvdoctor.mxfp8.layout import scale_offsets

__all__ = [
    "BLOCK",
    "MXFP8Tensor",
    "dequantize",
    "quantize",
    "quantize_scatter",
    "resolve_backend",
    "scale_offsets",
]
