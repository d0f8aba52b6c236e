#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and no network, run the test suite on the NVIDIA Vulkan driver,
# then benchmarks/peers.py --gpu (spvad, the hand-written limit, CUDA C, JAX, torch, numpy); everything goes to stdout,
# and the log, the benchmark JSON and its markdown table under $OUT when it is set. Under 9 minutes: tests 330 s,
# benchmark 200 s at most.
#
#   bash ci/gpu_check.sh --pack      here, with network: fill .gpu-kit/ (git-ignored, ~37 MB) with what the GPU
#                                     machine lacks: the Vulkan loader, libglvnd, the validation layer, spirv-val,
#                                     glslangValidator, wheels of vulkan/cffi/pycparser for its Python (GPU_CHECK_PY,
#                                     default 3.12)
#   bash ci/gpu_check.sh             there, carrying .gpu-kit (and .venv if that machine can run it); about 2 min
#   bash ci/gpu_check.sh --dry-run   set up and select the device, print what was found, then stop
# Options: --device NAME (a device-name substring, default NVIDIA; SPVAD_DEVICE wins), --no-tests, --no-bench,
# --then CMD (run CMD with the same environment after the checks: extra benchmarks; its status counts).
# The tests run in parallel with pytest-xdist when the machine's Python has it (the whole suite took ~10 min
# serially on an H200 machine, ~2.5 min with 12 workers), and without -x, so one run reports every difference.
# A carried .venv is used when it runs there (its python is a link to this machine's interpreter, which a
# GPU machine rarely has); otherwise python3 (numpy, pytest: its own), the kit's wheels installed into it.
set -uo pipefail
exec 2>&1                     # one stream, in order
cd "$(dirname "$0")/.."
ROOT=$PWD KIT=$PWD/.gpu-kit DEVICE=${SPVAD_DEVICE:-NVIDIA} MODE=check TESTS=1 BENCH=1 THEN=
while [ $# -gt 0 ]; do
  case $1 in
    --pack) MODE=pack ;; --dry-run) MODE=dry ;; --no-tests) TESTS=0 ;; --no-bench) BENCH=0 ;;
    --device) DEVICE=${2:?--device needs a name}; shift ;;
    --then) THEN=${2:?--then needs a command}; shift ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done

if [ $MODE = pack ]; then     # ---- here: copy tools and libraries, download wheels ---------------------------
  set -e
  rm -rf "$KIT" && mkdir -p "$KIT"/bin "$KIT"/loader "$KIT"/glvnd "$KIT"/layers "$KIT"/wheels
  for t in glslangValidator spirv-val spirv-as spirv-dis spirv-cross vulkaninfo; do
    p=$(command -v $t) && cp -L "$p" "$KIT"/bin/ || echo "pack: $t not found here (skipped)"
  done
  libdir=$(dirname "$(ldconfig -p | awk '/libvulkan.so.1 .*x86-64/ {print $NF; exit}')")
  cp -L "$libdir"/libvulkan.so.1 "$KIT"/loader/
  # NVIDIA's Vulkan driver (libGLX_nvidia) needs libglvnd's dispatch libraries (the device README's list)
  for l in libGLdispatch.so.0 libEGL.so.1 libOpenGL.so.0 libGLX.so.0 libGL.so.1; do
    cp -L "$libdir"/$l "$KIT"/glvnd/ 2>/dev/null || echo "pack: $l not found here (skipped)"
  done
  layer=/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json
  if [ -f $layer ]; then     # the layer library beside its manifest ("./": relative to the manifest)
    sed 's|"library_path": *"[^"]*/\?\(libVkLayer_khronos_validation.so\)"|"library_path": "./\1"|' $layer \
      > "$KIT"/layers/VkLayer_khronos_validation.json
    cp -L "$libdir"/libVkLayer_khronos_validation.so "$KIT"/layers/
  fi
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version "${GPU_CHECK_PY:-3.12}" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$KIT"/wheels vulkan==1.3.275.1 cffi pycparser
  du -sh "$KIT" && ls "$KIT"/* && exit 0
fi

# ---- there: the environment ----------------------------------------------------------------------------------
missing=()
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} SPVAD_DEVICE=$DEVICE PYTHONUNBUFFERED=1
# a CUDA build of JAX takes 75% of the GPU's memory at its first use unless told not to (tests/interop imports it)
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
# NVIDIA's libnvidia-tls uses static TLS: loaded again by a second Vulkan instance in one process (sp.init after
# sp.reset, as the tests do) it failed with "cannot allocate memory in static TLS block" (H200, driver 580.159)
# until glibc reserved more optional static TLS for libraries loaded later
case ":${GLIBC_TUNABLES:-}:" in
  *:glibc.rtld.optional_static_tls=*) ;;
  *) export GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.rtld.optional_static_tls=16384 ;;
esac
[ -d "$KIT"/bin ] && export PATH=$PATH:$KIT/bin                      # the machine's own tools come first
has_lib() { ldconfig -p | grep "$1 " >/dev/null; }                   # (grep -q would SIGPIPE ldconfig)
kit_libs=
if ! has_lib libvulkan.so.1; then
  [ -f "$KIT"/loader/libvulkan.so.1 ] && kit_libs=$KIT/loader \
    || missing+=("the Vulkan loader libvulkan.so.1 (bash ci/gpu_check.sh --pack here, carry .gpu-kit)")
fi
has_lib libGLdispatch.so.0 || [ ! -d "$KIT"/glvnd ] || kit_libs=${kit_libs:+$kit_libs:}$KIT/glvnd
[ -n "$kit_libs" ] && export LD_LIBRARY_PATH=$kit_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -f "$KIT"/layers/VkLayer_khronos_validation.json ] && export VK_LAYER_PATH=$KIT/layers
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json      # where the GPU machines keep it
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f $nvidia_icd ] && \
   ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
  export VK_DRIVER_FILES=$nvidia_icd
fi
for t in spirv-val glslangValidator; do
  command -v $t >/dev/null || missing+=("$t (Debian spirv-tools / glslang-tools; --pack copies it into .gpu-kit/bin)")
done
PY=
if .venv/bin/python -c "import numpy, vulkan, pytest" >/dev/null 2>&1; then
  PY=$ROOT/.venv/bin/python
elif command -v python3 >/dev/null; then
  PY=$(command -v python3)
  if ! "$PY" -c "import vulkan" >/dev/null 2>&1 && ls "$KIT"/wheels/*.whl >/dev/null 2>&1; then
    # into python3's own environment (a throw-away machine): the tests' child processes must see them too
    "$PY" -m pip install -q --no-index --no-deps --no-compile "$KIT"/wheels/*.whl 2>&1 | tail -3
  fi
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}                 # spvad from this checkout, not installed
fi
if [ -z "$PY" ]; then
  missing+=("a Python (.venv/bin/python does not run here and there is no python3)")
else
  for m in numpy vulkan pytest; do
    "$PY" -c "import $m" >/dev/null 2>&1 || missing+=("Python package $m for $PY (carry .gpu-kit: --pack downloads vulkan and cffi)")
  done
fi
VALIDATION=${GPU_CHECK_VALIDATION:-1}
if [ -z "${VK_LAYER_PATH:-}" ] && [ ! -f /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json ]; then
  VALIDATION=0
  echo "note: no Khronos validation layer here or in .gpu-kit: the tests run without it (SPVAD_VALIDATION=0)"
fi

echo "== machine: $(uname -m), CPU: $(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), python: $PY"
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "nvidia-smi: not found (no NVIDIA driver here)"
command -v vulkaninfo >/dev/null && { vulkaninfo --summary 2>&1 | sed -n '/^Devices:/,$p' | head -30; }
echo "SPVAD_DEVICE=$SPVAD_DEVICE VK_DRIVER_FILES=${VK_DRIVER_FILES:-} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" \
     "GLIBC_TUNABLES=$GLIBC_TUNABLES"
if [ ${#missing[@]} -gt 0 ]; then
  echo "MISSING, cannot run:"; printf '  - %s\n' "${missing[@]}"; exit 3
fi
echo "== python -m spvad info"
if ! "$PY" -m spvad info; then
  echo "NO DEVICE: spvad found no Vulkan device matching SPVAD_DEVICE='$SPVAD_DEVICE' (the lines above say why;"
  echo "--device NAME picks another, e.g. --device llvmpipe on a machine without a GPU)"
  exit 4
fi
[ $MODE = dry ] && { echo "dry run: the device is selected; stopping here"; exit 0; }

# ---- the checks ----------------------------------------------------------------------------------------------
status=0
[ -n "${OUT:-}" ] && mkdir -p "$OUT"
if [ $TESTS = 1 ]; then
  echo "== tests (SPVAD_VALIDATION=$VALIDATION; tests/test_layering.py skipped: it needs import-linter, no device)"
  workers=(); "$PY" -c "import xdist" >/dev/null 2>&1 && workers=(-n "$(( $(nproc) > 12 ? 12 : $(nproc) ))")
  SPVAD_VALIDATION=$VALIDATION timeout 330 "$PY" -m pytest -q -p no:cacheprovider "${workers[@]}" -rfE tests \
    --ignore=tests/test_layering.py 2>&1 | tee ${OUT:+"$OUT"/tests.log}
  rc=${PIPESTATUS[0]}; [ $rc = 124 ] && echo "TESTS TIMED OUT (330 s)"; [ $rc != 0 ] && status=1
fi
if [ $BENCH = 1 ]; then
  # GPU sizes (peers.py GPU_SIZES), against hand-written CUDA (CuPy), JAX and torch on the same GPU; the JSON and a
  # markdown table (README's GPU table) go to $OUT. Quadrants on CUDA: a second run carrying its wheel, with
  # --then "pip install --no-index quadrants-*.whl && python benchmarks/peers.py --gpu --systems spvad,quadrants-cuda"
  echo "== benchmarks/peers.py --gpu --systems spvad,limit,cuda,jax,torch,numpy"
  dest=${OUT:-benchmarks/results}
  timeout 200 "$PY" benchmarks/peers.py --gpu --repeat 3 --systems spvad,limit,cuda,jax,torch,numpy --no-install \
    --only integrator,elementwise,mass_spring,mpm,launch,reduce \
    --json "$dest/peers-gpu.json" --markdown "$dest/peers-gpu.md" 2>&1 | tee ${OUT:+"$OUT"/peers.log}
  rc=${PIPESTATUS[0]}; [ $rc = 124 ] && echo "BENCHMARK TIMED OUT (200 s)"; [ $rc != 0 ] && status=1
fi
if [ -n "$THEN" ]; then
  echo "== $THEN"
  bash -c "$THEN" || status=1
fi
echo "== gpu_check: $([ $status = 0 ] && echo OK || echo FAILED)"
exit $status
