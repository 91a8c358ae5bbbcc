"""Fused CPU kernels of the engine: the C extension (``_kernels``, built from this folder's C
sources), its Python side (``native.py``) and the int8 products (``quant.py``)."""
