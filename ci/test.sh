#!/usr/bin/env bash
# Sets up (ci/setup.sh) and runs the whole test suite on the default Vulkan device (lavapipe without a GPU),
# with the Khronos validation layer (incl. synchronization validation) on and spirv-val on every module.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/spvad-xdg}"
mkdir -p "$XDG_RUNTIME_DIR"
export SPVAD_VALIDATION=1
exec .venv/bin/python -m pytest -q "${@:-tests}"
