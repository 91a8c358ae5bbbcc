"""The build's one native part: rescore.engine.kernels._kernels, fused CPU kernels for scoring
(rescore/engine/kernels/native.py; one C file per kernel, kernels.h their contract). It is
optional: where it does not compile (no C compiler, another compiler's flags), the install goes
on and scoring runs the same arithmetic in PyTorch."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "rescore.engine.kernels._kernels",
    [f"rescore/engine/kernels/{name}.c" for name in ("module", "cell", "output", "lstm_int8", "logz_int8", "levels")],
    depends=["rescore/engine/kernels/kernels.h"], optional=True,
    # -fopenmp-simd: the loops' vectorisation pragmas only (no OpenMP runtime); no errno or
    # trap semantics, so that the branch-free exp vectorises.
    extra_compile_args=["-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"])])
