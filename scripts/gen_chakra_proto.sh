#!/usr/bin/env bash
# Regenerate core/astra_sim/chakra/et_def_pb2.py from core/astra_sim/chakra/et_def.proto.
#
# Usage:  scripts/gen_chakra_proto.sh            (from anywhere inside the repository)
#         PYTHON=/path/to/python scripts/gen_chakra_proto.sh
#
# Uses the protoc bundled in grpcio-tools (`python -m grpc_tools.protoc`), so no system protoc is needed.
# Pinned toolchain: grpcio-tools 1.85.1, which bundles libprotoc 35.1.  Its Python gencode embeds
#   ValidateProtobufRuntimeVersion(PUBLIC, 7, 35, 1, ...)
# i.e. the generated module needs a protobuf runtime >= 7.35.1 and < 8 (the venv has protobuf 7.36.2).
# A newer grpcio-tools may emit a newer gencode version that an older runtime refuses to import, and an older one
# (protoc <= 33, gencode 6.x) only imports on a 7.x runtime with a warning; keep the two in step.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
pkg_dir="$repo/core/astra_sim/chakra"

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi

expected_tools="1.85.1"
tools_version="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)"
if [[ -z "$tools_version" ]]; then
  echo "error: grpcio-tools is not installed for $PYTHON (pip install grpcio-tools==$expected_tools)" >&2
  exit 1
fi
if [[ "$tools_version" != "$expected_tools" ]]; then
  echo "warning: grpcio-tools $tools_version found, $expected_tools expected; check the runtime-version line of the output" >&2
fi

# Run from the repository root, never from inside the package: `python -m` puts the working directory on
# sys.path, and the package's types.py would shadow the standard library's `types` module.
cd "$repo"
"$PYTHON" -m grpc_tools.protoc --proto_path=core/astra_sim/chakra --python_out=core/astra_sim/chakra \
  core/astra_sim/chakra/et_def.proto

# Put the regeneration command at the top of the generated file (after the coding line).
out="$pkg_dir/et_def_pb2.py"
protoc_version="$("$PYTHON" -m grpc_tools.protoc --version | tr -d '\n')"
tmp="$(mktemp)"
{
  head -n 1 "$out"
  echo "# Regenerate with: scripts/gen_chakra_proto.sh"
  echo "#   (runs, from the repo root: python -m grpc_tools.protoc --proto_path=core/astra_sim/chakra"
  echo "#    --python_out=core/astra_sim/chakra core/astra_sim/chakra/et_def.proto;"
  echo "#    grpcio-tools $tools_version, $protoc_version; needs protobuf runtime >= the 'Protobuf Python Version' below, < next major)"
  tail -n +2 "$out"
} > "$tmp"
mv "$tmp" "$out"

# Check that the module imports with the installed runtime.
PYTHONPATH="$repo/core${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c \
  'import google.protobuf as p; from astra_sim.chakra import et_def_pb2 as m; m.Node(); print("ok: et_def_pb2 imports with protobuf", p.__version__)'
