"""prepare-pg19: PG-19 books -> SentencePiece token shards (paper App. A.1.1).

Reads a PG-19 folder as its authors distribute it (train/, validation/,
test/ of <id>.txt books, metadata.csv without a header row), or with the
`tfds` extra tensorflow-datasets' `pg19`. Trains a unigram SentencePiece
model on a byte budget of train text (whitespace kept, byte fallback, so
decode(encode(text)) == text for any text), encodes every book as one record
of uint16 ids and records per split the whitespace-split word count, the
SentencePiece token count and their ratio: the multiplier that turns a
per-token loss into word-level perplexity, exp(multiplier * loss).
"""

import dataclasses
import io
import json
import os
import random
import re
import shutil
import time

import numpy as np
import sentencepiece as spm
import tqdm

from performer import __version__
from performer.data import stats
from performer.data.shards import ShardWriter
from performer.errors import UserError

SPLITS = {"train": "train", "valid": "validation", "test": "test"}  # ours -> PG-19's folder
_START = re.compile(r"^\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG.*$", re.M)
_END = re.compile(r"^\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG.*$", re.M)


@dataclasses.dataclass(frozen=True)
class PG19Config:
  """Options of prepare-pg19; every field is recorded in the manifest."""
  source: str  # a PG-19 folder, or "tfds"
  vocab_size: int = 32768
  train_bytes: int = 100_000_000
  seed: int = 0
  shard_tokens: int = 1 << 26

  def __post_init__(self):
    if not 8 <= self.vocab_size <= 65535:
      raise UserError(f"--vocab-size must be in [8, 65535] (ids are stored as uint16), "
                      f"got {self.vocab_size}")
    if self.train_bytes < 1 or self.shard_tokens < 1:
      raise UserError("--train-bytes and --shard-tokens must be positive")


def clean_text(raw, name):
  """bytes of a book -> text: UTF-8, no BOM, LF line ends, no Gutenberg header/footer.

  Raises:
    UserError: the bytes are not UTF-8.
  """
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise UserError(f"{name}: not UTF-8 text (byte {e.start})") from None
  text = text.replace("\r\n", "\n").replace("\r", "\n")
  start, end = _START.search(text), _END.search(text)
  if start:
    text = text[start.end():]
    end = _END.search(text)
  if end:
    text = text[:end.start()]
  return text.strip("\n") + "\n"


def read_folder_books(folder, split):
  """Yields (book id, text) of one split of a PG-19 folder, sorted by id."""
  path = os.path.join(folder, SPLITS[split])
  if not os.path.isdir(path):
    raise UserError(f"{folder}: no {SPLITS[split]}/ folder (expected PG-19's train/, "
                    "validation/ and test/)")
  names = sorted(n for n in os.listdir(path) if n.endswith(".txt"))
  if not names:
    raise UserError(f"{path}: no .txt books")
  for name in names:
    with open(os.path.join(path, name), "rb") as f:
      yield name[:-4], clean_text(f.read(), os.path.join(path, name))


def read_tfds_books(split):
  """Yields (book id, text) from tensorflow-datasets' pg19 (the `tfds` extra)."""
  try:
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise UserError("the tfds source needs tensorflow-datasets: "
                    "pip install 'performer[tfds]'") from None
  for example in tfds.as_numpy(tfds.load("pg19", split=SPLITS[split])):
    yield example["book_id"].decode() if isinstance(example["book_id"], bytes) else str(
        example["book_id"]), clean_text(example["book_text"], "tfds pg19")


def read_metadata(folder):
  """metadata.csv (no header: id, short_book_title, publication_date, url) -> {id: row}."""
  import csv  # pylint: disable=import-outside-toplevel
  path = os.path.join(folder, "metadata.csv")
  if not os.path.exists(path):
    return {}
  with open(path, newline="", encoding="utf-8") as f:
    return {row[0]: {"title": row[1], "date": row[2], "url": row[3]}
            for row in csv.reader(f) if len(row) >= 4}


def train_tokenizer(lines, cfg):
  """Trains the unigram SentencePiece model; returns its serialized bytes.

  Raises:
    UserError: the corpus is too small for cfg.vocab_size (naming the largest
      size that fits).
  """
  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=cfg.vocab_size,
        model_type="unigram", character_coverage=1.0, byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, user_defined_symbols=["\n"],
        num_threads=os.cpu_count() or 1, minloglevel=2)
  except RuntimeError as e:
    fits = re.search(r"value <= (\d+)", str(e))
    if fits:
      raise UserError(f"--vocab-size {cfg.vocab_size} is too large for this training text; "
                      f"at most {fits.group(1)} pieces fit") from None
    raise
  return model.getvalue()


def _training_lines(books, budget, seed):
  """Non-empty lines of the train books, sampled by line to about `budget` bytes."""
  lines = [line for _, text in books for line in text.split("\n") if line.strip()]
  total = sum(len(line.encode()) for line in lines)
  if total > budget:
    keep = budget / total
    rng = random.Random(seed)
    lines = [line for line in lines if rng.random() < keep]
  return lines


def prepare(cfg, out, *, force=False, progress=True):
  """Runs prepare-pg19; returns the stats dict (also out/stats.json).

  Raises:
    UserError: a missing or malformed source, a vocabulary too large for the
      training text, or an `out` that holds another dataset.
  """
  read = (lambda split: read_tfds_books(split)) if cfg.source == "tfds" else (
      lambda split: read_folder_books(cfg.source, split))
  if cfg.source != "tfds" and not os.path.isdir(cfg.source):
    raise UserError(f"{cfg.source}: no such folder")
  fingerprint = json.loads(json.dumps({"kind": "pg19", "options": dataclasses.asdict(cfg)}))
  manifest_path = os.path.join(out, "manifest.json")
  if os.path.exists(out) and not force:
    if os.path.isfile(manifest_path):
      with open(manifest_path) as f:
        if json.load(f).get("fingerprint") == fingerprint:
          print(f"{out} already holds this dataset (same source and options); nothing to do")
          with open(os.path.join(out, "stats.json")) as g:
            return json.load(g)
      raise UserError(f"{out} already holds a different dataset; choose another --out or "
                      "pass --force")
    if os.listdir(out):
      raise UserError(f"{out} exists and is not a prepared dataset; choose another --out")
  start = time.perf_counter()
  train_books = list(read("train"))
  model = train_tokenizer(_training_lines(train_books, cfg.train_bytes, cfg.seed), cfg)
  sp = spm.SentencePieceProcessor(model_proto=model)
  tmp = out.rstrip("/") + ".tmp"
  shutil.rmtree(tmp, ignore_errors=True)
  try:
    result = {"vocab_size": cfg.vocab_size, "splits": {}}
    os.makedirs(tmp)
    with open(os.path.join(tmp, "spm.model"), "wb") as f:
      f.write(model)
    for split in SPLITS:
      books = train_books if split == "train" else read(split)
      writer = ShardWriter(os.path.join(tmp, split), np.uint16, cfg.shard_tokens)
      lengths, words = stats.LengthStats(), 0
      for _, text in tqdm.tqdm(books, desc=f"encode {split}", unit="book", disable=not progress):
        ids = sp.encode(text)
        writer.add(np.asarray(ids, np.uint16))
        lengths.add(len(ids))
        words += len(text.split())
      writer.close()
      summary = lengths.summary()
      tokens = sum(n * c for n, c in lengths.histogram.items())
      result["splits"][split] = {
          "books": summary["count"], "book_tokens": summary, "word_tokens": words,
          "spm_tokens": tokens, "multiplier": round(tokens / words, 4) if words else None}
    metadata = read_metadata(cfg.source) if cfg.source != "tfds" else {}
    manifest = {"format": "performer-token-shards-v1", "product": f"performer {__version__}",
                "fingerprint": fingerprint, "dtype": "uint16", "splits": list(SPLITS),
                "tokenizer": "spm.model", "books_with_metadata": len(metadata)}
    for name, obj in (("stats.json", result), ("manifest.json", manifest)):
      with open(os.path.join(tmp, name), "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(tmp, "stats.md"), "w") as f:
      f.write(_stats_markdown(result))
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  if os.path.exists(out):
    shutil.rmtree(out)
  os.replace(tmp, out)
  print(f"prepared PG-19 from {cfg.source} in {time.perf_counter() - start:.1f} s -> {out}")
  return result


def _stats_markdown(result):
  lines = [stats.markdown_table({s: r["book_tokens"] for s, r in result["splits"].items()},
                                f"Book lengths in SentencePiece tokens (vocabulary "
                                f"{result['vocab_size']})"), "",
           "| split | books | word tokens | SentencePiece tokens | multiplier |",
           "| --- | --- | --- | --- | --- |"]
  for split, r in result["splits"].items():
    lines.append(f"| {split} | {r['books']} | {r['word_tokens']} | {r['spm_tokens']} | "
                 f"{r['multiplier']} |")
  return "\n".join(lines) + "\n\nWord-level perplexity = exp(multiplier * per-token loss).\n"


def sample_folder(book_path, folder):
  """Builds a PG-19-style folder from the sample book: chapters I-IX train, X valid, XI test.

  Returns the folder. Real text cut at its chapter headings; see data/README.md.
  """
  with open(book_path, "rb") as f:
    text = clean_text(f.read(), book_path)
  parts = re.split(r"(?m)^(?=CHAPTER [IVXLC]+\.?\s*$)", text)
  chapters = [p for p in parts if p.startswith("CHAPTER")]
  if len(chapters) != 11:
    raise UserError(f"{book_path}: expected Botchan's 11 chapters, found {len(chapters)}")
  chapters[0] = parts[0] + chapters[0]  # the title page goes with chapter I
  shutil.rmtree(folder, ignore_errors=True)
  for i, chapter in enumerate(chapters, 1):
    split = "train" if i <= 9 else "validation" if i == 10 else "test"
    os.makedirs(os.path.join(folder, split), exist_ok=True)
    with open(os.path.join(folder, split, f"8868-{i:02d}.txt"), "w") as f:
      f.write(chapter)
  with open(os.path.join(folder, "metadata.csv"), "w") as f:
    for i in range(1, 12):
      f.write(f"8868-{i:02d},Botchan chapter {i},1906,https://www.gutenberg.org/ebooks/8868\n")
  return folder
