"""The OOD split of prepare-trembl: whole protein families held out (paper App. C.1).

Every accession the --families mapping puts in a held-out family goes to the `ood` split."""

import gzip
import hashlib
import io
import zlib

from performer.data import fasta, outdir
from performer.errors import UserError


def ood_families(text):
  """--ood-families: comma-separated names, or @FILE holding them (label-pfam's held_out.txt)."""
  if text.startswith("@"):
    try:
      with open(text[1:]) as f:
        text = f.read()
    except OSError as e:
      raise UserError(f"cannot read {text[1:]} ({e.strerror})") from None
  return tuple(f.strip() for f in text.replace("\n", ",").split(",") if f.strip())


def _fraction(text, salt):
  """A deterministic number in [0, 1) from a string."""
  digest = hashlib.blake2b(text.encode(), digest_size=8, key=salt).digest()
  return int.from_bytes(digest, "little") / 2.0 ** 64


def load(cfg, salt):
  """Reads the accession -> family mapping; keeps only held-out accessions.

  Accepts Pfam's Pfam-A.regions.uniprot.tsv(.gz) (header with uniprot_acc and
  pfamA_acc) or any two-column 'accession family' UTF-8 text file, plain or
  gzip. Families are held out if listed in cfg.ood_families, else if a hash
  of their id falls below cfg.ood_fraction.

  Returns:
    (accessions: set, held_out_families: sorted list, family_count: int,
     digest: `outdir.file_stat` of the file plus its "sha256").

  Raises:
    UserError: an unreadable, binary, corrupt or empty file, a line without
      two fields, or a requested family that is not in the file.
  """
  wanted = set(cfg.ood_families)
  accessions, held, families = set(), set(), set()
  cols = (0, 1)
  digest = outdir.file_stat(cfg.families)
  try:
    with open(cfg.families, "rb") as raw:
      hashing = fasta.HashingReader(raw)
      buffered = io.BufferedReader(hashing, 1 << 20)
      binary = (gzip.GzipFile(fileobj=buffered) if buffered.peek(2)[:2] == b"\x1f\x8b"
                else buffered)
      text = io.TextIOWrapper(binary, encoding="utf-8")
      for line_no, line in enumerate(text, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
          continue
        if "pfamA_acc" in fields:
          cols = (fields.index("uniprot_acc") if "uniprot_acc" in fields else 0,
                  fields.index("pfamA_acc"))
          continue
        if len(fields) <= max(cols):
          raise UserError(f"{cfg.families}:{line_no}: expected an accession and a family id")
        acc, family = fields[cols[0]], fields[cols[1]]
        families.add(family)
        if family in wanted or (not wanted and _fraction(family, salt) < cfg.ood_fraction):
          accessions.add(acc)
          held.add(family)
      while hashing.read(1 << 20):  # hash to the end, as outdir.file_digest does
        pass
  except UnicodeDecodeError:
    raise UserError(f"{cfg.families}: not UTF-8 text; --families wants an 'accession family' "
                    "table such as Pfam-A.regions.uniprot.tsv.gz") from None
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise UserError(f"{cfg.families}: truncated or corrupt gzip data ({e})") from None
  except OSError as e:
    raise UserError(f"{cfg.families}: {e.strerror or e}") from None
  if not families:
    raise UserError(f"{cfg.families}: no 'accession family' lines; --families wants a table "
                    "such as Pfam-A.regions.uniprot.tsv.gz")
  missing = wanted - families
  if missing:
    raise UserError(f"{cfg.families}: no such families: {', '.join(sorted(missing))}")
  return accessions, sorted(held), len(families), {**digest, "sha256": hashing.sha256.hexdigest()}
