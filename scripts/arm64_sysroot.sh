#!/usr/bin/env bash
# An Arm64 Python 3.11 with the venv's numpy and ONNX Runtime and LiteRT's interpreter, to run int8 models on their
# own Arm kernels under qemu-aarch64 from an x86-64 Debian host (tests/unit/test_isa_emulated.py, the emulated board
# of tests/cli/test_devices.py, `python -m bench isa`).
#
#   scripts/arm64_sysroot.sh [DEST]      # DEST defaults to .arm64; needs root (or sudo) for apt, and qemu-user
#
# DEST/root holds Debian's arm64 python3.11 and the libraries it and ONNX Runtime load (unpacked, not installed:
# nothing on the host changes but an arm64 entry in dpkg's architectures); DEST/site the aarch64 wheels. Each CPU
# in DEST/cpu/<class> is a prefix for `qemu-aarch64 -L` whose /proc/cpuinfo describes that CPU: ONNX Runtime picks
# its kernels from it (cpuinfo), so it must match the `-cpu` qemu emulates (edgekit.emulation.ARM_CPUS).
# DEST/bin/python-<class> runs Python there: DEST/bin/python-arm64-dotprod is a Raspberry Pi 5's CPU.
set -euo pipefail
dest=$(realpath -m "${1:-.arm64}")
python=${PYTHON:-.venv/bin/python}
sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
packages=(
  python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libgcc-s1 libstdc++6 zlib1g libexpat1 libssl3
  libffi8 libbz2-1.0 liblzma5 libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libuuid1 libnsl2 libtirpc3 libdb5.3
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1 libcrypt1
)
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $sudo_ dpkg --add-architecture arm64
fi
$sudo_ apt-get update -qq
rm -rf "$dest.partial" && mkdir -p "$dest.partial/debs" "$dest.partial/root"
(cd "$dest.partial/debs" && apt-get download -qq "${packages[@]/%/:arm64}")
for deb in "$dest.partial"/debs/*.deb; do dpkg -x "$deb" "$dest.partial/root"; done
rm -rf "$dest.partial/debs"
# ai-edge-litert 1.4.0 is the newest release with an aarch64 Linux wheel (2.x has none): what a Raspberry Pi installs.
versions=$("$python" -c "from importlib.metadata import version as v; print(f'numpy=={v(\"numpy\")} onnxruntime=={v(\"onnxruntime\")}')")
versions="$versions ai-edge-litert==1.4.0"
# shellcheck disable=SC2086  # three requirement words
"$python" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: --target "$dest.partial/site" \
  --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 --python-version 3.11 --implementation cp $versions
"$python" -c "
import sys
from pathlib import Path
from edgekit.emulation import write_emulated_cpus
write_emulated_cpus(Path(sys.argv[1]))" "$dest.partial"
rm -rf "$dest" && mv "$dest.partial" "$dest"
echo "arm64 sysroot ready: $dest ($versions)"
