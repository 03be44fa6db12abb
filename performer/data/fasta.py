"""Streaming FASTA reading: whole-record blocks in constant memory, parsed in worker processes.

The main process only decompresses and cuts at record boundaries; `parse_block` runs in workers."""

import dataclasses
import gzip
import hashlib
import io
import zlib

import numpy as np
from isal import igzip, isal_zlib

from performer.data import vocab
from performer.errors import UserError

BLOCK_BYTES = 1 << 22
POLICIES = ("skip", "map-to-x", "fail")
BOM = b"\xef\xbb\xbf"
# A, C, G, T, U, N are amino-acid letters too, but make up about a quarter of
# real protein; a file well above this share is DNA/RNA (a genome, reads).
NUCLEOTIDE_LIMIT = 0.9


class HashingReader(io.RawIOBase):
  """A raw file wrapper that feeds every byte read into a sha256."""

  def __init__(self, f):
    super().__init__()
    self._f = f
    self.sha256 = hashlib.sha256()

  def readable(self):
    return True

  def readinto(self, buffer):
    n = self._f.readinto(buffer)
    self.sha256.update(memoryview(buffer)[:n])
    return n


def read_blocks(path, digest_out, block_bytes=BLOCK_BYTES):
  """Yields (block, first_line_number, raw_bytes_read): whole FASTA records.

  Plain or gzip input (detected from its magic bytes); a UTF-8 byte-order mark
  is dropped. After the last block, digest_out["sha256"] and digest_out["bytes"]
  describe the raw file.

  Raises:
    UserError: unreadable file, truncated or corrupt gzip, empty input, or
      text that does not start with a '>' header.
  """
  try:
    raw = open(path, "rb")  # pylint: disable=consider-using-with
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None
  with raw:
    hashing = HashingReader(raw)
    buffered = io.BufferedReader(hashing, 1 << 20)
    # ISA-L's gzip: the same stream as the standard library's at 3x its speed (data/README.md).
    gzipped = buffered.peek(2)[:2] == b"\x1f\x8b"
    stream = igzip.IGzipFile(fileobj=buffered) if gzipped else buffered
    carry, line, first = b"", 1, True
    while True:
      try:
        data = stream.read(block_bytes)
      except (EOFError, gzip.BadGzipFile, zlib.error, isal_zlib.error) as e:
        raise UserError(f"{path}: truncated or corrupt gzip data ({e})") from None
      if first:
        data = data[len(BOM):] if data.startswith(BOM) else data
        head = data.lstrip()
        if not head:
          raise UserError(f"{path}: empty file, no FASTA records")
        if not head.startswith(b">"):
          raise UserError(f"{path}:1: not FASTA: the first line does not start with '>'")
        first = False
      if not data:
        break
      buf = carry + data
      cut = buf.rfind(b"\n>")
      if cut < 0:
        carry = buf
        continue
      yield buf[:cut + 1], line, raw.tell()
      line += buf.count(b"\n", 0, cut + 1)
      carry = buf[cut + 1:]
    if carry:
      yield carry, line, raw.tell()
    digest_out["sha256"] = hashing.sha256.hexdigest()
    digest_out["bytes"] = raw.tell()


def nucleotide_share(path, residues=5000, head_bytes=1 << 20):
  """(share of A, C, G, T, U, N in any case, residues seen) over the first `residues` residues.

  Reads at most `head_bytes` of text (plain or gzip), so it is quick even on
  a genome of one huge record. A file without residues gives (0.0, 0).

  Raises:
    UserError: an unreadable file or corrupt gzip data.
  """
  try:
    with open(path, "rb") as raw:
      buffered = io.BufferedReader(raw)
      stream = gzip.GzipFile(fileobj=buffered) if buffered.peek(2)[:2] == b"\x1f\x8b" else buffered
      head = stream.read(head_bytes)
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise UserError(f"{path}: truncated or corrupt gzip data ({e})") from None
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None
  counts = seen = 0
  for line in head.split(b"\n")[:-1 if len(head) == head_bytes else None]:  # whole lines
    line = line.strip()
    if line and not line.startswith(b">"):
      line = b"".join(line.split()).upper()[:residues - seen]
      counts += sum(line.count(c) for c in b"ACGTUN")
      seen += len(line)
      if seen >= residues:
        break
  return (counts / seen if seen else 0.0), seen


@dataclasses.dataclass
class Parsed:
  """The records of one block, flattened. n records, T tokens in all.

  Few, large fields: workers send them back to the main process cheaply.
  """
  tokens: np.ndarray  # [T] uint8 token ids, record after record
  offsets: np.ndarray  # [n + 1] int64 starts of records in `tokens`
  headers: bytes  # the n header lines without '>', joined by newlines
  digests: np.ndarray  # [n] uint64 salted hash of each record's tokens
  counts: dict  # rule name -> number of records it touched
  joined: np.ndarray  # [T + n] uint8: each record followed by EOS (the concat task's stream)

  def accessions(self):
    """The n accessions (`accession` of each header)."""
    if not len(self.digests):
      return []
    return [accession(h.decode("utf-8", "replace")) for h in self.headers.split(b"\n")]


def accession(header):
  """UniProt 'tr|A0A023GPI8|NAME ...' -> 'A0A023GPI8'; else the first word."""
  word = header.split(None, 1)[0] if header.strip() else ""
  parts = word.split("|")
  return parts[1] if len(parts) >= 3 else word


RULES = ("records", "upper_cased", "stop_dropped", "mapped_to_x", "skipped_invalid",
         "skipped_empty")
# bytes.translate table: upper-case amino-acid letter -> token id, anything else -> INVALID.
_CLEAN = bytes(vocab.INVALID if chr(b) != chr(b).upper() else int(vocab.encode(bytes([b]))[0])
               for b in range(256))


def _parse_clean(block, salt):
  """`parse_block` of a block no residue rule touches, record by record in C-speed bytes
  operations; None for any other block.

  Clean: the block starts with '>', every line after a header is upper-case
  amino-acid letters only (no '*', no spaces, no '\r'; empty lines pass) and
  every record has residues. UniProt's own files are; anything else takes the
  line-by-line path, which applies the rules.
  """
  if not block.startswith(b">"):
    return None
  pieces, lengths, headers, digests = [], [0], [], []
  for record in block[1:].split(b"\n>"):
    header, _, body = record.partition(b"\n")
    ids = body.replace(b"\n", b"").translate(_CLEAN)
    if not ids:
      return None  # a record without residues
    pieces.append(ids)
    lengths.append(len(ids))
    headers.append(header.rstrip())
    digests.append(int.from_bytes(hashlib.blake2b(ids, digest_size=8, key=salt).digest(),
                                  "little"))
  tokens = np.frombuffer(b"".join(pieces), np.uint8)
  if (tokens == vocab.INVALID).any():
    return None
  counts = dict.fromkeys(RULES, 0)
  counts["records"] = len(headers)
  eos = bytes([vocab.EOS])
  return Parsed(tokens, np.cumsum(lengths, dtype=np.int64), b"\n".join(headers),
                np.asarray(digests, np.uint64), counts,
                np.frombuffer(eos.join(pieces) + eos, np.uint8))


def parse_block(args):
  """Parses one block from `read_blocks` (runs in a worker process).

  Args:
    args: (block, first_line, path, policy, salt); policy in POLICIES
      decides what happens to a record with characters outside the 25
      amino-acid letters: `skip` drops the record, `map-to-x` turns them
      into X, `fail` raises. Lower case is folded to upper case and one
      trailing '*' (stop codon) is dropped first. Records without residues
      are dropped under `skip` and `map-to-x`.

  Returns:
    `Parsed`.

  Raises:
    UserError: under `fail`, naming file, line and record; or text before
      the first header.
  """
  clean = _parse_clean(args[0], args[4])
  return clean if clean is not None else _parse_lines(args)


def _parse_lines(args):
  """`parse_block` line by line, applying the residue rules."""
  block, first_line, path, policy, salt = args
  counts = dict.fromkeys(RULES, 0)
  pieces, offsets, headers, digests = [], [0], [], []
  header, header_line, seq, seq_lines = None, 0, [], []

  def finish():
    counts["records"] += 1
    residues = b"".join(seq)
    name = accession(header.decode("utf-8", "replace"))
    if residues.endswith(b"*"):
      residues = residues[:-1]
      counts["stop_dropped"] += 1
    if not residues:
      if policy == "fail":
        raise UserError(f"{path}:{header_line}: record {name!r} has no sequence")
      counts["skipped_empty"] += 1
      return
    if residues != residues.upper():
      counts["upper_cased"] += 1
    ids = vocab.encode(residues)
    bad = ids == vocab.INVALID
    if bad.any():
      at = int(np.argmax(bad))
      char = chr(residues[at])
      if policy == "fail":  # the line of the residue: the pieces' ends are cumulative lengths
        line = seq_lines[int(np.searchsorted(np.cumsum([len(p) for p in seq]), at, "right"))]
        raise UserError(f"{path}:{line}: record {name!r} (header on line {header_line}) has "
                        f"{char!r}, not one of the 25 amino-acid letters (use --invalid skip or "
                        "map-to-x)")
      if policy == "skip":
        counts["skipped_invalid"] += 1
        return
      ids[bad] = vocab.X
      counts["mapped_to_x"] += 1
    pieces.append(ids)
    offsets.append(offsets[-1] + len(ids))
    headers.append(header)
    digests.append(int.from_bytes(hashlib.blake2b(ids.tobytes(), digest_size=8,
                                                  key=salt).digest(), "little"))

  for i, raw_line in enumerate(block.split(b"\n")):
    text = raw_line.strip()  # also drops the '\r' of Windows line endings
    if text.startswith(b">"):
      if header is not None:
        finish()
      header, header_line, seq, seq_lines = text[1:], first_line + i, [], []
    elif text:
      if header is None:
        raise UserError(f"{path}:{first_line + i}: sequence text before the first '>' header")
      seq.append(b"".join(text.split()))  # spaces inside a line, as in GenBank-style layouts
      seq_lines.append(first_line + i)
  if header is not None:
    finish()
  tokens = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
  offsets = np.asarray(offsets, np.int64)
  return Parsed(tokens, offsets, b"\n".join(headers), np.asarray(digests, np.uint64), counts,
                np.insert(tokens, offsets[1:], vocab.EOS))
