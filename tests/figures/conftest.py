"""Small run folders with hand-written numbers, as `performer train` and `eval` leave them."""

import json

import pytest


def write_run(root, name, attention, *, causal, seed=0, test=None, ood=None, metrics=(),
              baseline=(0.095, 17.5), attention_options=None, diverged=None, settings=None,
              num_layers=2):
  """Writes root/name with config.json, metrics.jsonl and eval files; returns the folder as str.

  test, ood: (accuracy, perplexity) of eval_test.json / eval_ood.json, or None for no file.
  metrics: (step, split, accuracy, perplexity, loss) rows.
  attention_options: the config's model.attention_options, or None for none.
  diverged: the step of a diverged.json as train/loop.py writes it, or None for no file.
  settings: the sweep values a plan records (TrainConfig.settings), or None for a run by hand.
  """
  folder = root / name
  folder.mkdir(parents=True)
  (folder / "config.json").write_text(json.dumps(
      {"model": {"attention": attention, "causal": causal, "num_layers": num_layers},
       "train": {"seed": seed, "steps": 20, **({"settings": settings} if settings else {})}}))
  if attention_options is not None:
    config = json.loads((folder / "config.json").read_text())
    config["model"]["attention_options"] = attention_options
    (folder / "config.json").write_text(json.dumps(config))
  if diverged is not None:
    (folder / "diverged.json").write_text(json.dumps(
        {"step": diverged, "last_checkpoint": None, "reason": "non-finite loss nan"}))
  lines = [json.dumps({"step": s, "split": split, "accuracy": a, "perplexity": p, "loss": l})
           for s, split, a, p, l in metrics]
  (folder / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
  for split, numbers in (("test", test), ("ood", ood)):
    if numbers is not None:
      (folder / f"eval_{split}.json").write_text(json.dumps(
          {"accuracy": numbers[0], "perplexity": numbers[1], "loss": 2.5,
           "baseline_accuracy": baseline[0], "baseline_perplexity": baseline[1], "step": 20,
           "tokens": 1000, "split": split}))
  return str(folder)


@pytest.fixture(name="make_run")
def fixture_make_run(tmp_path):
  """write_run under tmp_path/<root> (default runs)."""
  return lambda *args, root="runs", **kwargs: write_run(tmp_path / root, *args, **kwargs)
