"""What the recall figure reads of each run beyond its evals: its row's label, its attention's
state, the row probe, the early stop, the last valid gain, the task's no-binding ceilings, and
the notes they make."""

import json
import os

from performer import attention
from performer.data import mqar
from performer.errors import UserError

CLIMB = 1000  # steps over which a run's last valid gain is read: is it still climbing?
MECHANISM = ("accuracy_favor", "accuracy_exact_rows", "l1", "favor_answer", "exact_answer",
             "favor_max", "exact_max")  # recall_rows.json's numbers, layer 0's for the rows
LABELS = {"exact": "exact softmax", "favor_no_redraw": "FAVOR+ no redraw",
          "favor_iid": "FAVOR+ iid", "hyperbolic": "FAVOR+ hyperbolic", "trig": "trig (SMtrig)",
          "smreg": "SMREG", "favorpp": "FAVOR++ (GERF)", "favorsharp": "FAVOR# (SADERF)",
          "simplex": "FAVOR+ simplex (SimRF)", "relu": "ReLU, random W",
          "relu_deterministic": "ReLU, deterministic",
          "elu_plus_one": "elu+1 (linear)", "taylor": "Taylor (Based)", "reformer": "Reformer",
          "identity": "identity (control)"}


def label(row):
  if row.startswith("favor_m"):
    return f"FAVOR+ m={row.removeprefix('favor_m')}"
  return LABELS.get(row, row)


def row_key(row):
  """Where `row` comes in the study's declared order (plans/recall.py rows, the committed tables'):
  exact, FAVOR+ by m, then LABELS' order; a row of no study last, by name."""
  if row.startswith("favor_m") and row.removeprefix("favor_m").isdigit():
    return (1, int(row.removeprefix("favor_m")), row)
  names = list(LABELS)
  return (0 if row == "exact" else 2, names.index(row) if row in names else len(names), row)


def state_size(run):
  """Floats one attention layer keeps per head and sequence (attention.BackendInfo.state_size),
  with queries and keys of ModelConfig.qk_dim (or the head's width) and values of the head's.

  Raises:
    UserError: a backend that declares no state size.
  """
  model = run.config["model"]
  size = attention.info(run.attention).state_size
  if size is None:
    raise UserError(f"{run.path}: attention {run.attention!r} declares no state size")
  value_dim = model["d_model"] // model["num_heads"]
  return size(attention.options(run.attention, model.get("attention_options")),
              run.config["data"]["seq_len"], model.get("qk_dim") or value_dim, value_dim)


def mechanism(run):
  """{MECHANISM key: value} of a run's recall_rows.json (its first attention layer), or None."""
  try:
    with open(os.path.join(run.path, "recall_rows.json")) as f:
      record = json.load(f)
    return {k: record[k] if k.startswith("accuracy") else record["rows"][0][k] for k in MECHANISM}
  except (OSError, ValueError, KeyError, IndexError, TypeError):
    return None


def stopped_early(run):
  return os.path.isfile(os.path.join(run.path, "stopped_early.json"))


def planned(run):
  """The step a run was evaluated at, or its cap (TrainConfig.steps) when it stopped early:
  runs with the same cap are compared whenever they stopped."""
  return run.config["train"]["steps"] if stopped_early(run) else run.step


def last_gain(run):
  """Valid accuracy (pp) at the run's last eval minus at CLIMB steps before it; None when the
  run stopped early (it reached its target) or is shorter."""
  if stopped_early(run):
    return None
  valid = [(r["step"], r["accuracy"]) for r in run.metrics if r["split"] == "valid"]
  if not valid:
    return None
  last, acc = valid[-1]
  before = [a for step, a in valid if step <= last - CLIMB]
  return 100 * (acc - before[-1]) if before else None


def data_fingerprint(run):
  """The fingerprint of the data `run` trained on (its dataset.json, which archives keep); None
  for a run without one.

  Raises:
    UserError: a dataset.json that cannot be read or holds no fingerprint.
  """
  path = os.path.join(run.path, "dataset.json")
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      fingerprint = json.load(f)["fingerprint"]
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise UserError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
  if not isinstance(fingerprint, dict):
    raise UserError(f"{path}: its fingerprint is not an object")
  return fingerprint


def ceilings(run, splits):
  """{split: mqar.ceilings} of the test splits among `splits` of the MQAR task `run` trained
  on (data_fingerprint); {} for a run without one or on other data than MQAR.

  Raises:
    UserError: a dataset.json that cannot be read, or an MQAR fingerprint with
      unknown options.
  """
  fingerprint = data_fingerprint(run)
  if fingerprint is None:
    return {}
  try:
    task = mqar.from_fingerprint(fingerprint)
  except TypeError as e:  # an option this version does not know
    raise UserError(f"{run.path}/dataset.json: not an MQAR task of this version ({e})") from None
  if task is None:
    return {}
  return {s: mqar.ceilings(task, s) for s in splits
          if s in task.splits and s.startswith("test")}


def ceiling_note(task, split, rules):
  pct = lambda k: f"{100 * rules[k]:.2f}%"
  return (f"{task} {split}: no-binding ceiling {pct('ceiling')} (the r-th query answered "
          f"with the r-th context value {pct('rank_order')}; rules fitted on a query's rank "
          f"among the queries {pct('rank')}, its slot {pct('slot')}, both {pct('rank_slot')}; "
          f"a uniform guess among the context's values {pct('uniform')}; data/mqar.py "
          "ceilings).")


def gate_note(task, gate):
  if gate is None:
    return f"{task}: no gate (needs exact and identity runs with per-sequence test evals)."
  if gate["interval"] is None:
    return f"{task}: gate undecided (needs >= 2 seeds of exact and identity)."
  low, high = (100 * x for x in gate["interval"])
  return (f"{task}: exact beats identity by {100 * gate['difference']:.2f} pp (95% {low:.2f} .. "
          f"{high:.2f}, MDE {100 * gate['mde']:.2f}): "
          f"gate {'passed' if gate['passed'] else 'failed'}.")
