"""prepare-pg19 on the real sample book: invertibility, counts, cleaning, bad sources."""

import json
import os
import shutil
import subprocess

import pytest
import sentencepiece as spm

from performer.data import gutenberg, outdir, pg19, samples
from performer.data.shards import TokenShards
from performer.errors import UserError


@pytest.fixture(scope="module")
def book():
  return samples.fetch("book")


@pytest.fixture(scope="module")
def prepared(book, tmp_path_factory):
  root = tmp_path_factory.mktemp("pg19")
  source = gutenberg.sample_folder(book, str(root / "source"))
  result = pg19.prepare(pg19.PG19Config(source=source, vocab_size=1000), str(root / "out"),
                        progress=False)
  return source, root / "out", result


def test_clean_text_strips_bom_crlf_and_gutenberg_header_footer(book):
  raw = open(book, "rb").read()
  assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw
  text = gutenberg.clean_text(raw, book)
  assert "\r" not in text and not text.startswith("\ufeff")
  assert "*** START OF" not in text and "*** END OF" not in text and "FULL LICENSE" not in text
  # Exactly what lies between the markers (lines 14 to 3993 of the file).
  assert text.startswith("Produced by David Starner and the Online Distributed Proofreading Team\n")
  assert text.endswith("End of Project Gutenberg's Botchan (Master Darling), by Kin-nosuke Natsume\n")


def test_books_decode_back_exactly(prepared):
  source, out, _ = prepared
  sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
  for split, folder in gutenberg.SPLITS.items():
    books = sorted(os.listdir(os.path.join(source, folder)))
    shards = TokenShards(str(out / split))
    assert len(shards) == len(books)
    for i, name in enumerate(books):
      text = open(os.path.join(source, folder, name)).read()
      assert sp.decode(shards[i].tolist()) == text  # whitespace, newlines and all


def test_counts_agree_with_wc(prepared):
  source, out, result = prepared
  assert json.loads((out / "stats.json").read_text()) == result
  for split, folder in gutenberg.SPLITS.items():
    files = sorted(os.path.join(source, folder, n) for n in os.listdir(os.path.join(source, folder)))
    wc = subprocess.run(["wc", "-w", *files], capture_output=True, text=True, check=True).stdout
    words = int(wc.strip().splitlines()[-1].split()[0])
    r = result["splits"][split]
    assert r["word_tokens"] == words
    shards = TokenShards(str(out / split))
    assert r["spm_tokens"] == sum(len(shards[i]) for i in range(len(shards)))
    assert r["multiplier"] == round(r["spm_tokens"] / words, 4) and 1.0 < r["multiplier"] < 3.0
  assert [result["splits"][s]["books"] for s in ("train", "valid", "test")] == [9, 1, 1]


def test_metadata_has_no_header_row(prepared):
  source, _, _ = prepared
  meta = gutenberg.read_metadata(source)
  assert len(meta) == 11 and meta["8868-01"]["url"].endswith("/8868")


@pytest.mark.parametrize("options, match", [
    ({}, r"--vocab-size 32768 is too large .* at most \d+ pieces fit"),
    ({"vocab_size": 8}, r"--vocab-size 8 is too small: .* \d+ distinct characters"),
    ({"vocab_size": 500, "train_bytes": 10}, "leaves no training text"),
])
def test_vocabulary_and_budget_errors(book, tmp_path, options, match):
  source = gutenberg.sample_folder(book, str(tmp_path / "source"))
  with pytest.raises(UserError, match=match):
    pg19.prepare(pg19.PG19Config(source=source, **options), str(tmp_path / "out"), progress=False)
  assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_bad_sources(book, tmp_path):
  with pytest.raises(UserError, match="no such folder"):
    pg19.prepare(pg19.PG19Config(source=str(tmp_path / "nope")), str(tmp_path / "o"))
  source = gutenberg.sample_folder(book, str(tmp_path / "s"))
  os.rename(os.path.join(source, "validation"), os.path.join(source, "valid"))
  with pytest.raises(UserError, match="no validation/ folder"):
    pg19.prepare(pg19.PG19Config(source=source, vocab_size=500), str(tmp_path / "o"),
                 progress=False)
  with pytest.raises(UserError, match="not UTF-8"):
    gutenberg.clean_text(b"caf\xe9", "latin1.txt")
  with pytest.raises(UserError, match=r"--vocab-size must be in \[8, 65535\]"):
    pg19.PG19Config(source=source, vocab_size=70000)
  try:
    import tensorflow_datasets  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    with pytest.raises(UserError, match=r"pip install -e '\.\[tfds\]'"):
      next(gutenberg.read_tfds_books("train"))


def test_output_folder_rules(prepared, tmp_path):
  source, out, result = prepared
  cfg = pg19.PG19Config(source=source, vocab_size=1000)
  assert pg19.prepare(cfg, str(out), progress=False) == result  # same dataset: nothing to do
  manifest = json.loads((out / "manifest.json").read_text())
  assert [b["name"] for b in manifest["inputs"]["valid"]] == ["8868-10.txt"]
  assert len(manifest["inputs"]["train"][0]["sha256"]) == 64
  with pytest.raises(UserError, match="already holds a different dataset"):
    pg19.prepare(pg19.PG19Config(source=source, vocab_size=900), str(out), progress=False)
  with pytest.raises(UserError, match="is or holds the input"):  # --force never eats the source
    pg19.prepare(cfg, source, force=True, progress=False)
  assert os.path.isdir(os.path.join(source, "train"))


def test_a_changed_book_is_not_taken_for_the_same_dataset(book, tmp_path):
  source = gutenberg.sample_folder(book, str(tmp_path / "source"))
  cfg = pg19.PG19Config(source=source, vocab_size=500)
  pg19.prepare(cfg, str(tmp_path / "out"), progress=False)
  with open(os.path.join(source, "test", "8868-11.txt"), "a") as f:
    f.write("one more line\n")
  with pytest.raises(UserError, match="different dataset"):
    pg19.prepare(cfg, str(tmp_path / "out"), progress=False)


def test_training_text_is_sampled_to_the_budget(book, tmp_path):
  source = gutenberg.sample_folder(book, str(tmp_path / "source"))
  paths = gutenberg.list_books(source)["train"]
  total = sum(len(line.encode()) for line in pg19._training_lines(paths, 10 ** 9, 0))
  sampled = sum(len(line.encode()) for line in pg19._training_lines(paths, 20_000, 0))
  assert 10_000 < sampled < 30_000 < total


def test_a_second_run_on_the_same_out_stops_at_once_naming_the_first(book, tmp_path):
  source = gutenberg.sample_folder(book, str(tmp_path / "source"))
  out = tmp_path / "out"
  with outdir.lock(str(out)):
    with pytest.raises(UserError, match=rf"--out {out} is in use by pid {os.getpid()} on "):
      pg19.prepare(pg19.PG19Config(source=source, vocab_size=500), str(out), progress=False)
  assert not out.exists() and not (tmp_path / "out.lock").exists()


def test_a_book_that_is_not_utf8_is_named_or_skipped_and_counted(book, tmp_path, capsys):
  source = gutenberg.sample_folder(book, str(tmp_path / "source"))
  with open(os.path.join(source, "train", "9999.txt"), "wb") as f:
    f.write("Caf\u00e9 au lait.\n".encode("latin-1"))  # read while SentencePiece trains
  with open(os.path.join(source, "test", "9998.txt"), "wb") as f:
    f.write(b"\xff\xfe\x00binary")  # read while encoding, after training
  with pytest.raises(UserError, match=r"train/9999\.txt: not UTF-8 text \(byte 3\)"):
    pg19.prepare(pg19.PG19Config(source=source, vocab_size=500), str(tmp_path / "out"),
                 progress=False)
  assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()
  os.remove(os.path.join(source, "train", "9999.txt"))
  with pytest.raises(UserError, match=r"test/9998\.txt: not UTF-8 text"):
    pg19.prepare(pg19.PG19Config(source=source, vocab_size=500), str(tmp_path / "out"),
                 progress=False)
  with open(os.path.join(source, "train", "9999.txt"), "wb") as f:
    f.write("Caf\u00e9 au lait.\n".encode("latin-1"))
  capsys.readouterr()
  result = pg19.prepare(pg19.PG19Config(source=source, vocab_size=500, skip_bad_books=True),
                        str(tmp_path / "out"), progress=False)
  assert result["skipped_books"] == {"count": 2, "books": ["train/9999.txt", "test/9998.txt"]}
  assert [result["splits"][s]["books"] for s in ("train", "valid", "test")] == [9, 1, 1]
  assert json.loads((tmp_path / "out" / "manifest.json").read_text())["books_skipped"] == 2
  assert "Skipped 2 book(s) that are not UTF-8 text" in (tmp_path / "out" / "stats.md").read_text()
  assert "warning: skipped 2 book(s) that are not UTF-8 text: train/9999.txt, test/9998.txt" in (
      capsys.readouterr().err)


def test_the_same_books_elsewhere_are_the_same_dataset(prepared, tmp_path):
  source, out, result = prepared
  stamp = (out / "manifest.json").stat().st_mtime_ns
  moved = tmp_path / "cache2" / "pg19-botchan"  # another PERFORMER_CACHE, fresh mtimes
  shutil.copytree(source, moved, copy_function=shutil.copyfile)
  cfg = pg19.PG19Config(source=str(moved), vocab_size=1000)
  assert pg19.prepare(cfg, str(out), progress=False) == result  # nothing to do
  assert (out / "manifest.json").stat().st_mtime_ns == stamp
