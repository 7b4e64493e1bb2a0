"""pipeline.download against a real HTTP server on 127.0.0.1 (tests/httpserver.py)."""
from __future__ import annotations
import re

import hashlib
import io
import json
import random
import shutil
import socket
import sys
import zipfile
from pathlib import Path

import pytest

import pipeline.datasets as registry
from pipeline import download
from pipeline.datasets import DatasetSpec, SourceSpec
from pipeline.errors import DownloadError
from pipeline.params import DownloadParams, SampleParams

sys.path.insert(0, str(Path(__file__).parent))
from httpserver import FileServer  # noqa: E402

FAST = DownloadParams(mirror=None, retries=3, timeout_s=5.0, backoff_s=0.01)
CLICKS = b"sessionId;userId;itemId;timeframe;eventdate\n1;NA;81766;526309;2016-05-09\n" * 50


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2016, 1, 1, 0, 0, 0))
            zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


ZIP = make_zip({"pkg/": b"", "pkg/clicks.csv": CLICKS, "pkg/other.txt": b"not needed\n"})
BLOB = random.Random(7).randbytes(300_000)       # a plain file, big enough for several chunks


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """A private dataset registry, no proxies, no SEQPE_MIRROR, cwd without data/inbox. The real registry is
    loaded first: a family module imported for the first time under the private one registered there, and
    was missing from the real one for the rest of the session (test_interrupt then met "unknown dataset
    'sample'" when it ran after this file in one process)."""
    registry._load_all()
    monkeypatch.setattr(registry, "DATASETS", {})
    monkeypatch.setattr(registry, "_LOADED", True)
    for var in ("SEQPE_MIRROR", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def srv():
    with FileServer({"data.zip": ZIP, "blob.bin": BLOB}) as s:
        yield s


def dataset(name="toy", name_=None, **source) -> str:
    """Register dataset `name` whose source is named `name_` (default: the dataset's name)."""
    fields = dict(name=name_ or name, filename="data.zip", archive="zip", files=("clicks.csv",))
    fields.update(source)
    registry.DATASETS[name] = DatasetSpec(name=name, source=SourceSpec(**fields), protocol="srgnn",
                                          description="test", reader=lambda raw_dir: None)
    return name


def blob_dataset(srv, **source) -> str:
    return dataset("blob", filename="blob.bin", archive="none", files=("blob.bin",), url=srv.url("blob.bin"),
                   sha256=sha(BLOB), **source)


def closed_port_url(path: str) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/{path}"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- clean path

def test_clean_download_writes_files_and_source_json(srv, tmp_path):
    name = dataset(url=srv.url("data.zip"), sha256=sha(ZIP))
    dst = tmp_path / "raw" / name
    summary = download.run(name, dst, FAST, progress=False)
    assert snapshot(dst) == {"clicks.csv": CLICKS, "source.json": (dst / "source.json").read_bytes()}
    assert json.loads((dst / "source.json").read_text()) == {
        "dataset": "toy", "source": "toy", "url": srv.url("data.zip"), "origin": "url", "filename": "data.zip",
        "bytes": len(ZIP), "sha256": sha(ZIP), "md5": hashlib.md5(ZIP).hexdigest(),
        "files": {"clicks.csv": {"bytes": len(CLICKS), "sha256": sha(CLICKS)}}}
    assert summary == {"dataset": "toy", "source": "toy", "origin": "url", "url": srv.url("data.zip"),
                       "file": "data.zip", "bytes": len(ZIP), "sha256": sha(ZIP), "files": "clicks.csv",
                       "note": "verified sha256 (published)"}
    assert srv.log == [("data.zip", None, 200)]
    assert sorted(p.name for p in dst.parent.iterdir()) == ["toy"]      # no temporary leftovers

    again = download.run(name, dst, FAST, progress=False)
    assert again["note"] == "already present (files match source.json)"
    assert len(srv.log) == 1                                            # no second request


def test_without_published_checksum_records_sha256_then_checks_it(srv, tmp_path):
    name = dataset(url=srv.url("data.zip"))
    dst = tmp_path / "raw" / name
    summary = download.run(name, dst, FAST, progress=False)
    assert summary["note"] == f"no published checksum: recorded sha256 {sha(ZIP)}"
    assert json.loads((dst / "source.json").read_text())["sha256"] == sha(ZIP)
    # The file on disk is damaged and the source now serves other bytes: the recorded sha256 catches it.
    (dst / "clicks.csv").write_bytes(b"damaged")
    srv.files["data.zip"] = make_zip({"clicks.csv": b"other"})
    with pytest.raises(DownloadError, match=f"expected {sha(ZIP)} \\(recorded by an earlier download\\)"):
        download.run(name, dst, FAST, progress=False)
    assert (dst / "clicks.csv").read_bytes() == b"damaged"              # left as it was


def test_other_data_as_extracted_files_is_refused_as_another_archive_is(tmp_path):
    """Only the archive's sha256 was held against source.json: the same other data given as an extracted folder
    replaced DST silently, and the first archive was then accepted again. One rule now, whatever the form."""
    name = dataset()
    dst = tmp_path / "raw" / name
    (tmp_path / "data.zip").write_bytes(ZIP)
    download.run(name, dst, FAST, progress=False, from_path=tmp_path / "data.zip")
    before = snapshot(dst)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "clicks.csv").write_bytes(CLICKS + b"2;NA;1;1;2016-05-10\n")
    with pytest.raises(DownloadError, match=r"raw/toy holds the files of an earlier download \(its source.json\), "
                                            r"and these differ \(clicks.csv: sha256 .* recorded, .* now\).*Fix: to "
                                            r"replace them on purpose, delete the folder .*raw/toy and run again"):
        download.run(name, dst, FAST, progress=False, from_path=tmp_path / "other")
    assert snapshot(dst) == before                                      # left as it was
    (tmp_path / "same").mkdir()
    (tmp_path / "same" / "clicks.csv").write_bytes(CLICKS)             # the same files, extracted: accepted
    download.run(name, dst, FAST, progress=False, from_path=tmp_path / "same")
    (tmp_path / "other.zip").write_bytes(make_zip({"clicks.csv": b"x" * 40}))
    with pytest.raises(DownloadError, match=r"these differ \(clicks.csv"):   # the record of extracted files has no
        download.run(name, dst, FAST, progress=False, from_path=tmp_path / "other.zip")   # archive sha to check
    shutil.rmtree(dst)                                                 # the documented way to replace them
    download.run(name, dst, FAST, progress=False, from_path=tmp_path / "other")
    assert (dst / "clicks.csv").read_bytes().endswith(b"2016-05-10\n")


# --------------------------------------------------------------------------- resume

def test_dropped_connection_is_resumed_with_a_range_request(srv, tmp_path):
    name = blob_dataset(srv)
    srv.drop_after, srv.drops = 123_457, 1
    download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert (tmp_path / "raw" / name / "blob.bin").read_bytes() == BLOB
    assert srv.log == [("blob.bin", None, 200), ("blob.bin", "bytes=123457-", 206)]


def test_partial_file_from_an_earlier_run_is_resumed(srv, tmp_path):
    name = blob_dataset(srv)
    dst = tmp_path / "raw" / name
    dst.mkdir(parents=True)
    (dst / ".blob.bin.part").write_bytes(BLOB[:100_000])
    download.run(name, dst, FAST, progress=False)
    assert (dst / "blob.bin").read_bytes() == BLOB
    assert srv.log == [("blob.bin", "bytes=100000-", 206)]
    assert not (dst / ".blob.bin.part").exists()


def test_a_partial_file_that_is_a_link_is_removed_not_written_through(srv, tmp_path):
    """Walk 43g #1: a `.part` symbolic link in the destination (from a cloned repository, a shared folder) was
    opened and written through: a file outside the destination was replaced by the download."""
    name = blob_dataset(srv)
    dst = tmp_path / "raw" / name
    dst.mkdir(parents=True)
    outside = tmp_path / "precious.txt"
    outside.write_text("precious\n")
    (dst / ".blob.bin.part").symlink_to(outside)
    download.run(name, dst, FAST, progress=False)
    assert (dst / "blob.bin").read_bytes() == BLOB and outside.read_text() == "precious\n"
    assert srv.log == [("blob.bin", None, 200)]             # afresh: the link's target was no partial download


def test_stalled_transfer_times_out_and_resumes(srv, tmp_path):
    name = blob_dataset(srv)
    srv.drop_after, srv.drops, srv.stall_s = 70_000, 1, 2.0
    params = DownloadParams(retries=3, timeout_s=0.5, backoff_s=0.01)
    download.run(name, tmp_path / "raw" / name, params, progress=False)
    assert (tmp_path / "raw" / name / "blob.bin").read_bytes() == BLOB
    # the stalled first answer, then resumes. Usually one; on a loaded machine (a CI run beside a DVC
    # pipeline) a resumed read also outlasted the 0.2 s timeout this test first had, so a later resume
    # is allowed, each from where the file had got to
    (_, first, s1), *resumes = srv.log
    assert (first, s1) == (None, 200) and resumes and all(status == 206 for _, _, status in resumes)
    starts = [int(r.removeprefix("bytes=").rstrip("-")) for _, r, _ in resumes]
    assert 0 < starts[0] <= 70_000 and starts == sorted(starts)         # a read cut mid-chunk is re-fetched


def test_a_dripping_server_is_cut_below_the_minimum_rate_not_waited_on_forever(srv, tmp_path):
    """A byte every 0.05 s never trips the per-read timeout (walk 43g #7: a byte a second hung download for
    ever). Under 1 KiB/s over a window of timeout_s, the attempt is cut and counts as one without progress."""
    name = blob_dataset(srv)
    srv.drip_s = 0.05
    params = DownloadParams(retries=2, timeout_s=0.5, backoff_s=0.01)
    with pytest.raises(DownloadError) as err:
        download.run(name, tmp_path / "raw" / name, params, progress=False)
    assert "bytes/s" in err.value.problem and len(srv.log) == 2          # `retries` attempts, then it gives up
    assert 0 < (tmp_path / "raw" / name / ".blob.bin.part").stat().st_size < 100      # kept for a resume
    srv.drip_s = None
    download.run(name, tmp_path / "raw" / name, params, progress=False)
    assert (tmp_path / "raw" / name / "blob.bin").read_bytes() == BLOB
    assert srv.log[-1][1:] == (f"bytes={(srv.log[-1][1] or '').removeprefix('bytes=').rstrip('-')}-", 206)


def test_slow_spells_of_a_transfer_that_keeps_bringing_data_are_progress(srv, tmp_path):
    """Walk 44j #3: each answer sends 30 KB at once, then drips: every attempt is cut for its slow spell, yet it
    brought far more than a window at the floor rate, so it is progress, not one of `retries` failures (the
    transfer gave up after `retries` such spells)."""
    name = blob_dataset(srv)
    srv.drip_s, srv.drip_after = 0.05, 30_000
    download.run(name, tmp_path / "raw" / name, DownloadParams(retries=2, timeout_s=0.3, backoff_s=0.01),
                 progress=False)
    assert (tmp_path / "raw" / name / "blob.bin").read_bytes() == BLOB and len(srv.log) >= 10


def test_an_endless_body_stops_at_the_registered_size_and_the_next_origin_is_tried(srv, tmp_path):
    srv.files["mirror/blob.bin"] = BLOB
    name = blob_dataset(srv, size=len(BLOB), mirrors=(srv.url("mirror/blob.bin"),))
    srv.endless = True
    with pytest.raises(DownloadError) as err:
        download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert f"more than the {len(BLOB):,} bytes" in err.value.problem
    assert len(srv.log) == 2 and not (tmp_path / "raw").exists()       # both origins; nothing left behind


def test_an_endless_body_of_unknown_size_stops_before_the_disk_is_full(srv, tmp_path, monkeypatch):
    from pipeline import fetch
    name = dataset("blob", filename="blob.bin", archive="none", files=("blob.bin",), url=srv.url("blob.bin"))
    srv.endless = True
    monkeypatch.setattr(fetch, "_DISK_CHECK", 1 << 20)
    free = iter([fetch.LOW_DISK * 2, fetch.LOW_DISK - 1])                  # the second look finds the disk full
    monkeypatch.setattr(fetch, "_free_bytes", lambda folder: next(free))
    with pytest.raises(DownloadError) as err:
        download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert "GiB is left free" in err.value.problem and "endless body" in err.value.fix
    assert (tmp_path / "raw" / name / ".blob.bin.part").stat().st_size < 3 << 20     # stopped at the second look


def test_complete_partial_file_is_not_fetched_again(srv, tmp_path):
    name = blob_dataset(srv)
    dst = tmp_path / "raw" / name
    dst.mkdir(parents=True)
    (dst / ".blob.bin.part").write_bytes(BLOB)                         # finished, but never verified
    download.run(name, dst, FAST, progress=False)
    assert (dst / "blob.bin").read_bytes() == BLOB
    assert srv.log == [("blob.bin", f"bytes={len(BLOB)}-", 416)]


def test_server_without_range_support_restarts_from_zero(srv, tmp_path):
    name = blob_dataset(srv)
    srv.ranges = False
    srv.drop_after, srv.drops = 50_000, 1
    download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert (tmp_path / "raw" / name / "blob.bin").read_bytes() == BLOB
    assert srv.log == [("blob.bin", None, 200), ("blob.bin", "bytes=50000-", 200)]


def test_stale_partial_file_gets_one_fresh_download(srv, tmp_path):
    name = blob_dataset(srv)
    dst = tmp_path / "raw" / name
    dst.mkdir(parents=True)
    (dst / ".blob.bin.part").write_bytes(b"x" * 1000)                   # not a prefix of BLOB
    download.run(name, dst, FAST, progress=False)
    assert (dst / "blob.bin").read_bytes() == BLOB
    assert srv.log == [("blob.bin", "bytes=1000-", 206), ("blob.bin", None, 200)]


# --------------------------------------------------------------------------- HTTP failures

def test_404_fails_fast_and_the_next_origin_is_tried(srv, tmp_path):
    name = dataset(url=srv.url("data.zip"), mirrors=(srv.url("gone.zip"),), sha256=sha(ZIP))
    summary = download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert summary["origin"] == "url"
    assert srv.log == [("gone.zip", None, 404), ("data.zip", None, 200)]


def test_404_everywhere_is_one_clear_error(srv, tmp_path):
    name = dataset(url=srv.url("gone.zip"))
    with pytest.raises(DownloadError) as err:
        download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    msg = str(err.value)
    assert "answered HTTP 404" in msg and "data.zip" in msg and f"seqpe download {name} --from" in msg
    assert "\n" not in msg
    assert srv.log == [("gone.zip", None, 404)]                         # no retries on 404
    assert not (tmp_path / "raw" / name).exists()


def test_500_is_retried_then_succeeds(srv, tmp_path):
    name = dataset(url=srv.url("data.zip"), sha256=sha(ZIP))
    srv.fail_status, srv.fails = 500, 2
    download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert [s for _, _, s in srv.log] == [500, 500, 200]
    assert (tmp_path / "raw" / name / "clicks.csv").read_bytes() == CLICKS


def test_500_on_every_attempt_gives_up_clearly(srv, tmp_path):
    name = dataset(url=srv.url("data.zip"))
    srv.fail_status, srv.fails = 503, None
    with pytest.raises(DownloadError, match="answered HTTP 503 Service Unavailable after 3 attempts") as err:
        download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert "seqpe download toy --from PATH/data.zip" in str(err.value)
    assert len(srv.log) == 3
    assert not (tmp_path / "raw" / name).exists()


# --------------------------------------------------------------------------- verification

def test_checksum_mismatch_leaves_nothing_and_keeps_the_good_copy(srv, tmp_path):
    dst = tmp_path / "raw" / "toy"
    dataset(url=srv.url("data.zip"), sha256=sha(ZIP))
    download.run("toy", dst, FAST, progress=False)
    before = snapshot(dst)
    new = make_zip({"clicks.csv": b"new release"})
    dataset(url=srv.url("data.zip"), sha256=sha(new))                    # registry expects the new release
    with pytest.raises(DownloadError) as err:                            # ... the server still sends the old one
        download.run("toy", dst, FAST, progress=False)
    msg = str(err.value)
    assert f"sha256 of data.zip does not match: expected {sha(new)} (published), got {sha(ZIP)}" in msg
    assert "Fix:" in msg and "--from" in msg and "\n" not in msg
    assert snapshot(dst) == before                                       # no .part, good copy untouched
    assert sorted(p.name for p in dst.parent.iterdir()) == ["toy"]


def test_size_mismatch_is_reported(srv, tmp_path):
    name = dataset(url=srv.url("data.zip"), size=len(ZIP) + 1)
    with pytest.raises(DownloadError, match=f"expected {len(ZIP) + 1:,} bytes, got {len(ZIP):,}"):
        download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert not (tmp_path / "raw" / name).exists()


def test_corrupt_archive_is_one_clear_error(srv, tmp_path):
    srv.files["data.zip"] = ZIP[: len(ZIP) // 2]
    name = dataset(url=srv.url("data.zip"))
    with pytest.raises(DownloadError, match="data.zip is truncated or corrupt"):
        download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert not (tmp_path / "raw" / name).exists()


def test_path_traversal_member_is_refused(srv, tmp_path):
    srv.files["data.zip"] = make_zip({"clicks.csv": CLICKS, "../evil": b"owned"})
    name = dataset(url=srv.url("data.zip"))
    with pytest.raises(DownloadError, match="escape the target folder: '../evil'"):
        download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert not list(tmp_path.rglob("evil"))
    assert not (tmp_path / "raw" / name).exists()


# --------------------------------------------------------------------------- other origins

def test_from_archive_and_from_extracted_folder(tmp_path):
    name = dataset(url=closed_port_url("data.zip"), sha256=sha(ZIP))
    archive = tmp_path / "Downloads" / "data.zip"
    archive.parent.mkdir()
    archive.write_bytes(ZIP)
    summary = download.run(name, tmp_path / "a", FAST, from_path=archive, progress=False)
    assert (summary["origin"], summary["note"]) == ("file", "verified sha256 (published)")
    assert (tmp_path / "a" / "clicks.csv").read_bytes() == CLICKS
    assert archive.read_bytes() == ZIP                                    # the user's file is left alone

    extracted = tmp_path / "unpacked" / "dataset-train"
    extracted.mkdir(parents=True)
    (extracted / "clicks.csv").write_bytes(CLICKS)
    summary = download.run(name, tmp_path / "b", FAST, from_path=tmp_path / "unpacked", progress=False)
    assert summary["note"].startswith("from extracted files")
    rec = json.loads((tmp_path / "b" / "source.json").read_text())
    assert (rec["origin"], rec["sha256"], rec["files"]) == ("file", None, {"clicks.csv": {
        "bytes": len(CLICKS), "sha256": sha(CLICKS)}})


def test_datasets_sharing_a_source_download_it_once(srv, tmp_path):
    source = dict(filename="data.zip", archive="zip", files=("clicks.csv",), url=srv.url("data.zip"))
    dataset("toy_1_64", name_="shared", **source)
    dataset("toy_1_4", name_="shared", **source)
    first = download.run("toy_1_64", tmp_path / "raw" / "toy_1_64", FAST, progress=False)
    second = download.run("toy_1_4", tmp_path / "raw" / "toy_1_4", FAST, progress=False)
    assert len(srv.log) == 1
    assert second["note"] == f"shared from {tmp_path / 'raw' / 'toy_1_64'} (same source, files match its source.json)"
    a, b = (tmp_path / "raw" / name / "clicks.csv" for name in ("toy_1_64", "toy_1_4"))
    assert a.read_bytes() == b.read_bytes() == CLICKS and a.stat().st_ino == b.stat().st_ino   # one copy on disk
    rec = json.loads((tmp_path / "raw" / "toy_1_4" / "source.json").read_text())
    assert rec == dict(json.loads((tmp_path / "raw" / "toy_1_64" / "source.json").read_text()), dataset="toy_1_4")
    assert (first["sha256"], second["sha256"]) == (sha(ZIP), sha(ZIP))


def test_published_member_md5_is_checked(tmp_path):
    good = hashlib.md5(CLICKS).hexdigest()
    folder = tmp_path / "unpacked"
    folder.mkdir()
    (folder / "clicks.csv").write_bytes(CLICKS)
    name = dataset(url=None, file_md5={"clicks.csv": good})
    summary = download.run(name, tmp_path / "ok", FAST, from_path=folder, progress=False)
    assert summary["note"] == "from extracted files: no archive to verify (published md5 of the files verified)"
    (folder / "clicks.csv").write_bytes(CLICKS[:-1])
    with pytest.raises(DownloadError, match=f"md5 of clicks.csv given with --from does not match: expected {good} "
                                            r"\(published\), got \w+; \w+ is read from its published files only, "
                                            "each checked whole, so a subset or files of your own"):   # 'inside data.zip'
        download.run(name, tmp_path / "bad", FAST, from_path=folder, progress=False)
    assert not (tmp_path / "bad").exists()
    (tmp_path / "data.zip").write_bytes(make_zip({"pkg/clicks.csv": CLICKS[:-1]}))
    with pytest.raises(DownloadError, match="md5 of clicks.csv inside data.zip does not match"):   # the archive
        download.run(name, tmp_path / "bad", FAST, from_path=tmp_path / "data.zip", progress=False)
    assert not (tmp_path / "bad").exists()


def test_inbox_file_is_used_without_network(tmp_path):
    name = dataset(url=None, manual="log in somewhere", sha256=sha(ZIP))
    (tmp_path / "data" / "inbox").mkdir(parents=True)
    (tmp_path / "data" / "inbox" / "data.zip").write_bytes(ZIP)
    summary = download.run(name, tmp_path / "data" / "raw" / name, FAST, progress=False)
    assert summary["origin"] == "file"
    assert (tmp_path / "data" / "raw" / name / "clicks.csv").read_bytes() == CLICKS


def test_mirror_from_env_var_is_tried_first(srv, tmp_path, monkeypatch):
    name = dataset(url=closed_port_url("data.zip"), sha256=sha(ZIP))
    monkeypatch.setenv("SEQPE_MIRROR", srv.url(""))
    summary = download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert summary["origin"] == "mirror"
    assert srv.log == [("data.zip", None, 200)]
    monkeypatch.setenv("SEQPE_MIRROR", closed_port_url(""))              # --mirror beats the env var
    summary = download.run(name, tmp_path / "raw2" / name, FAST, mirror=srv.url(""), progress=False)
    assert summary["origin"] == "mirror"


def test_no_network_names_the_file_and_from(tmp_path):
    name = dataset(url=closed_port_url("data.zip"), homepage="https://example.org/toy")
    with pytest.raises(DownloadError) as err:
        download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    msg = str(err.value)
    assert msg.startswith("no network: could not reach any origin of data.zip for toy")
    assert "connection refused" in msg and "seqpe download toy --from PATH/data.zip" in msg
    assert not (tmp_path / "raw" / name).exists()


def test_login_only_source_says_how_to_get_it(tmp_path):
    name = dataset(url=None, manual="register at https://example.org, download data.zip",
                   homepage="https://example.org")
    with pytest.raises(DownloadError) as err:
        download.run(name, tmp_path / "raw" / name, FAST, progress=False)
    assert str(err.value) == ("data.zip (toy) has no public download URL. Fix: register at https://example.org, "
                              "download data.zip, then run `seqpe download toy --from PATH/data.zip` (or put it "
                              "in data/inbox/, or set SEQPE_MIRROR to a mirror that has it)")


def test_generated_source_goes_through_the_from_path(tmp_path):
    calls = []

    def generate(dst_file: Path, sample: SampleParams) -> None:
        calls.append(sample.seed)
        dst_file.write_bytes(make_zip({"gen/clicks.csv": f"seed {sample.seed}\n".encode()}))

    name = dataset("gen", filename="gen.zip", archive="generated", generate=generate)
    dst = tmp_path / "raw" / "gen"
    summary = download.run(name, dst, FAST, progress=False, sample=SampleParams(seed=3))
    assert (summary["origin"], summary["note"]) == ("generated", "generated by seqpe (seeded by preprocess.sample)")
    assert (dst / "clicks.csv").read_bytes() == b"seed 3\n"
    first = (dst / "source.json").read_bytes()
    again = download.run(name, dst, FAST, progress=False, sample=SampleParams(seed=3))
    assert again["note"].startswith("already present") and (dst / "source.json").read_bytes() == first
    download.run(name, dst, FAST, progress=False, sample=SampleParams(seed=4))
    assert (dst / "clicks.csv").read_bytes() == b"seed 4\n" and calls == [3, 3, 4]
    assert sorted(p.name for p in dst.parent.iterdir()) == ["gen"]
    with pytest.raises(DownloadError, match="gen is generated by seqpe itself"):
        download.run(name, dst, FAST, from_path=tmp_path, progress=False)


def test_cli_error_is_one_line_exit_1(tmp_path, monkeypatch, capsys):
    from pipeline import cli
    dataset(url=closed_port_url("data.zip"))
    shipped = (Path(__file__).resolve().parents[1] / "params.yaml").read_text()
    (tmp_path / "params.yaml").write_text(shipped.replace("  retries: 5", "  retries: 1")     # only `toy` is known:
                                          .replace("  backoff_s: 1.0", "  backoff_s: 0.01")   # no datasets to list
                                          .replace("    datasets: [sample]\n", "    datasets: []\n")
                                          .replace("    datasets: [sample_ctr]\n", "    datasets: []\n"))
    shipped = re.sub(r"(?m)^datasets:\n(  - .*\n)+", "datasets: []\n", (tmp_path / "params.yaml").read_text())
    (tmp_path / "params.yaml").write_text(shipped)
    monkeypatch.setattr(sys, "argv", ["seqpe", "download", "toy", str(tmp_path / "raw"), "--quiet"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("error: no network") and "--from PATH/data.zip" in lines[0]


def test_download_from_a_local_zip_imports_no_library_but_polars(tmp_path):
    """`download --from` needs no numpy, pyarrow or HTTP library. Polars (~0.2 s per process) stayed unimported too
    until download parsed the first rows of what it installs with the dataset's reader (walk 34b: a zip member of
    another format was installed, and refused only by preprocess, with a fix to download again)."""
    import subprocess
    zpath = tmp_path / "dataset-train-diginetica.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("train-item-views.csv", "sessionId;userId;itemId;timeframe;eventdate\n1;;5;10;2016-05-01\n")
    code = ("import sys; from pathlib import Path; from pipeline.download import run; "
            "from pipeline.params import DownloadParams; "
            f"run('diginetica', Path({str(tmp_path / 'raw')!r}), DownloadParams(), from_path=Path({str(zpath)!r}), progress=False); "
            "print(sorted(m for m in ('polars.dataframe', 'numpy.core', 'numpy._core', 'pyarrow.lib', 'requests') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['polars.dataframe']"
    assert (tmp_path / "raw" / "train-item-views.csv").read_text().endswith("2016-05-01\n")


# --------------------------------------------------------------------------- files recognised by content

def test_a_text_file_under_another_name_is_the_needed_file(tmp_path):
    """`--from my_views.csv` (a good CSV under another name) used to be read as a corrupt zip."""
    name = dataset(url=closed_port_url("data.zip"))
    mine = tmp_path / "my_views.csv"
    mine.write_bytes(CLICKS)
    summary = download.run(name, tmp_path / "raw", FAST, from_path=mine, progress=False)
    assert (tmp_path / "raw" / "clicks.csv").read_bytes() == CLICKS
    assert "my_views.csv, recognised by its content" in summary["note"]
    again = download.run(name, tmp_path / "raw", FAST, progress=False)          # source.json vouches for it
    assert again["note"].startswith("already present")


def test_an_archive_under_another_name_is_unpacked_as_what_it_is(tmp_path):
    name = dataset(url=closed_port_url("data.7z"), filename="data.7z", archive="7z")
    mine = tmp_path / "download(1).bin"
    mine.write_bytes(ZIP)                                                  # a zip, where a 7z was expected
    download.run(name, tmp_path / "raw", FAST, from_path=mine, progress=False)
    assert (tmp_path / "raw" / "clicks.csv").read_bytes() == CLICKS


def test_binary_junk_is_named_and_never_echoed(tmp_path):
    name = dataset(url=closed_port_url("data.7z"), filename="data.7z", archive="7z")
    junk = tmp_path / "junk.dat"
    junk.write_bytes(b"\x1b[31m;;;\x00\x07" + bytes(range(256)))
    with pytest.raises(DownloadError) as err:
        download.run(name, tmp_path / "raw", FAST, from_path=junk, progress=False)
    msg = str(err.value)
    assert "junk.dat is binary data (starts with bytes 1b 5b 33 31 6d 3b 3b 3b), not a 7z archive" in msg
    assert "\x1b" not in msg and "\x00" not in msg and not (tmp_path / "raw").exists()


def test_an_html_page_instead_of_the_archive_tries_the_next_origin(srv, tmp_path):
    srv.files["login.zip"] = b"<!DOCTYPE html><html><body>Please log in</body></html>"
    name = dataset(mirrors=(srv.url("login.zip"),), url=srv.url("data.zip"))
    summary = download.run(name, tmp_path / "raw", FAST, progress=False)
    assert summary["origin"] == "url" and (tmp_path / "raw" / "clicks.csv").read_bytes() == CLICKS
    only = dataset("login_only", mirrors=(srv.url("login.zip"),))
    with pytest.raises(DownloadError, match=r"is an HTML page \(the host may want a login\), not a zip archive"):
        download.run(only, tmp_path / "raw2", FAST, progress=False)
    assert not (tmp_path / "raw2").exists()


def test_a_failed_download_leaves_no_empty_folders(tmp_path):
    name = dataset(url=closed_port_url("data.zip"))
    with pytest.raises(DownloadError, match="no network"):
        download.run(name, tmp_path / "x" / "raw" / "y", FAST, progress=False)
    assert not (tmp_path / "x").exists()


def test_a_text_file_that_does_not_read_as_the_needed_file_is_refused_at_download(tmp_path):
    """`download diginetica --from README.md` (any text) was stored as train-item-views.csv with its sha256
    in source.json; only `seqpe preprocess` refused it. The dataset's reader now reads its first rows."""
    from pipeline.datasets.sessions import read_diginetica
    from pipeline.errors import DownloadError
    registry.DATASETS["diginetica"] = DatasetSpec(
        name="diginetica", protocol="srgnn", description="test", reader=read_diginetica,
        source=SourceSpec(name="diginetica", filename="d.zip", archive="zip", files=("train-item-views.csv",)))
    mine = tmp_path / "notes.txt"
    mine.write_text("# my notes\nnot a click log\n")
    with pytest.raises(DownloadError, match=r"notes.txt does not read as diginetica's train-item-views.csv: "
                                            r".*notes.txt has header '# my notes'"):
        download.run("diginetica", tmp_path / "raw", FAST, from_path=mine, progress=False)
    assert not (tmp_path / "raw").exists()
    good = tmp_path / "views.csv"
    good.write_text("sessionId;userId;itemId;timeframe;eventdate\n1;NA;5;100;2016-05-01\n1;NA;6;200;2016-05-01\n")
    download.run("diginetica", tmp_path / "raw", FAST, from_path=good, progress=False)
    assert (tmp_path / "raw" / "train-item-views.csv").read_bytes() == good.read_bytes()
    named = tmp_path / "views.csv.gz"                     # walk 41d #5: named .gz, plain text inside: said
    named.write_text("hello\n")
    with pytest.raises(DownloadError, match=r"views.csv.gz does not read as .*\(it is named .gz but is not gzip"):
        download.run("diginetica", tmp_path / "raw2", FAST, from_path=named, progress=False)
    loop = tmp_path / "loop.csv"                          # walk 41d #4: a link loop is not "does not exist"
    loop.symlink_to("loop.csv")
    with pytest.raises(DownloadError, match=r"--from .*loop.csv is a symbolic link loop"):
        download.run("diginetica", tmp_path / "raw3", FAST, from_path=loop, progress=False)



def test_from_a_pipe_or_a_link_to_a_device_is_refused_not_read_forever(tmp_path):
    """Walk 43g #8: `--from` a named pipe hung in the content sniffing; a folder whose needed file links to
    /dev/zero was copied without end (4.7 GB in 4 s)."""
    import os
    name = dataset(filename="data.zip", files=("clicks.csv",))
    fifo = tmp_path / "data.zip"
    os.mkfifo(fifo)
    with pytest.raises(DownloadError, match=r"--from .*data.zip is a named pipe \(FIFO\), not a file"):
        download.run(name, tmp_path / "raw" / name, FAST, progress=False, from_path=fifo)
    folder = tmp_path / "extracted"
    folder.mkdir()
    (folder / "clicks.csv").symlink_to("/dev/zero")
    with pytest.raises(DownloadError, match=r"clicks.csv is a character device, not a file"):
        download.run(name, tmp_path / "raw" / name, FAST, progress=False, from_path=folder)
    assert not (tmp_path / "raw" / name).exists()
