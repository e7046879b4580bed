#!/usr/bin/env bash
# Here (a machine with PyPI): packs what the accelerator lane installs on the lent TPU machine, whose own
# image has Python 3.11 + JAX 0.10.2 and no route to PyPI. The JAX 0.12 lane runs on the machine's
# Python 3.12 from these wheels: jax/jaxlib/libtpu pinned as constraints.txt pins the project's JAX, and
# everything jaxmagic and its test lane import, resolved by pip for CPython 3.12 on manylinux x86-64.
#
#   tools/accelerator/pack.sh            -> .accel/parts/part00 .. partNN (tar of the wheels, split)
#   tools/accelerator/pack.sh libs       -> .accel/libs/libs00: Flax, Optax, Equinox, NumPyro, Haiku and what they need beyond
#                                           the parts above (for demo notebook 11), one part (~33 MB)
#
# A device call carries the checkout and its carried paths, 64 MiB in all: the parts are cut so that one
# part and the checkout fit one call (tools/accelerator/README.md says how the calls go).
set -euo pipefail
cd "$(dirname "$0")/../.."
PART_MIB="${PART_MIB:-48}"
LIBTPU="${LIBTPU:-libtpu==0.0.50.1}"  # the libtpu JAX 0.12.0.1 was recorded with (../shared/accelerator/README.md)
jax_pin=$(grep -E '^jax==' constraints.txt)
jaxlib_pin=$(grep -E '^jaxlib==' constraints.txt)
platforms=()
for p in manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 linux_x86_64 any; do
    platforms+=(--platform "$p")
done
if [ "${1:-}" = libs ]; then  # the libraries, less the wheels the parts hold already (read from their tar)
    [ -e .accel/parts/part00 ] || { echo "pack the parts first (tools/accelerator/pack.sh)"; exit 1; }
    rm -rf .accel/libs .accel/libwheels && mkdir -p .accel/libs .accel/libwheels/wheels
    python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
        -d .accel/libwheels/wheels -c constraints.txt flax optax equinox numpyro dm-haiku 2>&1 | grep -v "is ignored: it is neither" || true
    cat .accel/parts/part* | tar -t | sed 's|^wheels/||' | while read -r held; do
        [ -n "$held" ] && rm -f ".accel/libwheels/wheels/$held"
    done
    tar -C .accel/libwheels -cf .accel/libs/libs00 wheels
    rm -rf .accel/libwheels
    echo "$(du -sh .accel/libs/libs00 | cut -f1) in .accel/libs/libs00"
    exit 0
fi
wheels=.accel/wheels
rm -rf .accel && mkdir -p "$wheels" .accel/parts
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d "$wheels" -c constraints.txt "$jax_pin" "$jaxlib_pin" "$LIBTPU" \
    ipython rich executing ipywidgets pytest hypothesis nbclient nbformat ipykernel 2>&1 |
    grep -v "is ignored: it is neither" || true
tar -C .accel -cf - wheels | split -b "${PART_MIB}m" -d - .accel/parts/part
rm -rf "$wheels"
ls .accel/parts | tr '\n' ' '
echo "($(du -sh .accel/parts | cut -f1) in $(ls .accel/parts | wc -l) parts)"
