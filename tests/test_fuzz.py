"""Replays regression inputs and runs every libFuzzer target ($TALLY_BUILD/fuzz/fuzz_NAME).

For each target NAME:
  * every file in tests/fuzz/regressions/NAME/ must run clean;
  * a copy of tests/fuzz/corpus/NAME/ is fuzzed for FUZZ_SECONDS (default 5). An input
    that crashes, leaks, times out or runs out of memory is copied into
    tests/fuzz/regressions/NAME/ (kept as a regression vector) and the case fails.
A build directory without fuzz targets is a failure, not a skip.
"""
import hashlib
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("TALLY_BUILD", "build")
FUZZ_SECONDS = int(os.environ.get("FUZZ_SECONDS", "5"))
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
REGRESSIONS = ROOT / "tests" / "fuzz" / "regressions"
COMMON_FLAGS = ["-timeout=5", "-rss_limit_mb=2048"]
# libFuzzer's artifact prefixes; .gitignore ignores files named like them, so kept
# vectors get a "regress-" prefix.
ARTIFACT_KINDS = ("crash-", "leak-", "timeout-", "oom-")


def _fuzzers():
    return sorted(p for p in (BUILD / "fuzz").glob("fuzz_*")
                  if p.is_file() and os.access(p, os.X_OK))


FUZZERS = _fuzzers()
PARAMS = FUZZERS or [None]
IDS = [p.name[len("fuzz_"):] for p in FUZZERS] or ["no-fuzzers"]


def _require(fuzzer):
    if fuzzer is None:
        pytest.fail(f"no fuzz targets ({BUILD}/fuzz/fuzz_*): run `make fuzz-bins` first")
    return fuzzer.name[len("fuzz_"):]


def _report(cmd, proc):
    out = proc.stdout + proc.stderr
    if len(out) > 20000:
        out = "[... cut ...]\n" + out[-20000:]
    return f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{out}"


@pytest.mark.parametrize("fuzzer", PARAMS, ids=IDS)
def test_fuzz_regressions(fuzzer):
    name = _require(fuzzer)
    regdir = REGRESSIONS / name
    inputs = sorted(p for p in regdir.glob("*")
                    if p.is_file() and not p.name.startswith(".")) if regdir.is_dir() else []
    if not inputs:
        return
    # given file paths, libFuzzer runs each of them once and exits
    cmd = [fuzzer] + COMMON_FLAGS + inputs
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          errors="replace", timeout=60 + 10 * len(inputs))
    if proc.returncode != 0:
        pytest.fail(_report(cmd, proc), pytrace=False)


@pytest.mark.parametrize("fuzzer", PARAMS, ids=IDS)
def test_fuzz_run(fuzzer, tmp_path):
    name = _require(fuzzer)
    corpus = tmp_path / "corpus"
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    seeds = CORPUS / name
    if seeds.is_dir():
        shutil.copytree(seeds, corpus)
    else:
        corpus.mkdir()
    cmd = [fuzzer, f"-max_total_time={FUZZ_SECONDS}", f"-artifact_prefix={artifacts}/",
           "-print_final_stats=1"] + COMMON_FLAGS + [corpus]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True,
                          errors="replace", timeout=FUZZ_SECONDS + 120)
    if proc.returncode == 0:
        return
    found = sorted(p for p in artifacts.iterdir() if p.name.startswith(ARTIFACT_KINDS))
    kept = []
    regdir = REGRESSIONS / name
    regdir.mkdir(parents=True, exist_ok=True)
    for art in found:
        kind = art.name.split("-", 1)[0]
        digest = hashlib.sha1(art.read_bytes()).hexdigest()
        dest = regdir / f"regress-{kind}-{digest}"
        shutil.copyfile(art, dest)
        kept.append(str(dest.relative_to(ROOT)))
    pytest.fail(f"fuzzer {name} failed; kept as regression vectors: {kept or 'none'}\n"
                + _report(cmd, proc), pytrace=False)
