#!/usr/bin/env bash
# Build the optional-dependency venv: jaxrl[test] plus torch (CPU), transformers,
# stable-baselines3, brax and the environment suites (Craftax, Jumanji, XLand-MiniGrid,
# pgx, MuJoCo Playground) and JaxMARL, the packages behind the tests marked `optional`
# (tests/envs/test_adapters.py: Brax adapter, SB3 on the gymnasium export;
# tests/lm/test_model_parity.py: live Hugging Face parity). They are kept out of the
# main CI venv so that the README's own install command stays what CI tests.
#
# Usage: .ci/optional_venv.sh VENV_DIR     (then VENV_DIR/bin/python -m pytest ...)
#
# torch is pinned to the CPU build: PyPI's default torch wheel pulls ~3 GB of CUDA
# libraries. This machine class ships torch-2.13.0+cpu in /opt/wheels (pip's
# find-links); it is installed from that file when present. jax is pinned to the
# version the main venv resolved, so brax cannot move it under our tests.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:?usage: .ci/optional_venv.sh VENV_DIR}"

TORCH_VERSION="2.13.0"
OPTIONAL_PACKAGES=(
  "stable-baselines3==2.9.2"
  "transformers==5.24.0"
  "brax==0.14.2"
  # The environment suites behind envs/adapters/ (tests/envs/test_suite_adapters.py).
  "craftax==1.6.1"
  "jumanji==1.1.2"
  "xminigrid==0.9.3"
  "pgx==2.6.0"
  "playground==0.2.0"
  # JaxMARL behind the `jaxmarl:` ids (tests/envs/test_multiagent_env.py, test_multiagent.py).
  "jaxmarl==0.2.0"
)

python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet)
"${PIP[@]}" --upgrade pip

shopt -s nullglob
torch_wheels=(/opt/wheels/torch-"$TORCH_VERSION"+cpu-*.whl)
shopt -u nullglob
if [ "${#torch_wheels[@]}" -gt 0 ]; then
  "${PIP[@]}" "${torch_wheels[0]}"
else
  echo "warning: no local torch-$TORCH_VERSION+cpu wheel in /opt/wheels;" \
    "installing torch==$TORCH_VERSION from the index (large download)" >&2
  "${PIP[@]}" "torch==$TORCH_VERSION"
fi

"${PIP[@]}" -e ".[test]"
JAX_VERSION="$("$VENV/bin/python" -c 'import jax; print(jax.__version__)')"
TORCH_INSTALLED="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
"${PIP[@]}" "${OPTIONAL_PACKAGES[@]}" "jax==$JAX_VERSION" "jaxlib==$JAX_VERSION" \
  "torch==$TORCH_INSTALLED"
"$VENV/bin/python" -c '
import brax, craftax, jax, jaxmarl, jumanji, mujoco_playground, pgx, stable_baselines3, torch, transformers, xminigrid
print("optional venv:", "jax", jax.__version__, "torch", torch.__version__,
      "transformers", transformers.__version__, "stable-baselines3",
      stable_baselines3.__version__, "brax", brax.__version__, "pgx", pgx.__version__)
'
