"""prepare-trembl on the real sample proteome and on every bad input the issue lists."""

import filecmp
import gzip
import hashlib
import json
import os
import subprocess

import grain.python as grain
import numpy as np
import pytest

from performer.data import fasta, outdir, samples, trembl, vocab
from performer.data.shards import TokenShards
from performer.errors import UserError


@pytest.fixture(scope="module")
def proteome():
  return samples.fetch("protein")


def _prepare(inputs, out, workers=1, **kwargs):
  cfg = trembl.TremblConfig(inputs=tuple(str(i) for i in inputs), **kwargs)
  return trembl.prepare(cfg, str(out), workers=workers, progress=False)


def _awk_lengths(path):
  """Independent count: one length per record, '*' and line ends excluded."""
  script = r'/^>/{if(n)print len; n++; len=0; next} {gsub(/[\r\n* ]/,""); len+=length($0)} END{print len}'
  out = subprocess.run(["awk", script, str(path)], capture_output=True, text=True, check=True)
  return np.array([int(x) for x in out.stdout.split()])


def _records(folder):
  source = TokenShards(str(folder))
  return [source[i] for i in range(len(source))]


def test_sample_stats_agree_with_awk(proteome, tmp_path):
  result = _prepare([proteome], tmp_path / "d", dedup=False, valid_fraction=0.05, test_fraction=0.05)
  lengths = _awk_lengths(proteome)
  everything = result["single"]["all"]
  assert everything["count"] == len(lengths) == 2100
  assert (everything["min"], everything["max"]) == (lengths.min(), lengths.max())
  assert everything["mean"] == pytest.approx(lengths.mean(), abs=0.01)
  assert everything["std"] == pytest.approx(lengths.std(), abs=0.01)
  assert everything["median"] == np.median(lengths)
  assert sum(result["single"][s]["count"] for s in ("train", "valid", "test")) == 2100
  assert 50 < result["single"]["valid"]["count"] < 160  # ~5% of 2100
  assert result["rules"]["stop_dropped"] == int(subprocess.run(
      ["grep", "-c", r"\*$", str(proteome)], capture_output=True, text=True).stdout)
  # Concat task: every residue plus one EOS per record, in chunks of exactly 8192.
  total = 0
  for split, chunk in result["concat"].items():
    records = _records(tmp_path / "d" / "concat" / split)
    assert len(records) == chunk["count"] and all(len(r) == 8192 for r in records)
    total += chunk["count"] * 8192 + chunk["dropped_tail_tokens"]
  assert total == lengths.sum() + len(lengths)
  assert max(len(r) for r in _records(tmp_path / "d" / "single" / "train")) == 1024  # clipped
  assert "no OOD split" in (tmp_path / "d" / "stats.md").read_text()


def test_dedup_keeps_one_copy_in_one_split(proteome, tmp_path):
  copy = tmp_path / "copy.faa"
  copy.write_bytes(open(proteome, "rb").read())
  result = _prepare([proteome, copy], tmp_path / "d", valid_fraction=0.3, test_fraction=0.3)
  assert result["records_read"] == 4200
  assert result["duplicates_dropped"] == 4200 - result["records_kept"]
  seqs = [tuple(r) for s in ("train", "valid", "test") for r in _records(tmp_path / "d" / "single" / s)]
  assert len(seqs) == len(set(seqs)) == result["records_kept"]


def test_rerun_is_byte_identical_and_workers_do_not_matter(proteome, tmp_path):
  _prepare([proteome], tmp_path / "a", workers=1, shard_tokens=100_000)
  _prepare([proteome], tmp_path / "b", workers=2, shard_tokens=100_000)
  cmp = filecmp.dircmp(tmp_path / "a", tmp_path / "b")
  def same(c):
    assert not c.diff_files and not c.left_only and not c.right_only, (c.diff_files, c.left_only)
    _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
    assert not mismatch and not errors
    for sub in c.subdirs.values():
      same(sub)
  same(cmp)


def test_gzip_windows_endings_bom_and_lower_case_parse_the_same(tmp_path):
  text = ">sp|P1|A first\nMKV*\n>sp|P2|B\nAAGG\nLL W\n"  # a space inside a line
  plain = tmp_path / "plain.fasta"
  plain.write_text(text)
  odd = tmp_path / "odd.fa.gz"
  with gzip.open(odd, "wb") as f:
    f.write(b"\xef\xbb\xbf" + text.lower().replace(">sp|p1|a", ">sp|P1|A").replace(
        ">sp|p2|b", ">sp|P2|B").replace("\n", "\r\n").encode())
  a = _prepare([plain], tmp_path / "a", valid_fraction=0, test_fraction=0)
  b = _prepare([odd], tmp_path / "b", valid_fraction=0, test_fraction=0)
  assert [vocab.decode(r) for r in _records(tmp_path / "a" / "single" / "train")] == ["MKV", "AAGGLLW"]
  assert [list(r) for r in _records(tmp_path / "b" / "single" / "train")] == [
      list(r) for r in _records(tmp_path / "a" / "single" / "train")]
  assert a["rules"]["upper_cased"] == 0 and b["rules"]["upper_cased"] == 2
  assert b["rules"]["stop_dropped"] == 1


def test_residue_counts_are_those_of_the_clipped_records_and_draw_fig9(proteome, tmp_path):
  from performer import figures  # pylint: disable=import-outside-toplevel
  from performer.figures import aa_distribution  # pylint: disable=import-outside-toplevel
  result = _prepare([proteome], tmp_path / "d", dedup=False, valid_fraction=0.05,
                    test_fraction=0.05)
  # Independent of the token ids: the FASTA's letters, each record clipped to 1,024, over all
  # splits (stop '*' dropped, as prepare-trembl does).
  text = {}
  for record in open(proteome).read().split(">")[1:]:
    residues = "".join(record.splitlines()[1:]).replace("*", "")[:1024]
    for letter in residues:
      text[letter] = text.get(letter, 0) + 1
  summed = {t: sum(result["residue_counts"][s].get(t, 0) for s in ("train", "valid", "test"))
            for t in vocab.AMINO_ACIDS}
  assert summed == {t: text.get(t, 0) for t in vocab.AMINO_ACIDS}
  for split in ("train", "valid", "test"):
    # Independent: the letters of the records the single task wrote (clipped to 1,024).
    letters = np.bincount(np.concatenate(_records(tmp_path / "d" / "single" / split)),
                          minlength=vocab.VOCAB_SIZE)
    assert result["residue_counts"][split] == {
        t: int(n) for t, n in zip(vocab.TOKENS, letters) if t in vocab.AMINO_ACIDS}
  stats = json.loads((tmp_path / "d" / "stats.json").read_text())
  shares = aa_distribution.frequencies(stats)
  assert sum(shares.values()) == pytest.approx(1.0)
  train = sum(result["residue_counts"]["train"].values())
  assert shares["I"] == result["residue_counts"]["train"]["I"] / train
  out = str(tmp_path / "fig9.png")
  assert figures.figure("aa-distribution", input_path=str(tmp_path / "d"), out_path=out) == (out,)
  # A dataset prepared before the counts: the figure counts its train shards instead.
  assert aa_distribution.counted(str(tmp_path / "d")) == {
      t: n for t, n in result["residue_counts"]["train"].items() if n}
  del stats["residue_counts"]
  with pytest.raises(UserError, match="written before they were recorded"):
    aa_distribution.frequencies(stats)


def test_long_sequence_is_clipped_in_single_and_whole_in_concat(tmp_path):
  path = tmp_path / "long.fasta"
  path.write_text(">long\n" + "\n".join(["ACDEFGHIKL" * 6] * 667)[:40_000 + 666] + "\n>short\nMK\n")
  result = _prepare([path], tmp_path / "d", valid_fraction=0, test_fraction=0, concat_len=1000)
  assert result["single"]["train"]["max"] == 40_000
  single = _records(tmp_path / "d" / "single" / "train")
  assert sorted(len(r) for r in single) == [2, 1024]
  assert result["concat"]["train"]["count"] == (40_000 + 1 + 2 + 1) // 1000


@pytest.mark.parametrize("policy, kept, counted", [
    ("skip", ["MK"], ("skipped_invalid", 1)),
    ("map-to-x", ["MK", "MXA"], ("mapped_to_x", 1)),
])
def test_invalid_character_policies(tmp_path, policy, kept, counted):
  path = tmp_path / "bad.fasta"
  path.write_text(">ok\nMK\n>bad\nM1A\n>empty\n")
  result = _prepare([path], tmp_path / "d", invalid=policy, valid_fraction=0, test_fraction=0)
  assert sorted(vocab.decode(r) for r in _records(tmp_path / "d" / "single" / "train")) == kept
  assert result["rules"][counted[0]] == counted[1]
  assert result["rules"]["skipped_empty"] == 1


@pytest.mark.parametrize("content, match", [
    (b"", "empty file"),
    (b"\n\n  \n", "empty file"),
    (b"hello world\nthis is not fasta\n", r":1: not FASTA"),
    (b">a\nMK\n>b\nM1A\n", r":4: record 'b' \(header on line 3\) has '1'"),
    (b">a\nMK\n>b\nMKA\nMK\nK1\n", r":6: record 'b' \(header on line 3\) has '1'"),
    (b">a\nMK\n>nothing here\n>c\nMK\n", r":3: record 'nothing' has no sequence"),
])
def test_bad_files_fail_with_file_and_line(tmp_path, content, match):
  path = tmp_path / "in.fasta"
  path.write_bytes(content)
  with pytest.raises(UserError, match=match):
    _prepare([path], tmp_path / "out", invalid="fail")
  assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_truncated_gzip_and_missing_paths(proteome, tmp_path):
  data = gzip.compress(open(proteome, "rb").read())
  cut = tmp_path / "cut.faa.gz"
  cut.write_bytes(data[:len(data) // 2])
  with pytest.raises(UserError, match="cut.faa.gz: truncated or corrupt gzip"):
    _prepare([cut], tmp_path / "out")
  with pytest.raises(UserError, match="nope.fasta: no such file or folder"):
    _prepare([tmp_path / "nope.fasta"], tmp_path / "out")
  (tmp_path / "empty_dir").mkdir()
  with pytest.raises(UserError, match="holds no FASTA files"):
    _prepare([tmp_path / "empty_dir"], tmp_path / "out")
  assert not (tmp_path / "out").exists()


def test_output_folder_rules(proteome, tmp_path):
  out = tmp_path / "d"
  _prepare([proteome], out)
  stamp = (out / "manifest.json").stat().st_mtime_ns
  _prepare([proteome], out)  # same dataset: nothing to do
  assert (out / "manifest.json").stat().st_mtime_ns == stamp
  with pytest.raises(UserError, match="already holds a different dataset"):
    _prepare([proteome], out, seq_len=512)
  cfg = trembl.TremblConfig(inputs=(str(proteome),), seq_len=512)
  trembl.prepare(cfg, str(out), workers=1, force=True, progress=False)
  assert json.loads((out / "manifest.json").read_text())["fingerprint"]["options"]["seq_len"] == 512
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "notes.txt").write_text("mine")
  with pytest.raises(UserError, match="not a prepared dataset"):
    _prepare([proteome], tmp_path / "other")


def test_interrupted_run_leaves_nothing_complete(proteome, tmp_path, monkeypatch):
  out = tmp_path / "d"
  def crash(*args, **kwargs):
    raise KeyboardInterrupt
  monkeypatch.setattr(trembl, "_stats_markdown", crash)
  with pytest.raises(KeyboardInterrupt):
    _prepare([proteome], out)
  assert not out.exists()  # only out.partial (marked as ours), which a restart removes
  monkeypatch.undo()
  _prepare([proteome], out)
  assert (out / "manifest.json").exists() and not (tmp_path / "d.partial").exists()


def test_ood_holds_out_whole_families(proteome, tmp_path):
  names = [line[1:].split()[0] for line in open(proteome) if line.startswith(">")]
  families = tmp_path / "families.tsv"
  # A family per contig (HG003688, ...): a stand-in mapping over real accessions.
  families.write_text("".join(f"{n}\t{n.rsplit('_', 1)[0]}\n" for n in names))
  family = names[0].rsplit("_", 1)[0]
  result = _prepare([proteome], tmp_path / "d", dedup=False, families=str(families),
                    ood_families=(family,))
  expected = sum(n.startswith(family + "_") for n in names)
  assert result["single"]["ood"]["count"] == expected > 10
  assert result["ood"]["families_held_out"] == 1
  with pytest.raises(UserError, match="no such families: PF99999"):
    _prepare([proteome], tmp_path / "e", families=str(families), ood_families=("PF99999",))


def test_two_processes_read_disjoint_halves_of_a_multi_shard_dataset(proteome, tmp_path):
  folder = tmp_path / "inputs"
  folder.mkdir()
  lines = open(proteome).read().split(">")[1:]
  (folder / "part1.faa").write_text("".join(">" + r for r in lines[:1000]))
  with gzip.open(folder / "part2.faa.gz", "wt") as f:
    f.write("".join(">" + r for r in lines[1000:]))
  _prepare([folder], tmp_path / "d", dedup=False, valid_fraction=0, test_fraction=0,
           shard_tokens=50_000)
  split = tmp_path / "d" / "single" / "train"
  source = TokenShards(str(split))
  assert len(source.index["shards"]) > 5 and len(source) == 2100
  seen = []
  for process in range(2):
    sampler = grain.IndexSampler(len(source), shard_options=grain.ShardOptions(process, 2),
                                 shuffle=False, num_epochs=1)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=0)
    seen.append([tuple(x) for x in loader])
  assert not set(seen[0]) & set(seen[1])
  assert abs(len(seen[0]) - len(seen[1])) <= 1
  expected = [tuple(vocab.encode(r.split("\n", 1)[1].replace("\n", "").rstrip("*").encode())[:1024])
              for r in lines]
  assert sorted(seen[0] + seen[1]) == sorted(expected)


def test_output_folder_protections(proteome, tmp_path):
  keep = tmp_path / "mine"
  keep.mkdir()
  (keep / "notes.txt").write_text("precious")
  with pytest.raises(UserError, match="not a prepared dataset"):
    trembl.prepare(trembl.TremblConfig(inputs=(str(proteome),)), str(keep), force=True,
                   workers=1, progress=False)
  assert (keep / "notes.txt").read_text() == "precious"
  inputs = tmp_path / "inputs"
  inputs.mkdir()
  (inputs / "p.faa").write_bytes(open(proteome, "rb").read())
  for out in (inputs, tmp_path):  # is the input folder, or holds it
    with pytest.raises(UserError, match="is or holds the input"):
      _prepare([inputs], out)
  (tmp_path / "file").write_text("x")
  with pytest.raises(UserError, match="is a file"):
    _prepare([proteome], tmp_path / "file")
  with pytest.raises(UserError, match="cannot create folder"):
    _prepare([proteome], tmp_path / "file" / "sub")
  (tmp_path / "x.partial").mkdir()
  (tmp_path / "x.partial" / "work.txt").write_text("someone's")
  with pytest.raises(UserError, match="was not made by performer"):
    _prepare([proteome], tmp_path / "x")
  assert (tmp_path / "x.partial" / "work.txt").exists()
  with pytest.raises(UserError, match="given twice"):
    _prepare([proteome, proteome], tmp_path / "y")
  with pytest.raises(UserError, match="--workers must be >= 1"):
    _prepare([proteome], tmp_path / "y", workers=0)
  with pytest.raises(UserError, match="--concat-len must be >= 2"):
    trembl.TremblConfig(inputs=(str(proteome),), concat_len=1)


def test_an_edited_input_is_not_taken_for_the_same_dataset(tmp_path):
  path = tmp_path / "a.fasta"
  path.write_text(">a\nMKV\n")
  _prepare([path], tmp_path / "d", valid_fraction=0, test_fraction=0)
  path.write_text(">a\nMKA\n")  # same size, new content
  os.utime(path, ns=(1, 1))
  with pytest.raises(UserError, match="different dataset"):
    _prepare([path], tmp_path / "d", valid_fraction=0, test_fraction=0)


def test_windows_cover_long_records_exactly(proteome, tmp_path):
  from performer.data.shards import Windows  # pylint: disable=import-outside-toplevel
  _prepare([proteome], tmp_path / "d", shard_tokens=20_000)
  source = TokenShards(str(tmp_path / "d" / "single" / "train"))
  windows = Windows(source, 100)
  joined = [np.concatenate([w for w in (windows[i] for i in range(len(windows)))])]
  assert np.array_equal(joined[0], np.concatenate([source[i] for i in range(len(source))]))
  assert len(windows) == sum(-(-len(source[i]) // 100) for i in range(len(source)))
  assert max(len(windows[i]) for i in range(len(windows))) == 100


def test_a_second_run_on_the_same_out_stops_at_once_naming_the_first(proteome, tmp_path):
  out = tmp_path / "d"
  with outdir.lock(str(out)):  # as a first run holds it
    with pytest.raises(UserError, match=rf"--out {out} is in use by pid {os.getpid()} on "):
      _prepare([proteome], out)
    assert not out.exists() and not (tmp_path / "d.partial").exists()
  _prepare([proteome], out)
  assert sorted(os.listdir(tmp_path)) == ["d"]  # the lock file is gone with its holder


def test_nucleotide_input_is_refused_unless_allowed(proteome, tmp_path):
  rng = np.random.default_rng(0)
  genome = tmp_path / "genome.fna"
  genome.write_text("".join(f">contig{i}\n" + "".join(rng.choice(list("acgtn"), 3000)) + "\n"
                            for i in range(3)))
  with pytest.raises(UserError, match=r"genome.fna: 100% of its first 5,000 residues are A, C, G, "
                                      r"T, U or N: .*DNA/RNA.*--allow-nucleotide"):
    _prepare([proteome, genome], tmp_path / "d")
  assert not (tmp_path / "d").exists()
  assert fasta.nucleotide_share(proteome) == (pytest.approx(0.2042), 5000)  # real protein
  cfg = trembl.TremblConfig(inputs=(str(genome),), valid_fraction=0, test_fraction=0)
  result = trembl.prepare(cfg, str(tmp_path / "d"), workers=1, progress=False,
                          allow_nucleotide=True)
  assert result["records_kept"] == 3 and result["rules"]["upper_cased"] == 3


@pytest.mark.parametrize("content, match", [
    (b"\x00\x01\xff\xfebinary\x80", "not UTF-8 text"),
    (b"", "no 'accession family' lines"),
    (b"uniprot_acc\tpfamA_acc\n# nothing\n", "no 'accession family' lines"),
    (gzip.compress(b"A0A1 PF00001\n" * 1000, mtime=0)[:40], "truncated or corrupt gzip data"),
], ids=["binary", "empty", "header-only", "truncated-gzip"])
def test_bad_families_files_are_one_line_errors(proteome, tmp_path, content, match):
  families = tmp_path / "families.tsv"
  families.write_bytes(content)
  with pytest.raises(UserError, match=f"families.tsv: .*({match})"):
    _prepare([proteome], tmp_path / "d", families=str(families))
  assert not (tmp_path / "d").exists()


def test_identical_bytes_elsewhere_are_the_same_dataset(proteome, tmp_path):
  families = tmp_path / "families.tsv.gz"
  with gzip.open(families, "wt") as f:
    f.write("".join(f"{line[1:].split()[0]}\tF{i % 7}\n"
                    for i, line in enumerate(open(proteome)) if line.startswith(">")))
  out = tmp_path / "d"
  _prepare([proteome], out, families=str(families))
  stamp = (out / "manifest.json").stat().st_mtime_ns
  moved = tmp_path / "cache2" / "sample.faa"  # another PERFORMER_CACHE, a fresh mtime
  moved.parent.mkdir()
  moved.write_bytes(open(proteome, "rb").read())
  os.utime(families, ns=(1, 1))
  _prepare([moved], out, families=str(families))  # same bytes: nothing to do
  assert (out / "manifest.json").stat().st_mtime_ns == stamp
  with open(families, "ab") as f:  # the OOD split depends on the mapping's content
    f.write(gzip.compress(b"extra\tF8\n"))
  with pytest.raises(UserError, match="different dataset"):
    _prepare([moved], out, families=str(families))


def test_a_recorded_sha256_is_reused_only_for_the_unchanged_file(tmp_path):
  path = tmp_path / "a.fasta"
  path.write_text(">a\nMKV\n")
  entry = outdir.file_digest(str(path))
  assert entry["sha256"] == hashlib.sha256(b">a\nMKV\n").hexdigest()
  known = [{**entry, "sha256": "recorded"}]
  assert outdir.file_digest(str(path), known)["sha256"] == "recorded"  # not read again
  os.utime(path, ns=(1, 1))  # same bytes, another mtime: read again
  assert outdir.file_digest(str(path), known)["sha256"] == entry["sha256"]


def test_a_dataset_fingerprinted_by_an_older_version_is_rebuilt(tmp_path, capsys):
  fasta = tmp_path / "a.fasta"
  fasta.write_text(">a\nMKVLAAGIVGLLLAAPAQA\n>b\nMSTNPKPQRKTKRNTNRRPQDVKFPGG\n")
  out = tmp_path / "out"
  cfg = trembl.TremblConfig(inputs=(str(fasta),), valid_fraction=0.0, test_fraction=0.0)
  trembl.prepare(cfg, str(out), workers=1, progress=False)
  manifest = json.loads((out / "manifest.json").read_text())
  manifest["fingerprint"] = {"kind": "trembl", "inputs": [{"path": str(fasta), "mtime_ns": 1}]}
  (out / "manifest.json").write_text(json.dumps(manifest))
  trembl.prepare(cfg, str(out), workers=1, progress=False)  # no --force needed
  assert "prepared by an older performer" in capsys.readouterr().err
  assert json.loads((out / "manifest.json").read_text())["fingerprint"]["inputs"][0] != manifest[
      "fingerprint"]["inputs"][0]
