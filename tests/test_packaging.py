"""Packaging: every declared dependency has a floor (`>=`), and .ci/constraints.txt (the exact set CI
installs) pins every one of them at a version that satisfies that floor; CI installs through it with
torch pinned, and runs the README's test command.

The floors themselves are checked by `.ci/check_floors.sh` (every floor at once in a fresh venv, then
the whole suite: an install, too slow for this suite); these tests keep pyproject.toml, the
constraints file, .ci/run and the README from drifting apart. No installs, no network."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"
CI_RUN = ROOT / ".ci" / "run"
README = ROOT / "README.md"


def declared() -> list[Requirement]:
    """project.dependencies and every extra, as written in pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for reqs in project.get("optional-dependencies", {}).values() for r in reqs]
    return [Requirement(r) for r in project["dependencies"] + extras]


def parse_pins(text: str) -> dict[str, Version]:
    """A constraints file as {canonical name: pinned version}; every line must be one plain `name==version`."""
    out: dict[str, Version] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"not a plain pin: {line!r}"
        assert not req.extras and req.marker is None and req.url is None, f"not a plain pin: {line!r}"
        name = canonicalize_name(req.name)
        assert name not in out, f"{name} pinned twice in {CONSTRAINTS.name}"
        out[name] = Version(specs[0].version)
    return out


def floor(req: Requirement) -> Version:
    """The one `>=` bound of a declared dependency."""
    (low,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
    return low


DECLARED = declared()
PINS = parse_pins(CONSTRAINTS.read_text())


def ci_command() -> str:
    """The install-and-test line of .ci/run (the one that runs pytest)."""
    (line,) = [ln.strip() for ln in CI_RUN.read_text().splitlines() if "pytest" in ln and not ln.lstrip().startswith("#")]
    return line


def readme_test_command() -> str:
    """The command in the README's "Run the tests" code block."""
    m = re.search(r"Run the tests[^\n]*\n+```bash\n([^\n]+)\n```", README.read_text())
    assert m, "README: no 'Run the tests' bash block"
    return m[1].strip()


def test_the_core_dependencies_are_declared():
    names = {canonicalize_name(r.name) for r in DECLARED}
    assert {"polars", "pyarrow", "numpy", "torch", "dvc", "pytest"} <= names


@pytest.mark.parametrize("req", DECLARED, ids=lambda r: r.name)
def test_every_declared_dependency_has_one_floor_and_nothing_else(req):
    assert [s.operator for s in req.specifier] == [">="], f"{req}: declare a tested floor (>=) and nothing else"
    assert req.marker is None and not req.extras and req.url is None, f"{req}: a plain name>=floor"


@pytest.mark.parametrize("req", DECLARED, ids=lambda r: r.name)
def test_the_constraints_pin_every_declared_dependency_at_or_above_its_floor(req):
    name = canonicalize_name(req.name)
    assert name in PINS, f"{req.name} is not pinned in .ci/constraints.txt"
    assert PINS[name] >= floor(req), f"{req.name}=={PINS[name]} is below the floor {req}"


def test_the_constraints_are_a_whole_environment_without_seqpe():
    assert "seqpe" not in PINS  # the editable install itself is never a constraint
    for dep in ("pathspec", "sympy", "aiohttp", "contourpy"):  # transitive dependencies are pinned too
        assert dep in PINS
    assert all(not v.local for v in PINS.values())  # torch==2.13.0, not 2.13.0+cpu: the pin works off this machine


def test_parse_pins_refuses_what_is_not_a_plain_pin():
    assert parse_pins("# c\n\nNumPy==2.4.6\n") == {"numpy": Version("2.4.6")}
    for bad in ("numpy>=2", "numpy==2; python_version>'3'", "numpy==2\nnumpy==3", "numpy==2,<3"):
        with pytest.raises(AssertionError):
            parse_pins(bad)


def test_ci_installs_through_the_constraints_with_torch_pinned_to_the_constraints_torch():
    cmd = ci_command()
    install = re.search(r"pip install ([^&]+)&&", cmd)
    assert install, cmd
    args = install[1].split()
    assert args[args.index("-c") + 1] == ".ci/constraints.txt"
    torch = [a for a in args if a.startswith("torch")]
    assert torch == [f"torch=={PINS['torch']}"], "CI must pin torch (an unpinned torch pulls GBs of CUDA wheels)"
    assert cmd.endswith("pytest -n 2 -q")


def test_readme_test_command_is_what_ci_runs():
    """Same command; CI's pip is quiet (-q), nothing else differs."""
    assert ci_command().replace("pip install -q ", "pip install ") == readme_test_command()
    readme = README.read_text()
    assert set(re.findall(r"torch==(\S+?)[`\s]", readme)) == {str(PINS["torch"])}  # every install command


def test_hand_prepared_datasets_are_git_ignored_but_dvc_files_are_not():
    """Walk 28: `seqpe import beauty_s3rec` left data/samples/beauty_s3rec/ untracked, one `git add -A` from
    being committed; a `dvc add` file beside it must stay visible to git (DVC refuses a git-ignored one)."""
    import shutil
    import subprocess
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["data/samples/hand_x/manifest.json", "data/sessions/hand_x/items.parquet", "data/raw/hand_x/a.csv",
             "data/samples/hand_x.dvc", "data/raw/.gitignore"]
    out = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.split() == paths[:3], out


def test_a_missing_dependency_is_named_for_every_declared_one():
    """pipeline.cli names a missing package in one line (walk 45a #4): its table must cover pyproject's list."""
    from pipeline.cli import _DEPENDENCIES
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {canonicalize_name(Requirement(r).name) for r in project["dependencies"]} == \
        {canonicalize_name(name) for name in _DEPENDENCIES.values()}


def test_the_wheel_ships_the_reference_the_commands_point_at(tmp_path):
    """`seqpe models` and every report.md point at pipeline/REFERENCE.md, which the wheel lacked (walk 45a #5).
    Built offline from this checkout, without its dependencies."""
    import shutil
    import subprocess
    import sys
    import zipfile
    src = tmp_path / "src"                    # a copy: the build writes build/ and *.egg-info beside its sources
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "pipeline", "models"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(src)], capture_output=True, text=True)
    if proc.returncode != 0 and "No module named" in proc.stderr:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("seqpe-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"pipeline/REFERENCE.md", "pipeline/cli.py", "models/__init__.py"} <= names
