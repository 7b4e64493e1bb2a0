"""params.yaml loading: strict keys, types, overrides, and the shipped file itself."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.errors import ParamsError
from pipeline.params import Params, from_dict, load_params

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(text)
    return p


def test_shipped_params_load_and_match_defaults_where_documented():
    p = load_params(ROOT / "params.yaml", required=True)
    assert isinstance(p, Params)
    assert p.datasets == ["sample", "sample_ctr"]
    assert p.study.ctr.models == ["din"] and p.train_for("ctr").lr == pytest.approx(0.005)
    assert p.evaluate.ks == [5, 10, 20]
    assert p.train.lr == pytest.approx(1e-3)


def test_misspelt_key_is_rejected_with_suggestion(tmp_path):
    path = write(tmp_path, "train:\n  epohcs: 3\n")
    with pytest.raises(ParamsError) as e:
        load_params(path, strict=False)
    assert str(e.value) == "unknown params key 'train.epohcs'. Fix: did you mean 'epochs'?"
    assert "\n" not in str(e.value)


def test_unknown_section_is_rejected(tmp_path):
    with pytest.raises(ParamsError, match="unknown params key 'trian'.*did you mean 'train'"):
        load_params(write(tmp_path, "trian: {}\n"), strict=False)


@pytest.mark.parametrize("text, key", [
    ("train:\n  epochs: three\n", "train.epochs"),
    ("train:\n  epochs: 2.5\n", "train.epochs"),
    ("study:\n  seeds: 1\n", "study.seeds"),
    ("study:\n  seeds: [1, x]\n", "study.seeds[1]"),
    ("datasets: sample\n", "datasets"),
    ("preprocess:\n  sample: 3\n", "preprocess.sample"),
    ("train:\n  dropout: true\n", "train.dropout"),
])
def test_wrong_types_name_the_dotted_key(tmp_path, text, key):
    with pytest.raises(ParamsError, match=re.escape(f"'{key}' must be")):
        load_params(write(tmp_path, text), strict=False)


def test_ints_are_accepted_for_floats_and_scientific_strings(tmp_path):
    p = load_params(write(tmp_path, "train:\n  lr: 1e-3\n  dropout: 0\n"), strict=False)
    assert p.train.lr == pytest.approx(0.001) and isinstance(p.train.dropout, float)


@pytest.mark.parametrize("value", ["nan", ".nan", "inf", "-.inf", "'NaN'"])
def test_a_float_setting_that_is_not_finite_is_refused(tmp_path, value):
    """NaN passes every `<` range check, so `--set train.lr=nan` reached torch's Adam as a traceback."""
    path = write(tmp_path, f"train:\n  lr: {value}\n")
    with pytest.raises(ParamsError, match="'train.lr' must be a finite number"):
        load_params(path, strict=False)
    import yaml

    from models.config import SinusoidConfig, parse_options
    with pytest.raises(ParamsError, match="'encodings.rope.base' must be a finite number"):   # options too
        parse_options(SinusoidConfig, "encodings", "rope", {"base": yaml.safe_load(value)})


def test_overrides_apply_and_are_checked(tmp_path):
    path = write(tmp_path, "train:\n  epochs: 3\n")
    assert load_params(path, ["train.epochs=7", "study.seeds=[1,2]"], strict=False).study.seeds == [1, 2]
    with pytest.raises(ParamsError, match="unknown params key 'train.epoch'"):
        load_params(path, ["train.epoch=7"], strict=False)
    with pytest.raises(ParamsError, match="not KEY=VALUE"):
        load_params(path, ["train.epochs"], strict=False)
    with pytest.raises(ParamsError, match="must be int, got 1.5") as bad_type:
        load_params(path, ["train.epochs=1.5"], strict=False)
    assert "or --set train.epochs=" in bad_type.value.fix   # the fix names both places a value comes from
    with pytest.raises(ParamsError, match=r"'study.seeds' lists -1: not a seed"):
        load_params(path, ["study.seeds=[1,-1]"], strict=False)
    for text, key, example in (("train=1", "train", "train.epochs"), ("models.sasrec=x", "models.sasrec", None),
                               ("study.next_item=3", "study.next_item", "study.next_item.datasets")):
        with pytest.raises(ParamsError, match=rf"override '{re.escape(text)}': '{key}' is a section of params, not a "
                                              rf"value. Fix: set one of its keys, e.g. --set {example or key}"):
            load_params(path, [text, "train.epochs=2"], strict=False)    # not blamed on the next --set, nor the file


def test_invalid_yaml_and_missing_required_file(tmp_path):
    with pytest.raises(ParamsError, match="not valid YAML at line"):
        load_params(write(tmp_path, "train: [\n"))
    with pytest.raises(ParamsError, match="not valid YAML at line 3 .could not find expected ':'"):
        load_params(write(tmp_path, "train:\n  lr: 0.1\n  epochs 5\n  dim: 4\n"))    # the line without ':', not the next
    for text in ("study:\n  seeds: [1, 2\n  x: 3\n", "study:\n  seeds: {a: 1\n  x: 3\n"):   # walk 41c #6: the line
        with pytest.raises(ParamsError, match=r"not valid YAML at line 3 \(the . opened at line 2 is not closed before it"):   # its opener
            load_params(write(tmp_path, text))
    with pytest.raises(ParamsError, match="not found"):
        load_params(tmp_path / "nope.yaml", required=True)
    with pytest.raises(ParamsError, match=r"line 2 \(found character '\\t' .*Fix: indent with spaces, not tabs"):
        load_params(write(tmp_path, "train:\n\tepochs: 3\n"))


def test_a_params_file_that_is_not_utf8_is_one_line(tmp_path):
    """A UTF-16 params.yaml (Windows Notepad) or a Latin-1 comment was a UnicodeDecodeError traceback in every
    command; a UTF-8 byte-order mark is read as one."""
    path = tmp_path / "params.yaml"
    path.write_bytes("train:\n  epochs: 3\n".encode("utf-16"))
    with pytest.raises(ParamsError, match=r"is not UTF-8 text \(byte 0\). Fix: save it as UTF-8"):
        load_params(path, strict=False)
    path.write_bytes("# caf\xe9\ntrain:\n  epochs: 3\n".encode("latin-1"))
    with pytest.raises(ParamsError, match=r"is not UTF-8 text \(byte 5\)"):
        load_params(path, strict=False)
    path.write_bytes(b"\xef\xbb\xbftrain:\n  epochs: 3\n")
    assert load_params(path, strict=False).train.epochs == 3


def test_a_key_given_twice_is_an_error_naming_both_lines(tmp_path):
    """PyYAML keeps the last of two equal keys: a second `train:` section appended to params.yaml
    replaced the whole first one, and the error named a key it had dropped (train.batch_size)."""
    text = (ROOT / "params.yaml").read_text()
    first = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("train:"))
    last = len(text.splitlines()) + 1
    with pytest.raises(ParamsError, match=rf"line {last}: key 'train' was already given at line {first}.*Fix: give "
                                          "each key once"):
        load_params(write(tmp_path, text + "train:\n  epochs: 7\n"))
    with pytest.raises(ParamsError, match=r"line 3: key 'lr' was already given at line 2"):
        load_params(write(tmp_path, "train:\n  lr: 0.1\n  lr: 0.2\n"), strict=False)
    from pipeline.params import _read_yaml         # equal keys in different mappings are no repeat
    assert _read_yaml(write(tmp_path, "a:\n  lr: 0.1\nb:\n  lr: 0.2\n")) == {"a": {"lr": 0.1}, "b": {"lr": 0.2}}


def test_params_are_frozen():
    p = load_params(ROOT / "params.yaml")
    with pytest.raises(Exception):
        p.train.epochs = 10  # type: ignore[misc]


@pytest.mark.parametrize("drop, key, fix", [
    ("  epochs: 5\n", "train.epochs", "add it to params.yaml (default: epochs: 5)"),
    ("  bucket: 50", "train.bucket", "(default: bucket: 50)"),
    ("  ks: [5, 10, 20]\n", "evaluate.ks", "(default: ks: [5, 10, 20])"),
    ("    seed: 20160101\n", "preprocess.sample.seed", "(default: seed: 20160101)"),
])
def test_a_key_missing_from_the_file_is_an_error_naming_it_and_its_default(tmp_path, drop, key, fix):
    text = (ROOT / "params.yaml").read_text()
    line = next(l for l in text.splitlines(keepends=True) if l.startswith(drop.rstrip("\n")))
    with pytest.raises(ParamsError) as e:
        load_params(write(tmp_path, text.replace(line, "", 1)))
    assert str(e.value).startswith(f"missing params key '{key}'. Fix: ") and fix in str(e.value)


def test_a_missing_section_is_an_error_and_no_file_means_defaults(tmp_path):
    text = (ROOT / "params.yaml").read_text()
    start = text.index("evaluate:")
    cut = text[:start] + text[text.index("\nstudy:") + 1:]
    with pytest.raises(ParamsError, match="missing params key 'evaluate'. Fix: add it"):
        load_params(write(tmp_path, cut))
    assert load_params(tmp_path / "absent.yaml") == Params()          # no file: the built-in defaults


def test_without_a_file_an_option_override_adds_to_the_default_tables(tmp_path):
    """Outside a project (no params.yaml), `--set models.posrec.anchors=false` used to replace the
    built-in `models:` table, and the default study then failed for its missing `sasrec: {}`."""
    absent = tmp_path / "absent.yaml"
    p = load_params(absent, ["models.posrec.anchors=false", "encodings.rmha.clip=4"])
    assert p.models == {**Params().models, "posrec": {"anchors": False}}
    assert p.encodings == {**Params().encodings, "rmha": {"clip": 4}}
    assert load_params(absent, ["models.sasrec.out_proj=false"]).models["sasrec"] == {"out_proj": False}
    assert Params().models == {"sasrec": {}, "pop": {}, "din": {}}         # the defaults are not mutated


def test_cli_names_a_missing_key_and_a_missing_params_file(tmp_path):
    import subprocess
    import sys
    text = (ROOT / "params.yaml").read_text().replace("  valid_fraction: 0.1", "", 1)
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    for path, message in ((write(tmp_path, text), "error: missing params key 'preprocess.valid_fraction'"),
                          (tmp_path / "nope.yaml", f"error: params file {tmp_path / 'nope.yaml'} not found"),
                          (tmp_path / "loop.yaml", f"error: params file {tmp_path / 'loop.yaml'} is a symbolic link "
                                                   "loop"),                                   # walk 41d #4
                          (tmp_path, f"error: --params {tmp_path} is a folder, not a params file. Fix: pass the YAML "
                                     f"file itself, e.g. --params {tmp_path / 'params.yaml'} ({tmp_path / 'params.yaml'} "
                                     "is there)")):
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "preprocess", "sample", str(tmp_path / "raw"),
                               str(tmp_path / "out"), "--params", str(path)], capture_output=True, text=True,
                              cwd=ROOT)
        assert proc.returncode == 1 and proc.stderr.startswith(message), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


IMPORTED = ["imports={beauty_s3rec: {path: data/inbox/Beauty.txt, format: sasrec}}",
            "study.next_item.datasets=[sample, beauty_s3rec]"]


def test_an_import_is_a_next_item_dataset_of_the_grid():
    p = load_params(ROOT / "params.yaml", IMPORTED, required=True)
    assert p.imports == {"beauty_s3rec": {"path": "data/inbox/Beauty.txt", "format": "sasrec"}}
    assert load_params(ROOT / "params.yaml", required=True).imports == {}


@pytest.mark.parametrize("over, problem, fix", [
    (["imports={beauty_s3rec: {path: a, format: sasrec}}"],
     "imported dataset 'beauty_s3rec' is under imports: but no study grid trains it",
     "add it to study.next_item.datasets"),
    (["imports={beauty_s3rec: {path: a, format: sasrc}}"], "'imports.beauty_s3rec.format' must be one of srgnn, sasrec",
     "did you mean 'sasrec'?"),
    (["imports={beauty_s3rec: {pth: a, format: sasrec}}"], "unknown params key 'imports.beauty_s3rec.pth'",
     "did you mean 'path'?"),
    (["imports={beauty_s3rec: {format: sasrec}}"], "'imports.beauty_s3rec.path' must be a non-empty string",
     "give imports.beauty_s3rec.path"),
    (["imports={sample: {path: a, format: srgnn}}"], "'sample' is a registered dataset", "import under another name"),
    (["imports={../x: {path: a, format: srgnn}}"], "'../x' is not a usable dataset name", "lower-case letters"),
    (["imports={beauty_s3rec: {path: 'data/inbox/$HOME.txt', format: sasrec}}",
      "study.next_item.datasets=[sample, beauty_s3rec]"],
     "'imports.beauty_s3rec.path': 'data/inbox/$HOME.txt' holds '$', which the stage's shell command cannot quote",
     "rename the file"),
    (["imports={beauty_s3rec: {path: a, format: sasrec}}", "study.ctr.datasets=[sample_ctr, beauty_s3rec]",
      "study.next_item.datasets=[sample, beauty_s3rec]"],
     "'beauty_s3rec' is an imported next-item dataset but is listed under study.ctr.datasets",
     "move it to study.next_item.datasets"),
    (["study.next_item.datasets=[sample, beauty_s3rec]"],
     "study.next_item.datasets lists 'beauty_s3rec', which is not under datasets: or imports:", "add beauty_s3rec"),
])
def test_a_wrong_import_is_one_line_naming_the_key_and_the_fix(over, problem, fix):
    with pytest.raises(ParamsError) as e:
        load_params(ROOT / "params.yaml", over, required=True)
    assert problem in str(e.value) and fix in str(e.value).split("Fix: ")[1] and "\n" not in str(e.value)


def test_widths_that_can_only_be_typos_are_refused():
    """encodings.cape.pos_dim=100000000 grew to 23 GB and was killed for memory, with no message."""
    from models.encodings import check_encoding_options
    for name in ("cape", "abs_con", "learnt_con", "rotatory_con", "none_con"):
        with pytest.raises(ParamsError, match=f"encodings.{name}.pos_dim must be in 0..65536, got 100000000"):
            check_encoding_options(name, {"pos_dim": 100000000})
    with pytest.raises(ParamsError, match="train.dim"):
        from_dict(Params, {"train": {"dim": 10 ** 8}})


@pytest.mark.parametrize("loss", ["bce", "sampled"])
def test_a_ce_impl_the_loss_does_not_use_is_refused(loss):
    """train.ce_impl only sets how the full cross-entropy is computed; with bce / sampled it was accepted and
    recorded (and split report rows) while changing nothing."""
    with pytest.raises(ParamsError, match=f"'train.ce_impl' is chunked, .* but 'train.loss' is {loss}: it would be "
                                          "ignored"):
        from_dict(Params, {"train": {"loss": loss, "ce_impl": "chunked"}})
    from_dict(Params, {"train": {"loss": loss, "ce_impl": "auto"}})
    from_dict(Params, {"train": {"loss": "ce", "ce_impl": "chunked"}})


def test_hostile_params_files_are_one_line_errors_at_once(tmp_path):
    """Walk 43g #4, #5: a 1 KB YAML alias bomb hung every command (the error printed its 10^9 elements); deep
    nesting and a 5,000-digit integer were tracebacks; a sample of 10^12 sessions numpy's MemoryError."""
    import time
    levels = ["&a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]     # the last holds 10^9 x's
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(f"train:\n  epochs: [{', '.join(levels)}]\n")
    started = time.monotonic()
    with pytest.raises(ParamsError, match="params key 'train.epochs' must be int, got ") as e:
        load_params(bomb, strict=False)
    assert time.monotonic() - started < 10 and len(str(e.value)) < 600
    deep = tmp_path / "deep.yaml"
    deep.write_text("train:\n  epochs: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ParamsError, match="nests lists or mappings too deeply to read"):
        load_params(deep, strict=False)
    huge = tmp_path / "huge.yaml"
    huge.write_text("train:\n  epochs: " + "9" * 5000 + "\n")
    with pytest.raises(ParamsError, match="holds an integer too long to read"):
        load_params(huge, strict=False)
    sample = tmp_path / "sample.yaml"
    sample.write_text("preprocess:\n  sample:\n    sessions: 1000000000000\n")
    with pytest.raises(ParamsError, match=r"'preprocess.sample.sessions' must be <= 100,000,000, got 1000000000000"):
        load_params(sample, strict=False)


@pytest.mark.parametrize("text, said", [
    ("evaluate.ks=[5,", "has a value that is not valid YAML"), ("train.epochs=*a", "undefined alias"),
    ("train.epochs=!!python/object:os.system x", "not valid YAML"), ("train.epochs=@", "cannot start any token"),
    ("train.epochs=" + "[" * 3000, "nests lists or mappings too deeply"),
    ("train.epochs=" + "9" * 5000, "holds an integer too long to read"), ("models.x={a: 1, a: 2}", "the key 'a' twice"),
    ("train.epochs=2001-02-29", "YAML cannot build (day is out of range"), ("train.epochs=!!int abc", "cannot build"),
    ("train.epochs=!!bool maybe", "cannot build"), ("train.epochs=!!map a", "expected a mapping node")])
def test_an_override_whose_value_is_not_yaml_is_one_line(tmp_path, text, said):
    """Walk 44i #1: these were PyYAML's (or Python's) tracebacks on every command that takes --set."""
    path = write(tmp_path, "train:\n  epochs: 3\n")
    with pytest.raises(ParamsError, match=re.escape(said)) as err:
        load_params(path, [text], strict=False)
    assert len(str(err.value)) < 400


def test_a_params_file_that_is_a_pipe_or_device_is_named_so(tmp_path):
    """Walk 44i #5: `--params /dev/null` (or `<(...)`) said "not found"."""
    with pytest.raises(ParamsError, match="is not a regular file"):
        load_params("/dev/null", required=True)
