"""The MXFP8 codec's Triton kernels, beside the torch reference they must equal bit for bit.

The reference is ``kvdoctor.mxfp8.reference``; nothing but kernels lives here.
"""
