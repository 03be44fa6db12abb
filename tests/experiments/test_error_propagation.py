"""error-propagation on a tiny real run: numpy-checked numbers, orderings, exact control, errors."""

import contextlib
import io
import itertools
import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

from performer import cli, configurables
from performer.data import pipeline, vocab
from performer.errors import UserError
from performer.experiments import error_propagation, results
from performer.train import trained
from performer.train import state as state_lib
from performer.train.checkpoint import Checkpoints
import testlib

# Sequence 4 of the sample's test split has 45 residues: padding at L = 64.
TINY = ["DataConfig.seq_len = 64", "ModelConfig.num_layers = 2"]  # over tests/tiny.gin
# --seed 1: the init setting's parameters differ from the run's (TrainConfig.seed 0).
SMALL = dict(split="test", sequences=6, batch_size=4, draws=3, init_layers=3, seed=1)


def _workdir(folder, data, config):
  """A `performer train` workdir of `config` on `data`, saved at initialisation: config.json and
  checkpoint 1 as the loop writes them (training would only add a minute of compiling)."""
  configurables.parse(testlib.gin(config), [f"DataConfig.path = '{data}'", *TINY])
  cfg = configurables.resolve()
  model, optimizer = state_lib.build(cfg)
  folder.mkdir()
  (folder / "config.json").write_text(json.dumps(cfg.to_json()))
  with Checkpoints(str(folder / "checkpoints")) as ckpt:
    ckpt.save(1, model, optimizer, {"step": 1})
  return str(folder)



@pytest.fixture(scope="module", name="run_dir")
def fixture_run_dir(data, tmp_path_factory):
  """A 2-layer exact (U) model on the shipped sample."""
  return _workdir(tmp_path_factory.mktemp("ep") / "run", data, "gin/mini/trembl_u_exact.gin")


@pytest.fixture(scope="module", name="result")
def fixture_result(run_dir, tmp_path_factory):
  """The command line's run at m = 2 and 512 (d = 8): its rows and printed lines.

  --init-layers 2, as deep as the run, so that both settings share compiled programs
  (test_exact_against_exact_is_zero checks another depth)."""
  out = tmp_path_factory.mktemp("ep_out") / "sub" / "ep.json"
  argv = ["error-propagation", "--run", run_dir, "--split", "test", "--sequences", "6",
          "--batch-size", "4", "--features", "2,512", "--draws", "3", "--init-layers", "2",
          "--seed", "1", "--out", str(out)]
  printed = io.StringIO()
  with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
    assert cli.main(argv) == 0
  return json.loads(out.read_text()), printed.getvalue(), out


def _row(rows, setting, quantity, m, layer):
  (row,) = [r for r in rows if (r["setting"], r["quantity"], r["m"], r["layer"])
            == (setting, quantity, m, layer)]
  return row


def test_writes_rows_and_prints_the_table(result):
  record, printed, out = result
  rows = record["rows"]
  assert record["experiment"] == "error_propagation" and record["config"]["draws"] == 3
  assert len(rows) == 2 * 2 * 3 * 2  # settings x m x quantities x layers
  for row in rows:
    assert len(row["errors"]) == row["draws"] == 3
    assert row["error_min"] <= row["error_mean"] <= row["error_max"]
    assert row["error_mean"] == pytest.approx(np.mean(row["errors"]))
    assert row["sequences"] == 6 and row["tokens"] == 5 * 64 + 45  # 6 sequences, one padded
  assert "m=2" in printed and "m=512" in printed and "top-1 same" in printed
  assert f"draw it with: performer figure error-propagation --input {out}" in printed
  assert not list(out.parent.glob(".tmp-*"))


def _rel(a, b, weights):
  """Relative Frobenius error of a against b over the weighted positions (numpy, float64)."""
  a, b = (np.asarray(x, np.float64).reshape(*weights.shape, -1) for x in (a, b))
  return np.sqrt(np.sum(weights[..., None] * (a - b) ** 2) / np.sum(weights[..., None] * b ** 2))


def _softmax(z):
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _favor_numpy(q, k, v, W, mask):
  """Causal FAVOR+ (positive features) in numpy: q, k, v [B, L, H, d]; W [m, d]."""
  q, k, v, W = (np.asarray(x, np.float64) for x in (q, k, v, W))
  d = q.shape[-1]
  def phi(x):  # Lemma 1 without the 1/sqrt(m), which the normaliser cancels
    x = x * d ** -0.25
    return np.exp(x @ W.T - np.sum(x ** 2, -1, keepdims=True) / 2)

  kernel = np.einsum("bihm,bjhm->bhij", phi(q), phi(k))  # [B, H, L, L]
  kernel = kernel * np.tril(np.ones(kernel.shape[-2:])) * np.asarray(mask)[:, None, None, :]
  return np.einsum("bhij,bjhd->bihd", kernel, v) / kernel.sum(-1).transpose(0, 2, 1)[..., None]


def _softmax_numpy(q, k, v, mask):
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  logits = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(q.shape[-1])
  allowed = np.tril(np.ones(logits.shape[-2:], bool)) & np.asarray(mask)[:, None, None, :]
  p = np.exp(np.where(allowed, logits - logits.max(-1, keepdims=True), -np.inf))
  return np.einsum("bhij,bjhd->bihd", p / p.sum(-1, keepdims=True), v)


def test_errors_match_an_independent_computation(result, run_dir):
  rows = result[0]["rows"]
  m, draw = 512, 1
  # The Performer built the other way: the run's config with another attention, then the
  # checkpoint's parameters copied in.
  cfg, exact, _ = trained.load(run_dir)
  favor_cfg = dataclasses.replace(cfg, model=dataclasses.replace(
      cfg.model, attention="performer_softmax",
      attention_options={"num_features": m, "seed": 1 + draw}))
  favor_model, _ = state_lib.build(favor_cfg)
  with Checkpoints(os.path.join(run_dir, "checkpoints")) as ckpt:
    ckpt.load_params(favor_model)
  favor_model.eval()
  data = pipeline.batches(cfg.data, "test", causal=True)
  batches = list(itertools.islice(data.eval_batches(), 2))  # the run's batches of 4: keep 6
  inputs = np.concatenate([b["inputs"] for b in batches])[:6]
  mask = inputs != vocab.PAD
  weights = mask.astype(np.float64)
  h_exact = exact.hidden_states(inputs, mask)
  h_favor = favor_model.hidden_states(inputs, mask)
  for layer in (1, 2):
    assert _row(rows, "trained", "hidden", m, layer)["errors"][draw] == pytest.approx(
        _rel(h_favor[layer], h_exact[layer], weights), rel=1e-4)
  p_exact, p_favor = (_softmax(np.asarray(model(inputs, mask), np.float64))
                      for model in (exact, favor_model))
  assert _row(rows, "trained", "output", m, 2)["errors"][draw] == pytest.approx(
      _rel(p_favor, p_exact, weights), rel=1e-4)
  agree = np.sum(weights * (p_favor.argmax(-1) == p_exact.argmax(-1))) / weights.sum()
  assert _row(rows, "trained", "output", m, 2)["top1_agreements"][draw] == pytest.approx(agree)
  # Block 2's attention alone on the exact model's input to it, in numpy from q, k, v and W.
  q, k, v = exact.blocks[1].heads(h_exact[1])
  W = favor_model.blocks[1].attn.W[...]
  assert _row(rows, "trained", "attention", m, 2)["errors"][draw] == pytest.approx(
      _rel(_favor_numpy(q, k, v, W, mask), _softmax_numpy(q, k, v, mask), weights), rel=1e-3)


def test_more_features_give_smaller_errors(result):
  rows = result[0]["rows"]
  for setting, layers in (("trained", 2), ("init", 2)):
    for quantity in ("hidden", "attention", "output"):
      for layer in range(1, layers + 1):
        small, large = (np.median(_row(rows, setting, quantity, m, layer)["errors"])
                        for m in (2, 512))
        # Medians over the draws: exp(w.x) is heavy-tailed at these norms, so a draw can be
        # an outlier, and the typical error falls more slowly than 1/sqrt(m) (measured
        # ratios 0.29 to 0.46, where sqrt(2/512) would be 0.06).
        assert large < 0.6 * small, (setting, quantity, layer)


def test_exact_against_exact_is_zero(run_dir, tmp_path):
  cfg = error_propagation.ErrorPropagationConfig(run=run_dir, attention="exact", features=(4,),
                                                 **{**SMALL, "draws": 2})
  rows = results.main(error_propagation, cfg, str(tmp_path / "control.json"),
                      progress=False)[0].rows
  assert len(rows) == 2 * 3 + 3 * 3  # trained 2 layers, init --init-layers 3
  assert {r["num_layers"] for r in rows if r["setting"] == "init"} == {3}
  assert all(r["errors"] == [0.0, 0.0] for r in rows)
  assert all(r["top1_agreement_min"] == 1.0 for r in rows if r["quantity"] == "output")


def test_refuses_runs_without_checkpoints_or_config(run_dir, tmp_path):
  untrained = tmp_path / "untrained"
  untrained.mkdir()
  shutil.copy(os.path.join(run_dir, "config.json"), untrained / "config.json")
  for folder, message in ((untrained, "no checkpoints/ folder; train it first"),
                          (tmp_path, "no config.json")):
    cfg = error_propagation.ErrorPropagationConfig(run=str(folder), **SMALL)
    with pytest.raises(UserError, match=message):
      results.main(error_propagation, cfg, str(tmp_path / "x.json"), progress=False)
  assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("flags, message", [
    (["--features", "0"], "--features must be counts m >= 1"),
    (["--features", "8,8"], "argument --features: 8 is given twice in '8,8'"),
    (["--split", "train"], "--split 'train': choose from valid, test, ood"),
    (["--draws", "0"], "--draws must be an integer >= 1"),
    (["--sequences", "-1"], "--sequences must be an integer >= 1"),
    (["--init-layers", "0"], "--init-layers must be an integer >= 1"),
    (["--settings", "trained,final"], "--settings 'final': choose from trained, init"),
    (["--settings", ","], "argument --settings: expected comma-separated values, got an empty "
                          "item in ','"),
    (["--attention", "linformer"], "--attention 'linformer': choose from performer_softmax, exact"),
    (["--projection", "gauss"], "--projection 'gauss': choose from iid, orthogonal"),
    (["--seed", "-2"], "--seed must be >= 0"),
    (["--out", ""], "output path is empty"),
])
def test_bad_flags_are_one_line_errors(flags, message, run_dir, capsys):
  try:
    status = cli.main(["error-propagation", "--run", run_dir, *flags])
  except SystemExit as e:  # argparse's own errors exit from the parser
    status = e.code
  assert status == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("performer error-propagation: error: ") and message in err[-1]


def test_refuses_a_model_that_is_not_exact(data, tmp_path):
  run = _workdir(tmp_path / "performer", data, "gin/mini/trembl_u_performer_softmax.gin")
  cfg = error_propagation.ErrorPropagationConfig(run=run, **SMALL)
  with pytest.raises(UserError, match="a model with attention 'performer_softmax'; error "
                     "propagation compares a Transformer with FAVOR on its weights"):
    results.main(error_propagation, cfg, str(tmp_path / "x.json"), progress=False)
