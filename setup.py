"""The build's one native part: rescore.engine.kernels._kernels, fused CPU kernels for scoring
(rescore/engine/kernels/native.py; one C file per kernel, kernels.h their contract). It is
optional: where it does not compile (no C compiler, another compiler's flags), the install goes
on and scoring runs the same arithmetic in PyTorch."""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """setuptools' build_ext, saying plainly at the end whether the optional kernels were built
    (setuptools' own warning is one line among hundreds)."""

    def run(self):
        super().run()
        for ext in self.extensions:
            if os.path.exists(self.get_ext_fullpath(ext.name)):
                print(f"rescore: built {ext.name} (fused CPU kernels; rescore-nbest's log says "
                      "'fused CPU kernels: AVX2' or 'generic')")
            else:
                print(f"rescore: WARNING: {ext.name} was not built (no working C compiler?): this "
                      "install has no fused CPU kernels and scoring runs PyTorch's kernels, slower on a "
                      "CPU (rescore-nbest's log says 'fused CPU kernels: not compiled at install')")


setup(cmdclass={"build_ext": BuildExt}, ext_modules=[Extension(
    "rescore.engine.kernels._kernels",
    [f"rescore/engine/kernels/{name}.c" for name in ("module", "cell", "output", "lstm_int8", "logz_int8", "levels")],
    depends=["rescore/engine/kernels/kernels.h"], optional=True,
    # -fopenmp-simd: the loops' vectorisation pragmas only (no OpenMP runtime); no errno or
    # trap semantics, so that the branch-free exp vectorises.
    extra_compile_args=["-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"])])
