"""How the kernels that were numba ``parallel=True`` loops are compiled now that their threads
are ``rowblocks``' (issue 44): as numba compiled their loop bodies then, less the parfor work.

numba compiled a parallel loop's body with ``error_model="numpy"`` (``BODY``: a float division by
zero gives inf, as it did there), after copy propagation and dead-code removal over the typed IR
(``ir_utils.simplify``, run by its parfor fusion pass). The scan of a ranker's scores needs that
pass (``SIMPLIFIED``: numba's nopython pipeline with ``Simplify`` where the parallel pipeline ran
it, through numba's documented hook ``pipeline_class``): it inlines its helpers
(``inline="always"``), every inlined call binds its arguments to fresh variables, which the pass
folds away, and without it its top-k of fp64 scores ran 30-40% slower. The BLAS-tile scan runs
faster without it (engine_vs_blas at d = 128: 2.4-2.5x the fastest GEMM without, 2.9x with, 2.3-2.5x
when parallel), and compiles in less time. Measured with ad-hoc paired timings on this 2-core VM.
"""

from __future__ import annotations

from typing import Any

from numba.core import ir_utils
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.typed_passes import NopythonRewrites


@register_pass(mutates_CFG=True, analysis_only=False)
class Simplify(FunctionPass):
    """Copy propagation, dead-code removal and CFG simplification of the typed IR."""

    _name = "rbench_simplify"

    def __init__(self) -> None:
        FunctionPass.__init__(self)

    def run_pass(self, state: Any) -> bool:
        ir_utils.simplify(state.func_ir, state.typemap, state.calltypes, state.metadata)
        return True


class KernelCompiler(CompilerBase):
    """numba's nopython pipeline with ``Simplify`` after its rewrites (where the parallel
    pipeline runs it)."""

    def define_pipelines(self) -> list[Any]:
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(Simplify, NopythonRewrites)
        pm.finalize()
        return [pm]


# Helpers compiled apart from the kernels that call them (``kth_largest``, the sorts): the kernels'
# flags, so that the numpy implementations both use (``np.empty``) compile once: numba keys them
# on the caller's flags (issue 44).
HELPER = {"nogil": True, "error_model": "numpy"}
BODY = {"cache": True, **HELPER}
SIMPLIFIED = {**BODY, "pipeline_class": KernelCompiler}
