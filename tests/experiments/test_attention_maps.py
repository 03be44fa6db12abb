"""attention-maps and aa-similarity (App. C.4): FAVOR's implicit matrix, exact maps, Vig et al."""

import gzip
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from performer import cli, configurables, favor
from performer.data import pipeline, vocab
from performer.errors import UserError
from performer.experiments import aa_similarity, attention_maps, protein_matrices, results
from performer.train import loop
from performer.train import state as state_lib
from performer.train.checkpoint import Checkpoints
import testlib

TINY = ["ModelConfig.num_layers = 2"]  # over tests/tiny.gin
FEATURES = "ModelConfig.attention_options = {'num_features': 8}"  # Performers only
SAVED_DRAW = 2500  # the W a run's checkpoint holds: not the draw of a freshly built model
B, L, H, D, M = 2, 7, 3, 5, 11



def _workdir(folder, data, config):
  """A `performer train` workdir (config.json + a checkpoint) of a freshly built tiny model.

  Performer layers get W = draw(SAVED_DRAW) before saving, so a test can see
  that the experiment uses the checkpoint's W.
  """
  extra = [FEATURES] if "performer" in config else []
  configurables.parse(testlib.gin(config), [f"DataConfig.path = '{data}'", *TINY, *extra])
  cfg = configurables.resolve()
  model, optimizer = state_lib.build(cfg)
  for block in model.blocks:
    if protein_matrices.is_performer(block):
      block.attn.redraw(SAVED_DRAW)
  os.makedirs(folder)
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump(cfg.to_json(), f)
  with Checkpoints(os.path.abspath(os.path.join(folder, "checkpoints"))) as ckpt:
    ckpt.save(1, model, optimizer, {"step": 1})
  return str(folder)


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
  root = tmp_path_factory.mktemp("runs")
  return {name: _workdir(root / name, data, f"gin/mini/trembl_{name}.gin")
          for name in ("b_performer_softmax", "u_exact")}


@pytest.fixture(scope="module")
def fasta_file(tmp_path_factory):
  """A gzip FASTA: UniProt and plain headers, lower case with a stop, a long and a bad record."""
  path = tmp_path_factory.mktemp("fasta") / "proteins.fasta.gz"
  text = (">sp|Q00001|TEST_HUMAN A test protein\nmkvlaagicw\nDEFHKLMNPQ*\n"
          ">P00002 GO:0000001\nACDEFGHIKLMNPQRSTVWY\n"
          f">LONG1 forty residues\n{'ACDEFGHIKL' * 4}\n"
          ">BAD1 an invalid letter\nACDJEF\n")
  with gzip.open(path, "wt") as f:
    f.write(text)
  return str(path)


def _inputs(seed, scale=1.0):
  kq, kk, kv, kw = jax.random.split(jax.random.key(seed), 4)
  q = scale * jax.random.normal(kq, (B, L, H, D))
  k = scale * jax.random.normal(kk, (B, L, H, D))
  v = jax.random.normal(kv, (B, L, H, D))
  W = favor.projection(kw, M, D, "orthogonal", "chi")
  mask = jnp.ones((B, L), bool).at[1, -2:].set(False)  # the second example has 2 padded keys
  return q, k, v, W, mask


# --- The matrices ----------------------------------------------------------------------------

# scale 6: scaled norms ~ 20, where unstabilized features would overflow.
@pytest.mark.parametrize("kernel,epsilon,causal,scale", [
    ("positive", 0.0, False, 1.0), ("positive", 0.0, False, 6.0), ("positive", 0.0, True, 6.0),
    ("relu", 1e-3, True, 1.0)])
def test_favor_matrix_rows_sum_to_one_and_times_v_is_the_backend_output(kernel, epsilon, causal,
                                                                         scale):
  q, k, v, W, mask = _inputs(1, scale)
  A = np.asarray(favor.attention_matrix(q, k, W, kernel=kernel, kernel_epsilon=epsilon,
                                             mask=mask, causal=causal))
  assert A.shape == (B, H, L, L)
  np.testing.assert_allclose(A.sum(-1), 1.0, atol=2e-6)
  assert np.all(A[1, :, :, -2:] == 0.0)  # padded keys get no weight
  if causal:
    assert np.all(A[:, :, np.triu_indices(L, 1)[0], np.triu_indices(L, 1)[1]] == 0.0)
  out = favor.favor_attention(q, k, v, W, kernel=kernel, kernel_epsilon=epsilon, mask=mask,
                              causal=causal)
  np.testing.assert_allclose(np.einsum("bhij,bjhd->bihd", A, np.asarray(v)), np.asarray(out),
                             rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("kernel,epsilon", [("positive", 0.0), ("relu", 1e-3)])
def test_favor_matrix_is_the_normalised_explicit_estimator(kernel, epsilon):
  """Independently, in float64: phi(x) = exp(Wx - |x|^2/2)/sqrt(m), or relu(Wx)/sqrt(m) + eps."""
  q, k, _, W, mask = _inputs(2)
  def phi(x):
    x = np.asarray(x, np.float64) * D ** -0.25
    wx = np.einsum("blhd,md->bhlm", x, np.asarray(W, np.float64))
    if kernel == "positive":
      return np.exp(wx - 0.5 * np.sum(x * x, -1)[..., None].transpose(0, 2, 1, 3)) / np.sqrt(M)
    return np.maximum(wx, 0.0) / np.sqrt(M) + epsilon
  scores = np.einsum("bhim,bhjm->bhij", phi(q), phi(k)) * np.asarray(mask)[:, None, None, :]
  want = scores / scores.sum(-1, keepdims=True)
  got = favor.attention_matrix(q, k, W, kernel=kernel, kernel_epsilon=epsilon, mask=mask)
  np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("causal", [False, True])
def test_exact_maps_are_softmax_of_q_k_over_sqrt_d(causal):
  q, k, v, _, mask = _inputs(3, 2.0)
  logits = np.einsum("bqhd,bkhd->bhqk", np.asarray(q, np.float64), np.asarray(k, np.float64))
  allowed = np.asarray(mask)[:, None, None, :] & (np.tri(L, dtype=bool) if causal else True)
  e = np.where(allowed, np.exp(logits / np.sqrt(D) - 10.0), 0.0)
  want = e / e.sum(-1, keepdims=True)
  got = np.asarray(favor.softmax_matrix(q, k, mask=mask, causal=causal))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
  out = favor.softmax_attention(q, k, v, mask=mask, causal=causal)
  np.testing.assert_allclose(np.einsum("bhij,bjhd->bihd", got, np.asarray(v)), np.asarray(out),
                             rtol=1e-5, atol=1e-6)


def test_head_summary_and_total_variation_on_hand_made_maps():
  eye = np.eye(4)
  vertical = np.zeros((4, 4))
  vertical[:, 2] = 1.0  # every query attends to position 2
  uniform = np.full((4, 4), 0.25)
  s = attention_maps.head_summary(np.stack([eye, vertical, uniform]))
  np.testing.assert_allclose(s["mean_distance"], [0.0, (2 + 1 + 0 + 1) / 4, 20 * 0.25 / 4])
  np.testing.assert_allclose(s["diagonal_share"], [1.0, 0.75, 10 / 16])
  assert list(s["top_column"][:2]) == [0, 2]
  np.testing.assert_allclose(s["top_column_share"][:2], [0.25, 1.0])
  mean, most = attention_maps.total_variation(np.stack([eye, vertical]), np.stack([eye, uniform]))
  np.testing.assert_allclose(mean, [0.0, 0.75])
  np.testing.assert_allclose(most, [0.0, 0.75])


# --- Finding and feeding a protein ---------------------------------------------------------

def test_find_sequence_by_accession_or_entry_name(fasta_file, tmp_path):
  header, tokens = attention_maps.find_sequence(fasta_file, "P00002")
  assert header == "P00002 GO:0000001" and vocab.decode(tokens) == "ACDEFGHIKLMNPQRSTVWY"
  header, tokens = attention_maps.find_sequence(fasta_file, "TEST_HUMAN")
  assert header.startswith("sp|Q00001|TEST_HUMAN")
  assert vocab.decode(tokens) == "MKVLAAGICWDEFHKLMNPQ"  # folded, stop dropped
  assert vocab.decode(attention_maps.find_sequence(fasta_file, "Q00001")[1]).startswith("MKVL")
  plain = tmp_path / "plain.fa"
  with gzip.open(fasta_file, "rt") as f:
    plain.write_text(f.read())
  assert len(attention_maps.find_sequence(str(plain), "LONG1")[1]) == 40
  with pytest.raises(UserError, match="no record 'P99999'"):
    attention_maps.find_sequence(fasta_file, "P99999")
  with pytest.raises(UserError, match=r"proteins.fasta.gz:9: record 'BAD1' \(header on line 8\) has 'J'"):
    attention_maps.find_sequence(fasta_file, "BAD1")
  with pytest.raises(UserError, match="no such file|No such file"):
    attention_maps.find_sequence(str(tmp_path / "absent.fa"), "P00002")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [5, 40])
def test_model_input_is_what_training_feeds(causal, n):
  seq = np.arange(n) % 20 + len(vocab.SPECIALS)
  inputs, _ = pipeline._example(  # pylint: disable=protected-access
      seq, 32, vocab.EOS, vocab.PAD, causal)
  got = protein_matrices.model_input(seq, 32, causal)
  np.testing.assert_array_equal(got, inputs[:len(got)])
  assert np.all(inputs[len(got):] == vocab.PAD) and len(got) == min(n + causal, 32)


# --- Whole runs -------------------------------------------------------------------------------

def _maps(runs, name, fasta_file, tmp_path, accession="P00002", layers=None):
  out = str(tmp_path / f"{name}.json")
  cfg = attention_maps.MapsConfig(run=runs[name], fasta=fasta_file, accession=accession,
                                  layers=layers)
  results.main(attention_maps, cfg, out)
  with open(out) as f:
    record = json.load(f)
  with np.load(os.path.join(tmp_path, record["arrays"])) as npz:
    arrays = {key: npz[key] for key in npz.files}
  return record, arrays


def test_performer_run_maps_use_its_trained_w_and_reproduce_its_outputs(runs, fasta_file,
                                                                         tmp_path):
  record, arrays = _maps(runs, "b_performer_softmax", fasta_file, tmp_path)
  assert record["experiment"] == "attention_maps" and record["maps"] == ["favor", "exact"]
  assert "(positive features)" in record["maps_note"] and record["run"]["step"] == 1
  assert sorted(arrays) == ["exact", "favor", "tokens"]
  assert arrays["favor"].shape == arrays["exact"].shape == (2, 2, 20, 20)
  assert vocab.decode(arrays["tokens"]) == "ACDEFGHIKLMNPQRSTVWY"
  assert record["labels"] == list("ACDEFGHIKLMNPQRSTVWY")
  assert len(record["rows"]) == 4 and all(r["own_matrix_check"] < 1e-5 for r in record["rows"])
  np.testing.assert_allclose(arrays["favor"].sum(-1), 1.0, atol=2e-6)

  # Recomputed here from the restored model: exact maps by numpy, FAVOR with the saved W.
  _, model, _ = protein_matrices.load_model(runs["b_performer_softmax"])
  tokens = jnp.asarray(arrays["tokens"])[None]
  states = model.hidden_states(tokens, tokens != vocab.PAD)
  for layer in (0, 1):
    q, k, _ = model.blocks[layer].heads(states[layer])
    logits = np.einsum("bqhd,bkhd->bhqk", np.asarray(q, np.float64), np.asarray(k, np.float64))
    e = np.exp(logits / np.sqrt(q.shape[-1]) - logits.max(-1, keepdims=True) / np.sqrt(q.shape[-1]))
    np.testing.assert_allclose(arrays["exact"][layer], (e / e.sum(-1, keepdims=True))[0],
                               rtol=1e-5, atol=1e-7)
    attn = model.blocks[layer].attn
    for step, same in ((SAVED_DRAW, True), (0, False)):
      A = favor.attention_matrix(q, k, attn.draw(step), mask=tokens != vocab.PAD)[0]
      assert np.allclose(A, arrays["favor"][layer], rtol=1e-5, atol=1e-7) == same
  # The per-head numbers, recomputed from the arrays.
  row = record["rows"][3]  # head 1-1
  A, E = arrays["favor"][1, 1].astype(np.float64), arrays["exact"][1, 1].astype(np.float64)
  assert row["name"] == "1-1"
  assert row["tv_mean"] == pytest.approx(np.mean(0.5 * np.abs(A - E).sum(-1)), rel=1e-6)
  near = sum(A[i, j] for i in range(20) for j in range(20) if abs(i - j) <= 1) / 20
  assert row["favor_diagonal_share"] == pytest.approx(near, rel=1e-6)
  assert row["exact_top_column"] == int(np.argmax(E.mean(0)))


def test_exact_causal_run_has_exact_lower_triangular_maps_only(runs, fasta_file, tmp_path):
  record, arrays = _maps(runs, "u_exact", fasta_file, tmp_path, accession="TEST_HUMAN", layers=(1,))
  assert record["maps"] == ["exact"] and sorted(arrays) == ["exact", "tokens"]
  assert "only exact maps" in record["maps_note"]
  assert arrays["tokens"][0] == vocab.EOS and record["labels"][:3] == ["^", "M", "K"]
  assert arrays["exact"].shape == (1, 2, 21, 21) and record["layers"] == [1]
  upper = np.triu_indices(21, 1)
  assert np.all(arrays["exact"][..., upper[0], upper[1]] == 0.0)
  assert all(r["favor_diagonal_share"] is None and r["tv_mean"] is None for r in record["rows"])
  assert all(r["own_matrix_check"] < 1e-6 for r in record["rows"])


def test_map_descriptions_name_what_each_matrix_is():
  describe = protein_matrices.describe
  assert "the matrix FAVOR estimates" in describe("performer_softmax", "positive")
  assert "comparison only" in describe("performer_relu", "relu")
  assert "comparison only" in describe("performer_softmax", "relu")  # kernel set by an option
  assert "only exact maps exist" in describe("exact")
  assert "not the linear attention" in describe("linear")


def test_maps_errors_are_user_errors(runs, fasta_file, tmp_path):
  run = runs["b_performer_softmax"]
  main = lambda out="m.json", **kw: results.main(
      attention_maps, attention_maps.MapsConfig(run=run, fasta=fasta_file, **kw),
      str(tmp_path / out))
  with pytest.raises(UserError, match="LONG1 has 40 residues; the sequence is 40 tokens, past "
                     "the run's max_len 32"):
    main(accession="LONG1")
  with pytest.raises(UserError, match=r"--layers 0,2: the run has 2 layers \(0-1\)"):
    main(accession="P00002", layers=(0, 2))
  with pytest.raises(UserError, match="--layers values must not repeat"):
    main(accession="P00002", layers=(1, 1))
  with pytest.raises(UserError, match="give a .json file"):
    main(out="m.npz", accession="P00002")
  with pytest.raises(UserError, match="no config.json"):
    results.main(attention_maps, attention_maps.MapsConfig(run=str(tmp_path), fasta=fasta_file),
                 str(tmp_path / "x.json"))
  assert not os.path.exists(tmp_path / "m.json") and not os.path.exists(tmp_path / "m.npz")


# --- Amino-acid similarity ----------------------------------------------------------------------

def test_blosum62_spot_values_and_symmetry():
  b = aa_similarity.load_blosum62()
  at = lambda x, y: b[vocab.STANDARD.index(x), vocab.STANDARD.index(y)]
  assert (at("W", "W"), at("A", "A"), at("C", "C")) == (11, 4, 9)
  assert (at("D", "E"), at("F", "Y"), at("I", "V"), at("W", "C")) == (2, 3, 3, -2)
  assert b.shape == (20, 20) and np.array_equal(b, b.T) and b.min() == -4
  with open(aa_similarity.BLOSUM62_PATH) as f:
    head = f.read(800)
  assert "Henikoff" in head and "biopython-1.88" in head


def test_blosum62_file_errors(tmp_path):
  with pytest.raises(UserError, match="No such file"):
    aa_similarity.load_blosum62(str(tmp_path / "absent.txt"))
  letters = vocab.STANDARD
  rows = [f"{a} " + " ".join("1" if (i, j) != (0, 1) else "2" for j in range(20))
          for i, a in enumerate(letters)]
  (tmp_path / "asym.txt").write_text("# test\n" + " ".join(letters) + "\n" + "\n".join(rows))
  with pytest.raises(UserError, match="not symmetric"):
    aa_similarity.load_blosum62(str(tmp_path / "asym.txt"))


def test_head_sums_on_a_hand_made_map():
  # Tokens A C A, then padding; one head. Weights <= 0.1 count 0; padding's row and column never.
  a, c = vocab.TOKENS.index("A"), vocab.TOKENS.index("C")
  tokens = jnp.asarray([[a, c, a, vocab.PAD]])
  maps = jnp.asarray([[[[0.5, 0.3, 0.1, 0.1],
                        [0.05, 0.9, 0.05, 0.0],
                        [0.2, 0.2, 0.6, 0.0],
                        [0.9, 0.9, 0.9, 0.9]]]])
  onto, total = aa_similarity.head_sums(maps, tokens, tokens != vocab.PAD, 0.1)
  onto = np.asarray(onto)
  assert onto.shape == (1, 20)
  assert onto[0, vocab.STANDARD.index("A")] == pytest.approx(0.5 + 0.2 + 0.6)
  assert onto[0, vocab.STANDARD.index("C")] == pytest.approx(0.3 + 0.9 + 0.2)
  assert onto.sum() == pytest.approx(2.7) and np.asarray(total)[0] == pytest.approx(2.7)


def test_similarity_and_blosum_correlation_known_answers():
  x = np.array([0.1, 0.4, 0.2, 0.9, 0.5])  # five heads
  p = np.tile(np.linspace(0.01, 0.2, 20), (5, 1)) * (1 + np.arange(5))[:, None] ** 0.5
  p[:, 0], p[:, 1], p[:, 2] = x, 2 * x + 1, -x
  sim = aa_similarity.similarity(p)
  assert sim[0, 1] == pytest.approx(1.0) and sim[0, 2] == pytest.approx(-1.0)
  assert np.allclose(np.diag(sim), 1.0) and np.allclose(sim, sim.T)
  blosum = aa_similarity.load_blosum62()
  r_off, n_off, r_all, n_all = aa_similarity.blosum_correlation(blosum.astype(float), blosum)
  assert (r_off, n_off, r_all, n_all) == (pytest.approx(1.0), 190, pytest.approx(1.0), 210)
  assert aa_similarity.blosum_correlation(-blosum.astype(float), blosum)[0] == pytest.approx(-1.0)
  # A type no head attends to: its 19 pairs drop out; r over the rest.
  p[:, 5] = 0.0
  sim = aa_similarity.similarity(p)
  assert np.all(np.isnan(np.delete(sim[5], 5))) and sim[5, 5] == 1.0
  assert aa_similarity.blosum_correlation(sim, blosum)[1] == 171


def test_aa_similarity_equals_a_direct_numpy_computation(runs):
  run = runs["b_performer_softmax"]
  cfg = aa_similarity.SimilarityConfig(run=run, sequences=5, batch_size=2, min_attention=0.04,
                                       min_total=0.0)
  result = aa_similarity.run(cfg, progress=False)
  rows, extra = result.rows, result.extra
  assert [r["maps"] for r in rows] == ["favor", "exact"] and extra["sequences_used"] == 5

  # Directly: the five in one batch (no empty examples), numpy sums over residue positions.
  cfg, model, _ = protein_matrices.load_model(run)
  source = pipeline.batches(cfg.data, "test", causal=False).source
  records = [source[int(i)] for i in aa_similarity.sample_indices(len(source), 5, 0)]
  tokens, mask = aa_similarity.model_inputs(records, 32, False)
  maps = attention_maps._layer_matrices_jit(  # pylint: disable=protected-access
      model, jnp.asarray(tokens), jnp.asarray(mask), layers=(0, 1))
  types = np.array([[[t == vocab.TOKENS.index(x) for x in vocab.STANDARD] for t in seq]
                    for seq in tokens])  # [5, 32, 20], all False at padding
  onto, total = {}, {}
  for kind in ("favor", "exact"):
    A = np.stack([np.asarray(a) for a in maps[kind]], 1)  # [5, layers, H, 32, 32]
    A = np.where((A > 0.04) & mask[:, None, None, :, None], A, 0.0).reshape(5, 4, 32, 32)
    onto[kind] = np.einsum("bhij,bja->ha", A, types)
    total[kind] = np.einsum("bhij,bj->h", A, tokens >= len(vocab.SPECIALS))  # any residue
  for row in rows:
    kind = row["maps"]
    assert row["heads_kept"] == 4
    np.testing.assert_allclose(row["head_totals"], total[kind], rtol=1e-5)
    np.testing.assert_allclose(row["proportions"], onto[kind] / total[kind][:, None], atol=2e-6)
    sim = np.array([[np.nan if x is None else x for x in r] for r in row["similarity"]])
    assert np.allclose(np.diag(sim), 1.0)
    assert row["r_offdiagonal"] is None or -1 <= row["r_offdiagonal"] <= 1


def test_aa_similarity_config_errors(runs, tmp_path):
  with pytest.raises(UserError, match="--split must be train, valid, test or ood"):
    aa_similarity.SimilarityConfig(run="x", split="dev")
  with pytest.raises(UserError, match=r"--min-attention must be in \[0, 1\)"):
    aa_similarity.SimilarityConfig(run="x", min_attention=1.0)
  with pytest.raises(UserError, match="no 'ood' split"):
    aa_similarity.run(aa_similarity.SimilarityConfig(run=runs["u_exact"], split="ood"),
                      progress=False)


def test_command_lines(runs, fasta_file, tmp_path, capsys):
  out = str(tmp_path / "maps.json")
  assert cli.main(["attention-maps", "--run", runs["b_performer_softmax"], "--fasta", fasta_file,
                   "--accession", "P00002", "--out", out]) == 0
  printed = capsys.readouterr().out
  assert "mean TV from exact softmax" in printed and "figure attention-maps --input" in printed
  assert os.path.exists(out) and os.path.exists(out[:-5] + ".npz")
  out = str(tmp_path / "aa.json")
  assert cli.main(["aa-similarity", "--run", runs["u_exact"], "--sequences", "3", "--out", out,
                   "--min-attention", "0.05"]) == 0
  printed = capsys.readouterr().out
  assert "exact: Pearson r with BLOSUM62" in printed and "figure aa-similarity" in printed
  assert cli.main(["attention-maps", "--run", runs["u_exact"], "--fasta", fasta_file,
                   "--accession", "NOPE", "--out", str(tmp_path / "n.json")]) == 2
  assert "performer attention-maps: error: " in capsys.readouterr().err


@pytest.mark.slow
def test_maps_of_a_really_trained_performer(data, fasta_file, tmp_path):
  configurables.parse(testlib.gin("gin/mini/trembl_b_performer_softmax.gin"),
                      [f"DataConfig.path = '{data}'", *TINY, FEATURES, "TrainConfig.steps = 3",
                       "TrainConfig.eval_every = 3", "TrainConfig.checkpoint_every = 3",
                       "TrainConfig.eval_batches = 1"])
  loop.run(configurables.resolve(), str(tmp_path / "run"), progress=False)
  record, arrays = _maps({"run": str(tmp_path / "run")}, "run", fasta_file, tmp_path)
  assert all(r["own_matrix_check"] < 1e-5 for r in record["rows"])
  np.testing.assert_allclose(arrays["favor"].sum(-1), 1.0, atol=2e-6)
