#!/usr/bin/env bash
# One check of the torch evaluation path (rbench/engine/torch_scan.py) on a rented GPU machine:
# versions, the CUDA tests of tests/engine/test_torch_scan.py, and benchmarks/engine_gpu.py at GPU
# sizes. Run from the repository root:  bash benchmarks/device_check.sh
# Needs python3 with torch (CUDA), numpy, numba, rich, pytest; rbench is imported from the working
# tree (PYTHONPATH), not installed. Wheels in .whl/ (platformdirs, pooch, bm25s, psutil) are
# installed into /tmp/site when present. Everything it prints, and the results, go to $OUT
# (default /tmp/device_check). Each step has its own timeout: at most about 11 minutes in all.
# Without CUDA the CUDA tests are skipped and the benchmark measures the CPU sizes: it still ends.
#   bash benchmarks/device_check.sh certified   (issue 44 item 3, about 4 minutes on one H100/H200;
# give it timeout_s 540): only the certified low-precision scan: its tests, then
# benchmarks/gpu_scale.py at a quarter of Rec-Clothing's queries (46,482 x 6,805,462 x d=1024; the
# full-scale time is projected in the table) for fp32, bf16-certified and tf32-certified, checked
# against the fp32 reference on 16 sampled queries; writes benchmarks/results/gpu_scale_certified.md.
#   bash benchmarks/device_check.sh lranker     (issue 44 item 4, about 2 minutes): benchmarks/gpu_step.py,
# LRanker steps at Qwen3-0.6B's shape padded to the maximum lengths, at the data's lengths, and bucketed
# (tokens/step, MFU, both schedules projected); writes benchmarks/results/gpu_step.md.
#   bash benchmarks/device_check.sh issue44     both of the above (about 6-7 minutes: timeout_s 600).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/device_check}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device_check.log") 2>&1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" > /dev/null; then
  timeout 60 python3 -m pip install -q --upgrade --no-index --no-deps --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
# the built-in rankers (folder rankers/, installed as rbench_rankers) and the entry points that
# find them, without pip: a link and a dist-info written from pyproject.toml
mkdir -p /tmp/site && ln -sfn "$PWD/rankers" /tmp/site/rbench_rankers && python3 - <<'PY'
import tomllib, pathlib
meta = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
d = pathlib.Path("/tmp/site/rbench-0.dist-info"); d.mkdir(exist_ok=True)
(d / "METADATA").write_text("Metadata-Version: 2.1\nName: rbench\nVersion: 0\n")
(d / "entry_points.txt").write_text("".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
                                            for g, eps in meta["entry-points"].items()))
PY
export PYTHONPATH="/tmp/site:$PYTHONPATH"
status=0
step() {  # step NAME SECONDS COMMAND...: run with a timeout, note its status, carry on
  local name=$1 secs=$2
  shift 2
  echo "=== $name (timeout ${secs}s) $(date -u +%H:%M:%S)"
  local t0=$SECONDS
  timeout --kill-after=10 "$secs" "$@"
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0))s"
  [ "$rc" -eq 0 ] || status=1
}

step nvidia-smi 15 nvidia-smi
step versions 30 python3 -c '
import platform, numpy, torch
print("python", platform.python_version(), "| numpy", numpy.__version__, "| torch", torch.__version__,
      "| CUDA", torch.version.cuda, "| available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
try:
    import numba; print("numba", numba.__version__)
except ImportError as exc:
    print("numba missing:", exc)
import rbench.engine.scan, rbench.engine.torch_scan; print("rbench", rbench.__version__, "imports")
'
case "${1:-}" in
  certified|lranker|issue44)
    if [ "$1" != lranker ]; then
      step pytest-certified 90 python3 -m pytest -q -p no:cacheprovider -x tests/engine/test_certified.py
      step gpu-scale-certified 400 python3 benchmarks/gpu_scale.py --queries 46482 --out "$OUT/gpu_scale_certified.md"
      [ -f "$OUT/gpu_scale_certified.md" ] && cp "$OUT/gpu_scale_certified.md" benchmarks/results/gpu_scale_certified.md
    fi
    if [ "$1" != certified ]; then
      step gpu-step 240 python3 benchmarks/gpu_step.py --steps 6 --out "$OUT/gpu_step.md"
      [ -f "$OUT/gpu_step.md" ] && cp "$OUT/gpu_step.md" benchmarks/results/gpu_step.md
    fi
    echo "=== done: status $status"
    exit $status;;
esac
# the CUDA tests, then the whole file (CPU tests included: torch here may be another version)
step pytest-cuda 200 python3 -m pytest -q -p no:cacheprovider -m cuda -rA tests/engine/test_torch_scan.py
step pytest-all 40 python3 -m pytest -q -p no:cacheprovider -x tests/engine/test_torch_scan.py
step gpu-eval 130 python3 benchmarks/engine_gpu.py --repeats 3 --output "$OUT/engine_gpu.md"
# the generation layer and the generative rankers: CUDA against CPU on a small random Llama
[ -d .gpu-carry/tiny-llama ] && step generative 90 python3 benchmarks/device_generative.py .gpu-carry/tiny-llama \
  --out "$OUT/device_generative.md"
# the other CUDA-marked tests of the rankers (LRanker bf16 + checkpointing, RankLLaMA, cross-encoder)
step pytest-cuda-rankers 120 python3 -m pytest -q -p no:cacheprovider -m cuda -rA -k "not vllm" \
  tests/rankers/test_lranker_gpu.py tests/rankers/test_rankllama.py tests/rankers/test_cross_encoder.py \
  tests/rankers/generative/test_backends.py
# the vLLM backend against transformers (issue 41), a step of its own: vLLM's engine takes a minute to
# start. It needs vllm installed on the machine (too large to carry) and SmolLM2's GGUF in
# ~/.cache/rbench-models (RBENCH_VLLM_TEST_MODEL names another model); -rA prints a skip's reason.
step vllm-version 60 python3 -c 'import importlib.util as u; s = u.find_spec("vllm"); print("vllm", __import__("vllm").__version__ if s else "is not installed: the vLLM test will skip")'
step pytest-vllm 300 python3 -m pytest -q -p no:cacheprovider -m cuda -rA -k vllm tests/rankers/generative/test_backends.py
[ -f "$OUT/engine_gpu.md" ] && cp "$OUT/engine_gpu.md" benchmarks/results/engine_gpu.md
[ -f "$OUT/device_generative.md" ] && cp "$OUT/device_generative.md" benchmarks/results/device_generative.md
echo "=== done: status $status; files in $OUT:"
ls -la "$OUT"
exit $status
