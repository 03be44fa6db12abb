"""Pfam family labels for the OOD split (paper Table 2's OOD rows, App. C.1), by HMM search.

`performer label-pfam`, for when Pfam's regions file is not at hand; held-out families are whole."""

import dataclasses
import gzip
import hashlib
import heapq
import json
import os

from tqdm import tqdm

from performer import atomic, flags
from performer.data import fasta, vocab
from performer.errors import UserError
from performer.flags import flag

# Pfam-A 35.0, 2,766 HMMs with GA cutoffs, shipped in this wheel (GPL-3; read, not imported).
GECCO = ("gecco==0.11.0", "gecco/hmmer/Pfam.h3m")


NAME = "label-pfam"  # the command
SUMMARY = "Pfam family labels by HMM search, for prepare-trembl's OOD split"
DESCRIPTION = ("Labels protein sequences with Pfam-A families (pyhmmer hmmsearch at each HMM's "
               "gathering cutoff) for prepare-trembl --families, when Pfam's regions file is not "
               "at hand. A bounded sample is searched with every HMM; families are held out from "
               "it up to --ood-fraction of the sequences, and only their HMMs are searched "
               "against every sequence, so held-out families are complete. Needs pyhmmer (pip "
               "install 'performer[labels]').")


@dataclasses.dataclass(frozen=True)
class LabelConfig:
  """Options of label-pfam; recorded in <out>.json.

  Raises:
    UserError: no HMM file, or a count or share out of range.
  """
  inputs: tuple[str, ...] = flag(help="FASTA files (plain or .gz)", positional=True, nargs="+")
  hmms: str | None = flag(None, "Pfam-A HMM file (Pfam-A.hmm or pressed .h3m)")
  sample: int = flag(20_000, "sequences surveyed with every HMM (its time grows linearly "
                             "with it)")
  ood_fraction: float = flag(0.01, "share of all sequences to hold out as whole families")
  seed: int = flag(0, "salt of the sample and family order")
  cpus: int = flag(0, "hmmsearch threads (0: all cores)")
  invalid: str = flag("skip", "records with characters outside the 25 amino-acid letters: drop "
                              "them (counted), map those characters to X, or stop with an "
                              "error, as prepare-trembl --invalid", choices=fasta.POLICIES)

  def __post_init__(self):
    if not self.hmms:
      raise UserError("give --hmms FILE or --gecco")
    if self.sample < 1:
      raise UserError(f"--sample must be >= 1, got {self.sample}")
    if not 0 < self.ood_fraction < 1:
      raise UserError(f"--ood-fraction must be in (0, 1), got {self.ood_fraction}")
    if self.cpus < 0:
      raise UserError(f"--cpus must be >= 0, got {self.cpus}")


def _rank(text, seed):
  """A salted 64-bit hash: a fixed pseudo-random order of accessions and families."""
  return int.from_bytes(hashlib.blake2b(f"{seed}:{text}".encode(), digest_size=8).digest(), "big")


def read_sequences(paths, invalid="skip", counts=None):
  """Yields (accession, residues as str) of every record; accession as prepare-trembl keys it.

  Lower case is folded and one trailing '*' dropped. A record with
  characters outside the 25 amino-acid letters (vocab.AMINO_ACIDS) follows
  `invalid` as prepare-trembl's --invalid does: skip drops it, map-to-x turns
  them into X, fail raises. `counts` (a dict), if given, gets skipped_invalid
  and mapped_to_x.

  Raises:
    UserError: an unreadable, corrupt or non-FASTA file (from fasta.read_blocks),
      or under `fail` a record with such a character.
  """
  counts = {} if counts is None else counts
  counts.update(skipped_invalid=0, mapped_to_x=0)
  letters = set(vocab.AMINO_ACIDS)
  for path in paths:
    for block, _, _ in fasta.read_blocks(path, {}):
      for record in block.decode("utf-8", "replace").split("\n>"):
        header, _, body = record.lstrip(">").partition("\n")
        residues = "".join(body.split()).upper()
        residues = residues[:-1] if residues.endswith("*") else residues
        if not residues:
          continue
        bad = set(residues) - letters
        if bad:
          if invalid == "fail":
            raise UserError(f"{path}: record {fasta.accession(header)!r} has {min(bad)!r}, not "
                            "one of the 25 amino-acid letters (use --invalid skip or map-to-x)")
          if invalid == "skip":
            counts["skipped_invalid"] += 1
            continue
          residues = "".join("X" if c in bad else c for c in residues)
          counts["mapped_to_x"] += 1
        yield fasta.accession(header), residues


def load_hmms(path):
  """Every profile HMM of a Pfam file (HMMER3 text or pressed .h3m), with GA cutoffs.

  Raises:
    UserError: the file is missing, not an HMM file, or has HMMs without GA cutoffs.
  """
  from pyhmmer import plan7  # pylint: disable=import-outside-toplevel
  try:
    with plan7.HMMFile(path) as f:
      hmms = list(f)
  except (OSError, ValueError, EOFError) as e:
    raise UserError(f"{path}: not a readable HMMER3 file ({e})") from None
  if not hmms:
    raise UserError(f"{path}: no HMMs in the file")
  missing = [_text(h.name) for h in hmms if h.cutoffs.gathering is None]
  if missing:
    raise UserError(f"{path}: {len(missing)} HMMs have no gathering (GA) cutoff, e.g. {missing[0]}")
  return hmms


def _text(name):
  return name.decode() if isinstance(name, bytes) else name  # bytes before pyhmmer 0.11


def family_id(hmm):
  """'PF00001.24' -> 'PF00001' (Pfam accession without version); else the HMM name."""
  return _text(hmm.accession or hmm.name).split(".")[0]


def search(hmms, sequences, cpus, desc):
  """{family: set of accessions} of hits at the gathering cutoff, with a progress bar per HMM.

  sequences: list of (accession, residues).
  """
  from pyhmmer import easel, hmmer  # pylint: disable=import-outside-toplevel
  alphabet = easel.Alphabet.amino()
  digital = []
  for acc, res in sequences:
    try:
      digital.append(easel.TextSequence(name=acc.encode(), sequence=res).digitize(alphabet))
    except ValueError as e:  # read_sequences let only the 25 amino-acid letters through
      raise AssertionError(f"{acc}: Easel refused a checked sequence ({e})") from None
  block = easel.DigitalSequenceBlock(alphabet, digital)
  hits = {}
  with tqdm(total=len(hmms), desc=desc, unit="HMM", mininterval=5) as bar:
    for top in hmmer.hmmsearch(hmms, block, cpus=cpus, bit_cutoffs="gathering",
                               callback=lambda *_: bar.update()):
      members = {_text(h.name) for h in top if h.included}
      if members:
        hits.setdefault(family_id(top.query), set()).update(members)
  return hits


def choose_held_out(survey, sample_size, total, cfg):
  """Families to hold out, in salted-hash order, to about ood_fraction of all sequences.

  survey: {family: accessions hit in the sample}. A family's estimated size
  is its sample hits scaled by total / sample_size.
  """
  target = cfg.ood_fraction * total
  scale = total / sample_size
  chosen, size = [], 0.0
  for family in sorted(survey, key=lambda f: _rank(f, cfg.seed)):
    estimate = len(survey[family]) * scale
    if size + estimate <= target:
      chosen.append(family)
      size += estimate
  return sorted(chosen)


def label(cfg, out, *, progress=True):
  """Writes the `accession family` table to out, and <out>.held_out.txt and <out>.json.

  Returns:
    the summary dict written to <out>.json: counts of sequences, families hit
    in the survey, held-out families and their sequences.

  Raises:
    UserError: bad FASTA or HMM file, DNA/RNA input, or an unwritable out (checked first).
  """
  atomic.check_writable(out)
  for path in cfg.inputs:
    share, seen = fasta.nucleotide_share(path)
    if seen and share > fasta.NUCLEOTIDE_LIMIT:
      raise UserError(f"{path}: {100 * share:.0f}% of the first {seen:,} residues are A, C, G, T, "
                      f"U or N: this looks like DNA/RNA, not protein")
  hmms = load_hmms(cfg.hmms)
  counts = {}
  sequences = list(tqdm(read_sequences(cfg.inputs, cfg.invalid, counts), desc="reading",
                        unit=" seq", mininterval=5, disable=not progress))
  if not sequences:
    skipped = f" ({counts['skipped_invalid']:,} skipped by --invalid skip)" if counts[
        "skipped_invalid"] else ""
    raise UserError(f"no sequences in {', '.join(cfg.inputs)}{skipped}")
  total = len(sequences)
  sample = heapq.nsmallest(cfg.sample, sequences, key=lambda s: _rank(s[0], cfg.seed))
  survey = search(hmms, sample, cfg.cpus, f"survey of {len(sample):,} sequences")
  held = choose_held_out(survey, len(sample), total, cfg)
  held_hmms = [h for h in hmms if family_id(h) in set(held)]
  complete = search(held_hmms, sequences, cfg.cpus, f"{len(held)} held-out families, all sequences")
  rows = sorted({(acc, fam) for fam, accs in {**survey, **complete}.items() for acc in accs})
  ood = set().union(*complete.values()) if complete else set()
  summary = {"config": dataclasses.asdict(cfg), "sequences": total, **counts,
             "sample": len(sample),
             "hmms": len(hmms), "families_in_survey": len(survey),
             "sample_sequences_with_a_hit": len(set().union(*survey.values())) if survey else 0,
             "held_out_families": held, "held_out_sequences": len(ood), "rows": len(rows)}
  with atomic.atomic_path(out + ".held_out.txt") as tmp:
    with open(tmp, "w", encoding="utf-8") as f:
      f.write(",".join(held) + "\n")
  with atomic.atomic_path(out + ".json") as tmp:
    with open(tmp, "w", encoding="utf-8") as f:
      json.dump(summary, f, indent=1)
  with atomic.atomic_path(out) as tmp:  # last: its presence means the run finished
    opener = gzip.open if out.endswith(".gz") else open
    with opener(tmp, "wt", encoding="utf-8") as f:
      f.writelines(f"{acc}\t{fam}\n" for acc, fam in rows)
  return summary


def finished(cfg, out):
  """The summary of the labels already at `out` when they were made with cfg's options.

  Raises:
    UserError: out is not such a file (a folder, a table without its <out>.json, or labels
      of other inputs or options).
  """
  try:
    with open(out + ".json", encoding="utf-8") as f:
      summary = json.load(f)
  except (OSError, ValueError):
    raise UserError(f"{out} exists but is not a finished label-pfam output (no readable "
                    f"{out}.json); --force to label again") from None
  wanted = json.loads(json.dumps(dataclasses.asdict(cfg)))  # tuples as JSON gives them back
  if not os.path.isfile(out) or summary.get("config") != wanted:
    raise UserError(f"{out} holds labels of other inputs or options (see {out}.json); "
                    f"--force to label again")
  return summary


@dataclasses.dataclass(frozen=True)
class Command:
  """What `performer label-pfam` takes beside LabelConfig."""
  out: str = flag(help="the 'accession family' table to write (.gz for gzip); <out>.json and "
                       "<out>.held_out.txt are written beside it")
  gecco: bool = flag(False, "use the 2,766 Pfam-A 35.0 HMMs shipped in the gecco 0.11.0 wheel "
                            "(fetched from PyPI once; gecco is not installed)")
  force: bool = flag(False, "label again over an existing --out")


FLAGS = (LabelConfig, Command)


def main(args):
  """`performer label-pfam` on parsed flags (FLAGS): labels, or says the labels exist.

  Every flag, and --out, is checked before the --gecco HMMs are fetched.

  Raises:
    UserError: both --hmms and --gecco, or any error of `finished` and `label`.
  """
  from performer.data import samples  # pylint: disable=import-outside-toplevel
  if args.hmms and args.gecco:
    raise UserError("give --hmms FILE or --gecco, not both")
  if os.path.isdir(args.out):
    raise UserError(f"--out {args.out} is a folder: give the file to write (the 'accession "
                    "family' table)")
  cfg = flags.build(LabelConfig, args, **({"hmms": samples.path("pfam")} if args.gecco else {}))
  if os.path.exists(args.out) and not args.force:
    done = finished(cfg, args.out)  # UserError if it holds other labels
    print(f"{args.out} holds these labels already ({done['held_out_sequences']:,} held-out "
          f"sequences); nothing to do (--force labels again)")
    return
  if args.gecco:
    atomic.check_writable(args.out)
    samples.fetch("pfam")
  s = label(cfg, args.out)
  if s["skipped_invalid"] or s["mapped_to_x"]:
    print(f"{s['skipped_invalid']:,} records skipped and {s['mapped_to_x']:,} mapped to X for "
          "characters outside the 25 amino-acid letters (--invalid)")
  print(f"{s['sample']:,} of {s['sequences']:,} sequences surveyed with {s['hmms']:,} HMMs: "
        f"{s['families_in_survey']:,} families hit; held out {len(s['held_out_families'])} "
        f"families, {s['held_out_sequences']:,} sequences")
  print(f"wrote {args.out}, {args.out}.json and {args.out}.held_out.txt; use: "
        f"performer prepare-trembl ... --families {args.out} "
        f"--ood-families @{args.out}.held_out.txt")
