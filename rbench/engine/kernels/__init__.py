"""Hand-written kernels of the engine's scan: the fused top-k (LLVM IR) and the GEMM."""
