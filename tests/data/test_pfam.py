"""label-pfam on the real sample proteome with the real Pfam-A HMMs (gecco 0.11.0 wheel)."""

import dataclasses
import gzip
import json
import subprocess
import sys

import pytest

pyhmmer = pytest.importorskip("pyhmmer")

from performer.data import pfam, samples, trembl  # pylint: disable=wrong-import-position
from performer.errors import UserError  # pylint: disable=wrong-import-position


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
  out = tmp_path_factory.mktemp("labels") / "labels.tsv.gz"
  cfg = pfam.LabelConfig(inputs=(samples.fetch("protein"),), hmms=samples.fetch("pfam"),
                         sample=300, ood_fraction=0.05, cpus=1)
  summary = pfam.label(cfg, str(out), progress=False)
  rows = [line.split("\t") for line in gzip.open(out, "rt").read().splitlines()]
  return cfg, out, summary, rows


def test_held_out_families_are_complete_by_an_independent_hmmsearch(labelled):
  cfg, _, summary, rows = labelled
  held = summary["held_out_families"]
  assert held and summary["held_out_sequences"] > 0
  text = lambda name: name if isinstance(name, str) else name.decode()  # bytes before pyhmmer 0.11
  hmms = {text(h.accession).split(".")[0]: h for h in pyhmmer.plan7.HMMFile(cfg.hmms)}
  alphabet = pyhmmer.easel.Alphabet.amino()
  with pyhmmer.easel.SequenceFile(cfg.inputs[0], digital=True, alphabet=alphabet) as f:
    seqs = f.read_block()
  for family in held[:3]:
    top = next(iter(pyhmmer.hmmer.hmmsearch([hmms[family]], seqs, bit_cutoffs="gathering")))
    want = {text(h.name) for h in top if h.included}
    assert want and {acc for acc, fam in rows if fam == family} == want, family
  assert len({acc for acc, fam in rows if fam in set(held)}) == summary["held_out_sequences"]


def test_held_out_families_fill_the_target_share_in_hash_order():
  cfg = pfam.LabelConfig(inputs=("x",), hmms="y", ood_fraction=0.1, seed=0)
  survey = {f"PF{i:05d}": set(range(i % 7 + 1)) for i in range(40)}  # sizes 1..7 in the sample
  held = pfam.choose_held_out(survey, sample_size=100, total=1000, cfg=cfg)
  estimate = sum(len(survey[f]) * 10 for f in held)
  assert estimate <= 100
  left = [f for f in survey if f not in held]
  assert all(estimate + len(survey[f]) * 10 > 100 for f in left)  # none of the rest still fits


def test_labels_give_prepare_trembl_its_ood_split(labelled, tmp_path):
  cfg, out, summary, rows = labelled
  result = trembl.prepare(trembl.TremblConfig(
      inputs=cfg.inputs, families=str(out), ood_families=tuple(summary["held_out_families"]),
      valid_fraction=0.05, test_fraction=0.05), str(tmp_path / "d"), workers=1, progress=False)
  held = {acc for acc, fam in rows if fam in set(summary["held_out_families"])}
  # Deduplication may drop identical sequences, never add any.
  assert 0 < result["single"]["ood"]["count"] <= len(held)
  assert result["single"]["ood"]["count"] >= len(held) - 5  # the sample has 5 duplicates
  meta = json.load(open(str(out) + ".json"))
  assert meta["sequences"] == 2100 and meta["hmms"] == 2766


@pytest.mark.parametrize("args, message", [
    (["--gecco", "--hmms", "x.h3m"], "give --hmms FILE or --gecco, not both"),
    ([], "give --hmms FILE or --gecco"),
    (["--hmms", "/nonexistent.h3m"], "/nonexistent.h3m: not a readable HMMER3 file"),
    (["--gecco", "--sample", "0"], "--sample must be >= 1"),
    (["--gecco", "--ood-fraction", "1.5"], "--ood-fraction must be in (0, 1)"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
  fasta = samples.fetch("protein")
  done = subprocess.run([sys.executable, "-m", "performer.cli", "label-pfam", fasta,
                         "--out", str(tmp_path / "l.tsv"), *args], capture_output=True, text=True)
  assert done.returncode != 0
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"performer label-pfam: error: {message}"), lines
  assert not (tmp_path / "l.tsv").exists()


def test_dna_an_unwritable_out_and_other_labels_are_refused_before_any_search(labelled, tmp_path):
  dna = tmp_path / "dna.fa"
  dna.write_text(">r1\n" + "ACGTTGCAAC" * 60 + "\n")
  cfg = pfam.LabelConfig(inputs=(str(dna),), hmms="/nonexistent.h3m")  # never read: refused first
  with pytest.raises(UserError, match="dna.fa: 100% of the first 600 residues .* looks like DNA"):
    pfam.label(cfg, str(tmp_path / "l.tsv"), progress=False)
  with pytest.raises(UserError, match="is a folder"):
    pfam.label(dataclasses.replace(cfg, inputs=labelled[0].inputs), str(tmp_path), progress=False)
  done_cfg, out, summary, _ = labelled
  assert pfam.finished(done_cfg, str(out)) == json.loads(json.dumps(summary))
  with pytest.raises(UserError, match="holds labels of other inputs or options"):
    pfam.finished(dataclasses.replace(done_cfg, seed=1), str(out))


def test_a_file_that_is_not_fasta_is_named(tmp_path):
  bad = tmp_path / "bad.fa"
  bad.write_text("hello\n")
  with pytest.raises(UserError, match="bad.fa"):
    list(pfam.read_sequences([str(bad)]))


def test_records_outside_the_amino_alphabet_follow_invalid_and_are_counted(tmp_path, capsys):
  good = [(f"P{i:05d}", "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"[i % 7:] + "AC" * (i % 3)) for i in range(6)]
  fa = tmp_path / "mixed.fa"
  fa.write_text("".join(f">sp|{acc}|X\n{res if i % 2 else res[:5] + '123!!' + res[5:]}\n"
                        for i, (acc, res) in enumerate(good)))
  for policy, kept, counts in (("skip", 3, {"skipped_invalid": 3, "mapped_to_x": 0}),
                               ("map-to-x", 6, {"skipped_invalid": 0, "mapped_to_x": 3})):
    seen = {}
    records = list(pfam.read_sequences([str(fa)], policy, seen))
    assert len(records) == kept and seen == counts, policy
  assert records[0][1] == good[0][1][:5] + "XXXXX" + good[0][1][5:]  # map-to-x keeps the length
  with pytest.raises(UserError, match=r"record 'P00000' has '!', not one of the 25 amino-acid"):
    list(pfam.read_sequences([str(fa)], "fail"))
  # The command says what it skipped; a folder as --out is named before any work.
  from performer import cli  # pylint: disable=import-outside-toplevel
  assert cli.main(["label-pfam", str(fa), "--gecco", "--out", str(tmp_path)]) == 2
  assert "is a folder: give the file to write" in capsys.readouterr().err
  assert cli.main(["label-pfam", str(fa), "--gecco", "--sample", "10", "--cpus", "1",
                   "--out", str(tmp_path / "l.tsv")]) == 0
  out = capsys.readouterr().out
  assert "3 records skipped and 0 mapped to X for characters outside the 25 amino-acid" in out
  assert "3 of 3 sequences surveyed" in out
  assert json.loads((tmp_path / "l.tsv.json").read_text())["skipped_invalid"] == 3
