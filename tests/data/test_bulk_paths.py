"""prepare-trembl's bulk paths against their one-record-at-a-time definitions."""

import os

import numpy as np
import pytest

from performer.data import fasta, stats, trembl, vocab
from performer.data.shard_writer import ShardWriter

SALT = b"performer-trembl-0"


def _equal(a, b):
  assert a.headers == b.headers and a.counts == b.counts
  np.testing.assert_array_equal(a.joined, b.joined)
  np.testing.assert_array_equal(a.tokens, b.tokens)
  np.testing.assert_array_equal(a.offsets, b.offsets)
  np.testing.assert_array_equal(a.digests, b.digests)


def _random_block(rng, records):
  lines = []
  for i in range(records):
    lines.append(f">sp|P{i:05d}|NAME_{i} some description OS=x".encode())
    residues = "".join(rng.choice(list(vocab.AMINO_ACIDS), size=rng.integers(1, 200)))
    lines += [residues[j:j + 60].encode() for j in range(0, len(residues), 60)]
  return b"\n".join(lines)


@pytest.mark.parametrize("trailing_newline", [True, False])
def test_clean_blocks_parse_in_bulk_exactly_as_line_by_line(trailing_newline):
  rng = np.random.default_rng(0)
  block = _random_block(rng, 300) + (b"\n" if trailing_newline else b"")
  block = block.replace(b">sp|P00007|", b"> sp|P00007|")  # a space after '>' is clean
  block = block.replace(b"\n>sp|P00009", b"\n\n>sp|P00009")  # so is an empty line
  block = block.replace(b"NAME_3 some description OS=x\n", b"NAME_3 x\r\n")  # and a CR header
  args = (block, 1, "x.fa", "skip", SALT)
  bulk = fasta._parse_clean(block, SALT)
  assert bulk is not None and bulk.counts["records"] == 300
  _equal(bulk, fasta._parse_lines(args))
  assert bulk.accessions()[7] == "P00007"
  joined = bulk.joined
  assert len(joined) == len(bulk.tokens) + 300 and joined[bulk.offsets[1]] == vocab.EOS
  np.testing.assert_array_equal(joined[joined != vocab.EOS], bulk.tokens)


@pytest.mark.parametrize("edit", [
    (b"\n>sp|P00003", b"\n  >sp|P00003"),  # indented header
    (b"NAME_4 some description OS=x\n", b"NAME_4 some description OS=x\n*"),  # a stop codon
    (b"NAME_4 some description OS=x\n", b"NAME_4 some description OS=x\nj"),  # invalid letter
    (b"NAME_4 some description OS=x\n", b"NAME_4 some description OS=x\nac"),  # lower case
    (b"NAME_4 some description OS=x\n", b"NAME_4 some description OS=x\nA C"),  # spaces
    (b"\n>sp|P00005", b"\r\n>sp|P00005"),  # CRLF after residues
    (b"\n>sp|P00005", b"\n>empty\n>sp|P00005"),  # a record without residues
])
def test_any_block_a_rule_touches_takes_the_line_by_line_path(edit):
  block = _random_block(np.random.default_rng(1), 10).replace(*edit)
  assert edit[1] in block
  assert fasta._parse_clean(block, SALT) is None
  _equal(fasta.parse_block((block, 1, "x.fa", "map-to-x", SALT)),
         fasta._parse_lines((block, 1, "x.fa", "map-to-x", SALT)))
  assert fasta._parse_clean(b"text before\n>a\nAC\n", SALT) is None


def test_bulk_shard_writes_equal_record_by_record_writes(tmp_path):
  rng = np.random.default_rng(2)
  lengths = rng.integers(1, 50, size=400)
  tokens = rng.integers(0, 28, size=int(lengths.sum())).astype(np.uint8)
  one = ShardWriter(str(tmp_path / "one"), np.uint8, shard_tokens=500)
  start = 0
  for n in lengths:
    one.add(tokens[start:start + n])
    start += n
  bulk = ShardWriter(str(tmp_path / "bulk"), np.uint8, shard_tokens=500)
  for part in np.array_split(np.arange(len(lengths)), 7):  # blocks of records
    first = int(lengths[:part[0]].sum())
    bulk.add_many(tokens[first:first + int(lengths[part].sum())], lengths[part])
  assert one.close() == bulk.close()
  for name in sorted(os.listdir(tmp_path / "one")):
    if name.endswith(".npy"):
      np.testing.assert_array_equal(np.load(tmp_path / "one" / name),
                                    np.load(tmp_path / "bulk" / name))


def test_a_block_goes_to_its_splits_as_record_by_record(tmp_path):
  # Records longer and shorter than seq_len, every split and dropped ones, mixed.
  block = _random_block(np.random.default_rng(4), 200)
  parsed = fasta.parse_block((block, 1, "x.fa", "skip", SALT))
  split_of = np.random.default_rng(5).choice([-1, 0, 0, 0, 1, 2, 3], size=200)
  split_of[50:60] = 0  # a run
  splits, seq_len = trembl.SPLITS, 90

  def writers(folder):
    return ({s: ShardWriter(str(tmp_path / folder / s), np.uint8, 1000) for s in splits},
            {s: trembl._Concat(ShardWriter(str(tmp_path / folder / "c" / s), np.uint8, 1000),
                               64) for s in splits},
            {s: stats.LengthStats() for s in splits + ("all",)})
  single, concat, lengths = writers("bulk")
  counts = {s: np.zeros(vocab.VOCAB_SIZE, np.int64) for s in splits}
  residues = trembl._distribute(parsed, split_of, splits, single, concat, lengths, seq_len, counts)
  ref_single, ref_concat, ref_lengths = writers("ref")
  ref_counts = {s: np.zeros(vocab.VOCAB_SIZE, np.int64) for s in splits}
  for j, number in enumerate(split_of):
    if number < 0:
      continue
    tokens = parsed.tokens[parsed.offsets[j]:parsed.offsets[j + 1]]
    ref_single[splits[number]].add(tokens[:seq_len])
    ref_concat[splits[number]].add(np.append(tokens, vocab.EOS).astype(np.uint8))
    ref_lengths[splits[number]].add(len(tokens))
    ref_lengths["all"].add(len(tokens))
    ref_counts[splits[number]] += np.bincount(tokens[:seq_len], minlength=vocab.VOCAB_SIZE)
  kept = split_of >= 0
  assert residues == int(np.diff(parsed.offsets)[kept].sum())
  assert any(np.diff(parsed.offsets)[kept] > seq_len)  # clipping was exercised
  for s in splits:
    assert single[s].close() == ref_single[s].close()
    assert concat[s].close() == ref_concat[s].close()
    assert lengths[s].histogram == ref_lengths[s].histogram
    np.testing.assert_array_equal(counts[s], ref_counts[s])  # Fig. 9's residues, clipped
  for name in sorted(n for n in os.listdir(tmp_path / "ref" / "train") if n.endswith(".npy")):
    np.testing.assert_array_equal(np.load(tmp_path / "ref" / "train" / name),
                                  np.load(tmp_path / "bulk" / "train" / name))


def test_lengths_in_bulk_equal_one_by_one():
  lengths = np.random.default_rng(3).integers(1, 40, size=500)
  one, bulk = stats.LengthStats(), stats.LengthStats()
  for n in lengths:
    one.add(n)
  bulk.add_many(lengths[:200])
  bulk.add_many(lengths[200:])
  assert one.histogram == bulk.histogram and one.summary() == bulk.summary()
