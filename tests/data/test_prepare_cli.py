"""prepare-trembl / prepare-pg19 (and label-pfam) as a user runs them: flag errors, the quick
start's re-runs."""

import os
import shutil

import pytest

from performer import cli
from performer.data import gutenberg, outdir, pg19, samples, trembl
from testlib import ROOT



@pytest.mark.parametrize("args, message", [
    (("prepare-pg19", "/nonexistent", "--vocab-size", "0"), "--vocab-size must be in [8, 65535]"),
    (("prepare-pg19", "/nonexistent", "--vocab-size", "-1"), "--vocab-size must be in [8, 65535]"),
    (("prepare-pg19", "/nonexistent", "--train-bytes", "0"), "--train-bytes and --shard-tokens"),
    (("prepare-pg19", "/nonexistent", "--shard-tokens", "0"), "--train-bytes and --shard-tokens"),
    (("prepare-trembl", "/nonexistent.fa", "--seq-len", "0"), "--seq-len and --shard-tokens"),
    (("prepare-trembl", "/nonexistent.fa", "--shard-tokens", "0"), "--seq-len and --shard-tokens"),
    (("prepare-trembl", "/nonexistent.fa", "--concat-len", "0"), "--concat-len must be >= 2"),
    (("prepare-trembl", "/nonexistent.fa", "--valid-fraction", "1"), "sum to < 1"),
    (("prepare-trembl", "/nonexistent.fa", "--test-fraction", "-0.1"), "must be >= 0"),
    (("prepare-trembl", "/nonexistent.fa", "--valid-fraction", "nan"), "must be >= 0"),
    (("prepare-trembl", "/nonexistent.fa", "--ood-fraction", "1"), "--ood-fraction must be in"),
    (("prepare-trembl", "/nonexistent.fa", "--workers", "0"), "--workers must be >= 1"),
])
def test_zero_and_out_of_range_numbers_are_one_line_errors(args, message, tmp_path, capsys):
  assert cli.main([*args, "--out", str(tmp_path / "out")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and message in err, err
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    (("prepare-pg19", "--sample", "--vocab-size", "0"), "--vocab-size must be in [8, 65535]"),
    (("prepare-pg19", "--sample", "--train-bytes", "0"), "--train-bytes and --shard-tokens"),
    (("prepare-pg19", "--sample", "--out", "{file}"), "exists and is a file, not a folder"),
    (("prepare-trembl", "--sample", "--workers", "0"), "--workers must be >= 1"),
    (("prepare-trembl", "--sample", "--concat-len", "1"), "--concat-len must be >= 2"),
    (("prepare-trembl", "--sample", "--out", "{file}"), "exists and is a file, not a folder"),
    (("label-pfam", "x.fa", "--gecco", "--sample", "0"), "--sample must be >= 1"),
    (("label-pfam", "x.fa", "--gecco", "--out", "{file}/l.tsv"), "{file} is a file, not a folder"),
])
def test_flags_are_checked_before_the_sample_is_fetched(args, message, tmp_path, monkeypatch,
                                                         capsys):
  def fetch(name):
    raise AssertionError(f"fetched the {name} sample before checking the flags")
  monkeypatch.setattr(samples, "fetch", fetch)
  monkeypatch.setenv("PERFORMER_CACHE", str(tmp_path / "cache"))  # nothing fetched before
  (tmp_path / "file").write_text("")
  args = [a.format(file=tmp_path / "file") for a in args]
  out = [] if "--out" in args else ["--out", str(tmp_path / "out")]
  assert cli.main([*args, *out]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and message.format(file=tmp_path / "file") in err, err
  assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_quick_start_reruns_when_the_cache_moves_or_the_sample_is_touched(tmp_path, monkeypatch,
                                                                          capsys):
  sample = samples.fetch("protein")
  out = str(tmp_path / "trembl-sample")
  for cache in ("c1", "c2"):  # the same bytes under another PERFORMER_CACHE
    copy = tmp_path / cache / "samples" / os.path.basename(sample)
    copy.parent.mkdir(parents=True)
    shutil.copyfile(sample, copy)
  monkeypatch.setenv("PERFORMER_CACHE", str(tmp_path / "c1"))
  assert cli.main(["prepare-trembl", "--sample", "--workers", "1", "--out", out]) == 0
  stamp = os.stat(os.path.join(out, "manifest.json")).st_mtime_ns
  os.utime(tmp_path / "c1" / "samples" / os.path.basename(sample))  # touched
  assert cli.main(["prepare-trembl", "--sample", "--workers", "1", "--out", out]) == 0
  monkeypatch.setenv("PERFORMER_CACHE", str(tmp_path / "c2"))
  capsys.readouterr()
  assert cli.main(["prepare-trembl", "--sample", "--workers", "1", "--out", out]) == 0
  assert "already holds this dataset" in capsys.readouterr().out
  assert os.stat(os.path.join(out, "manifest.json")).st_mtime_ns == stamp


def test_allow_nucleotide_and_skip_bad_books_flags(tmp_path, capsys):
  genome = tmp_path / "genome.fa"
  genome.write_text(">chr1\n" + "ACGTTGCAAN" * 600 + "\n")
  out = str(tmp_path / "t")
  assert cli.main(["prepare-trembl", str(genome), "--workers", "1", "--out", out]) == 2
  assert "--allow-nucleotide" in capsys.readouterr().err
  assert cli.main(["prepare-trembl", str(genome), "--workers", "1", "--allow-nucleotide",
                   "--out", out]) == 0
  source = gutenberg.sample_folder(samples.fetch("book"), str(tmp_path / "pg19"))
  with open(os.path.join(source, "validation", "0001.txt"), "wb") as f:
    f.write(b"\xe9t\xe9\n")
  out = str(tmp_path / "p")
  assert cli.main(["prepare-pg19", source, "--vocab-size", "500", "--out", out]) == 2
  assert capsys.readouterr().err.endswith("validation/0001.txt: not UTF-8 text (byte 0)\n")
  assert cli.main(["prepare-pg19", source, "--vocab-size", "500", "--skip-bad-books",
                   "--out", out]) == 0
  assert "warning: skipped 1 book(s)" in capsys.readouterr().err


def test_docs_name_the_build_folder_the_code_uses(tmp_path):
  built = outdir.begin(str(tmp_path / "x"))
  assert built == str(tmp_path / "x.partial")
  with open(os.path.join(ROOT, "docs", "data.md")) as f:
    readme = f.read()
  with open(os.path.join(ROOT, "data", "README.md")) as f:
    data_readme = f.read()
  assert "built in `<out>.partial`" in readme and "`<out>.lock`" in readme
  for text in (readme, data_readme, trembl.__doc__, trembl.prepare.__doc__, pg19.__doc__,
               outdir.__doc__):
    assert "<out>.tmp" not in text and '".tmp"' not in text
