"""benchmarks/machine.py: the machine line names the CPU, its vector ISA and each BLAS's kernel."""

from __future__ import annotations

import numpy as np  # noqa: F401  (loads numpy's OpenBLAS, so that threadpoolctl lists it)
import pytest

from benchmarks import machine

_CPUINFO = """processor\t: 0
model name\t: Example CPU 9000
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw
"""


def test_cpuinfo_model_and_isa_widest_first():
    cpu, isa = machine._cpuinfo(_CPUINFO)
    assert cpu == "Example CPU 9000"
    assert isa == ["avx512f", "avx2", "fma", "avx", "sse4_2"]
    assert machine._cpuinfo("model name\t: Old\nflags\t: sse4_2 avx\n")[1] == ["avx", "sse4_2"]  # no avx2


def test_line_names_the_openblas_kernel_and_the_variables(monkeypatch):
    pytest.importorskip("threadpoolctl")
    from threadpoolctl import threadpool_info

    libs = [lib for lib in threadpool_info() if lib.get("internal_api") == "openblas"]
    if not libs:
        pytest.skip("numpy is not linked with OpenBLAS here")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "SkylakeX")
    line = machine.machine_line()
    assert f"kernel {libs[0]['architecture']}" in line and "OPENBLAS_CORETYPE=SkylakeX" in line
    assert machine._cpuinfo()[0] in line


def test_openblas_kernel_follows_the_widest_vectors_the_cpu_has():
    # forcing SkylakeX on an AVX2-only CPU (this project's machines are both kinds) would stop the
    # benchmark's numpy worker with an illegal instruction
    assert machine.openblas_coretype(["avx512f", "avx2", "fma"]) == "SkylakeX"
    assert machine.openblas_coretype(["avx2", "fma", "avx"]) == "Haswell"
    assert machine.openblas_coretype(["avx", "sse4_2"]) is None
    assert machine.openblas_coretype() == machine.openblas_coretype(machine._cpuinfo()[1])
