#!/usr/bin/env bash
# There (the lent TPU machine, in the checkout's copy): receives the packed wheels part by part, installs
# them, and runs the accelerator lane under one of two JAXes:
#   jax012 - JAX 0.12 from the packed wheels, on the machine's Python 3.12 (pyenv's, readable there);
#   stock  - the machine's own image: Python 3.11 + JAX 0.10.2 (JAX outside site-packages, on PYTHONPATH),
#            with IPython, rich, executing and pytest from the machine's own package index.
#
#   tools/accelerator/device.sh receive          copy the carried .accel/parts/* to /tmp/accel/parts
#   tools/accelerator/device.sh install N        once all N parts are there: unpack, install into /tmp/site12
#   tools/accelerator/device.sh install-libs     after install, in a call carrying .accel/libs/libs00: Flax,
#                                                Optax, Equinox into /tmp/site12 (demo notebook 11)
#   tools/accelerator/device.sh lane ENV [STEP]  ENV jax012|stock; STEP tests|bench|notebooks|all
#
# /tmp survives between calls while the machine stays warm (100 s idle), so parts sent by one call each
# add up there. Logs go to $OUT (what comes back), one file per step.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT="${OUT:-/tmp/accel/out}"
mkdir -p /tmp/accel/parts "$OUT"

python312() { ls -d /root/.pyenv/versions/3.12*/bin/python3 2>/dev/null | sort -V | tail -1; }

use_env() {  # sets PY and PYTHONPATH for the lane's JAX
    case "$1" in
    jax012)
        PY=$(python312)
        [ -n "$PY" ] || { echo "no Python 3.12 on this machine"; exit 1; }
        # Replace PYTHONPATH: the image's 3.11 packages (JAX 0.10.2) must not leak into 3.12.
        export PYTHONPATH="$REPO:/tmp/site12"
        ;;
    stock)
        PY=python3
        if [ ! -d /tmp/site11 ]; then
            PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
                --index-url file:///opt/pypi/simple --target /tmp/site11 ipython rich executing pytest ipywidgets >/dev/null 2>&1 ||
                echo "installing IPython, rich, executing, pytest, ipywidgets from the machine's index failed"
            rm -rf /tmp/site11/jax /tmp/site11/jaxlib /tmp/site11/numpy*  # the image's own JAX stays first
        fi
        # Add to PYTHONPATH: the image's JAX 0.10.2 lives on it.
        export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$REPO:/tmp/site11"
        ;;
    *) echo "unknown ENV $1 (jax012 or stock)"; exit 2 ;;
    esac
    export PY PYTHONUNBUFFERED=1
}

receive() {
    cp .accel/parts/part* /tmp/accel/parts/ 2>/dev/null
    echo "parts held: $(ls /tmp/accel/parts | tr '\n' ' ')"
}

install() {
    local want="$1" have
    have=$(ls /tmp/accel/parts | wc -l)
    [ "$have" -ge "$want" ] || { echo "only $have of $want parts here"; exit 1; }
    local PY; PY=$(python312)
    rm -rf /tmp/accel/wheels /tmp/site12
    cat /tmp/accel/parts/part* | tar -x -C /tmp/accel
    PIP_CONFIG_FILE=/dev/null "$PY" -m pip install --isolated -q --no-index --no-deps --no-compile \
        --no-cache-dir --target /tmp/site12 /tmp/accel/wheels/*.whl || exit 1
    rm -rf /tmp/accel/wheels
    PYTHONPATH="$REPO:/tmp/site12" "$PY" -c 'import jax; print(jax.__version__, jax.devices())'
}

install_libs() {
    local PY; PY=$(python312)
    [ -e .accel/libs/libs00 ] || { echo "carry .accel/libs/libs00 (tools/accelerator/pack.sh libs)"; exit 1; }
    rm -rf /tmp/accel/libwheels && mkdir -p /tmp/accel/libwheels
    tar -x -C /tmp/accel/libwheels -f .accel/libs/libs00
    PIP_CONFIG_FILE=/dev/null "$PY" -m pip install --isolated -q --no-index --no-deps --no-compile \
        --no-cache-dir --target /tmp/site12 /tmp/accel/libwheels/wheels/*.whl || exit 1
    rm -rf /tmp/accel/libwheels
    PYTHONPATH="$REPO:/tmp/site12" "$PY" -c 'import flax, optax, equinox, numpyro, haiku; print(flax.__version__, optax.__version__, equinox.__version__, numpyro.__version__, haiku.__version__)'
}

# The live checks (tests/test_on_accelerator.py: skipped where there is no device), the replays of what the
# device recorded (they must hold on the device too), and the floor lane's files: every magic's smoke, the
# fallback paths, the private JAX structure _jax/ reads (tools/floor_lane.sh).
LANE_TESTS="tests/test_on_accelerator.py tests/test_profile_accelerator_traces.py tests/test_memory_tpu.py
    tests/test_magics_contract.py tests/test_floor.py tests/test_jax_structure.py tests/test_checkify_structure.py"

step_tests() {
    # shellcheck disable=SC2086 # the list is words
    "$PY" -m pytest -p no:cacheprovider -q ${LANE_PYTEST_ARGS:-} $LANE_TESTS 2>&1 | tee "$OUT/tests-$1.log" | tail -25
}

step_bench() {  # the benchmarks whose figures docs/overhead.md gives a TPU column
    "$PY" benchmarks/run_all.py ${BENCH:-watch nans compiles live load_ext} 2>&1 | tee "$OUT/bench-$1.log" | tail -40
}

step_notebooks() {  # the demo notebooks that fit one device, in kernels over ipc (no socket opens here)
    # The kernelspec runs tools/accelerator/ipc_kernel.py (ipykernel's IOPub pipe binds TCP, which aborts
    # the kernel here).
    local spec=/tmp/accel/kernel/share/jupyter/kernels/jaxmagic
    mkdir -p "$spec"
    printf '{"argv": ["%s", "%s/tools/accelerator/ipc_kernel.py", "-f", "{connection_file}"], "display_name": "jaxmagic (ipc)", "language": "python"}\n' \
        "$PY" "$REPO" > "$spec/kernel.json"
    # A notebook's children (demo_notebooks/_demo_helpers.run_py) run JAX on the CPU: the kernel holds the chip.
    # Each notebook in a runner of its own, after the last one's kernel is gone (it holds the chip until then).
    local notebook
    for notebook in ${NOTEBOOKS:-demo_notebooks/[01]*.ipynb}; do
        pkill -f tools/accelerator/ipc_kernel.py; sleep 1
        JUPYTER_PATH=/tmp/accel/kernel/share/jupyter JAXMAGIC_KERNEL_TRANSPORT=ipc JAXMAGIC_CHILD_JAX_PLATFORMS=cpu \
            PYTHONWARNINGS="ignore:Transparent hugepages" \
            "$PY" tools/run_notebooks.py "$notebook" 2>&1 | tee -a "$OUT/notebooks-$1.log" | grep -E "pass|FAIL"
        # a failed notebook comes back executed, with every report it showed before it stopped
        [ "${PIPESTATUS[0]}" = 0 ] || cp "build/notebooks/$(basename "$notebook")" "$OUT/" 2>/dev/null
    done
}

case "${1:-}" in
receive) receive ;;
install) install "${2:?how many parts}" ;;
install-libs) install_libs ;;
lane)
    use_env "${2:?jax012 or stock}"
    "$PY" -c 'import sys, jax; print(sys.version.split()[0], "JAX", jax.__version__, jax.devices())'
    case "${3:-all}" in
    tests) step_tests "$2" ;;
    bench) step_bench "$2" ;;
    notebooks) step_notebooks "$2" ;;
    all) step_tests "$2"; step_bench "$2"; [ "$2" = jax012 ] && step_notebooks "$2" ;;
    *) echo "unknown step $3"; exit 2 ;;
    esac
    ;;
*) sed -n 2,15p "$0"; exit 2 ;;
esac
