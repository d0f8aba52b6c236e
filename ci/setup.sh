#!/usr/bin/env bash
# Installs everything spvad needs on a fresh Debian machine (run as root), then a venv in .venv.
# Re-running is fast: packages already present are not reinstalled.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname)" = Darwin ]; then   # macOS: Homebrew tools, Metal bindings
  command -v spirv-val >/dev/null || brew install spirv-tools spirv-cross vulkan-loader molten-vk
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q -e '.[test,metal]'
  exit 0
fi
apt_pkgs=(mesa-vulkan-drivers libvulkan1 vulkan-validationlayers spirv-tools spirv-cross spirv-headers
          glslang-tools g++)   # g++: the CUDA C peers run on the CPU in tests/benchmarks/test_cuda_sources.py
python3 -m venv --help >/dev/null 2>&1 && python3 -c "import ensurepip" 2>/dev/null || apt_pkgs+=(python3-venv python3-pip)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.spvad-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
