#!/usr/bin/env bash
# Check the dependency floors: install every floor that pyproject.toml declares, all at once, in a
# fresh venv, and run the whole test suite there.
#
#   bash .ci/check_floors.sh [VENV]        (default VENV: ${TMPDIR:-/tmp}/seqpe-floors)
#
# Each `name>=X` in project.dependencies and the extras becomes `name==X` in a generated constraints
# file (VENV.constraints.txt), so pip must install exactly the floors; every other package resolves to
# its newest release that fits them. Run it with the Python CI runs (3.11) after changing a floor or
# the code's use of a dependency. Not part of .ci/run: a second full install and suite.
#
# The torch floor is not the CPU build CI installs: pip takes PyPI's build of it, which pulls some GB
# of nvidia-* wheels and runs on CPU. Setting PIP_EXTRA_INDEX_URL to PyTorch's CPU wheel index
# (README, "Set up on a fresh machine") avoids that download.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-${TMPDIR:-/tmp}/seqpe-floors}
floors=$venv.constraints.txt
rm -rf "$venv"
python3 -m venv "$venv"
. "$venv/bin/activate"

python - > "$floors" <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = [r for reqs in project.get("optional-dependencies", {}).values() for r in reqs]
for req in project["dependencies"] + extras:
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*([^\s,;]+)\s*", req)
    if m is None:
        raise SystemExit(f"check_floors: {req!r} is not 'name>=floor' (tests/test_packaging.py checks this)")
    print(f"{m[1]}=={m[2]}")
PY
extras=$(python -c 'import tomllib; print(",".join(tomllib.load(open("pyproject.toml", "rb"))["project"].get("optional-dependencies", {})))')
echo "floors ($floors):"; sed 's/^/  /' "$floors"

pip install -q -c "$floors" -e ".[$extras]"
pip check
# the floors really are what got installed (compare public versions: PyPI's torch may carry a +tag)
python - "$floors" <<'PY'
import sys
from importlib.metadata import version
from packaging.version import Version
pairs = [line.strip().split("==") for line in open(sys.argv[1]) if line.strip()]
bad = [f"{n}: wanted {v}, got {version(n)}" for n, v in pairs if Version(version(n)).public != Version(v).public]
if bad:
    raise SystemExit("check_floors: not installed at the floor: " + "; ".join(bad))
print("every floor installed")
PY
pytest -n 2 -q -p no:cacheprovider
