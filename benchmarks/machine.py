"""The machine a benchmark ran on, in one line every results file carries.

Why: a ratio against "the GEMM" means nothing without the CPU, its vector ISA and the BLAS kernel
that ran it. The bundled OpenBLAS of numpy's wheels misdetects some CPUs (this VM's Sapphire
Rapids-class Xeon reads as ``Prescott``, an SSE3 kernel 4-5x slower than its AVX-512 one, unless
``OPENBLAS_CORETYPE=SkylakeX`` is set before numpy loads), which once made the engine look as
fast as BLAS. threadpoolctl names the kernel OpenBLAS chose (``architecture``); torch reports its
own MKL and the CPU capability its kernels use. Every benchmark script that writes results calls
``machine_line()`` (one place for this fact).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

_ISA_FLAGS = ("avx512f", "avx512_bf16", "amx_tile", "avx2", "fma", "avx", "sse4_2")


@dataclass(frozen=True)
class Machine:
    """What decides a CPU benchmark's speed: the CPU, its widest vector ISA, BLAS and threads."""

    cpu: str
    logical_cpus: int
    isa: list[str]
    blas: list[str] = field(default_factory=list)  # "library version kernel threads"
    torch: str = ""  # torch's own BLAS (MKL, statically linked: threadpoolctl cannot see it)
    env: dict[str, str] = field(default_factory=dict)  # the variables that change the kernels


def _cpuinfo(text: str | None = None) -> tuple[str, list[str]]:
    """(CPU model name, the vector-ISA flags it has, widest first) from /proc/cpuinfo (or text)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return platform.processor() or platform.machine(), []
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags_line = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    flags = set(flags_line.group(1).split()) if flags_line else set()
    return (model.group(1).strip() if model else platform.machine()), [f for f in _ISA_FLAGS if f in flags]


def _blas() -> list[str]:
    """Each BLAS / OpenMP library loaded in this process, with its kernel and thread count."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return ["threadpoolctl not installed: BLAS kernel unknown"]
    out = []
    for lib in threadpool_info():
        arch = lib.get("architecture")
        out.append(f"{lib.get('internal_api')} {lib.get('version') or ''}".strip()
                   + (f" kernel {arch}" if arch else "") + f", {lib.get('num_threads')} threads")
    return out


def _torch() -> str:
    """torch's BLAS, CPU capability and threads, if torch is already imported (never imported here)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return ""
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", torch.__config__.show())
    cap = torch.backends.cpu.get_cpu_capability()
    return f"torch {torch.__version__}: {'MKL ' + mkl.group(1) if mkl else 'no MKL'}, {cap}, " \
           f"{torch.get_num_threads()} threads"


def describe() -> Machine:
    """The machine now (call it after numpy / torch are loaded, so their BLAS is listed)."""
    cpu, isa = _cpuinfo()
    keys = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "NUMBA_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS", "OMP_WAIT_POLICY")
    return Machine(cpu=cpu, logical_cpus=os.cpu_count() or 0, isa=isa, blas=_blas(), torch=_torch(),
                   env={k: os.environ[k] for k in keys if k in os.environ})


def machine_line(m: Machine | None = None) -> str:
    """One markdown line naming the machine (for a results file's header)."""
    m = m or describe()
    parts = [f"Machine: {m.cpu}, {m.logical_cpus} logical CPUs, ISA {'/'.join(m.isa) or 'unknown'}",
             "BLAS: " + ("; ".join(m.blas) or "none loaded")]
    if m.torch:
        parts.append(m.torch)
    parts.append("env: " + (", ".join(f"{k}={v}" for k, v in m.env.items()) or "no BLAS/thread variables set"))
    return ". ".join(parts) + "."


def openblas_coretype(isa: list[str] | None = None) -> str | None:
    """The OpenBLAS kernel to force for this CPU's widest vectors (``OPENBLAS_CORETYPE``, read when
    OpenBLAS loads): SkylakeX with AVX-512, Haswell with AVX2 + FMA (OpenBLAS's Zen kernels are its
    Haswell ones), else None (OpenBLAS's own detection). Forcing a kernel the CPU lacks stops the
    process with an illegal instruction, so this is decided from the CPU's flags, never assumed."""
    flags = _cpuinfo()[1] if isa is None else isa
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags:
        return "Haswell"
    return None


def load_now() -> str:
    """``uptime``'s line: the load a measurement ran under (a results file states it at its start
    and end, since on a shared machine wall seconds grow with the load)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    import numpy  # noqa: F401  (loads numpy's BLAS, so that it is listed)

    print(machine_line())
