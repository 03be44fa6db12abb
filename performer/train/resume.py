"""Resuming a workdir: only the same run may continue in it.

A resume that changes what the run is stops with an error; how long and how often may change."""

import json
import os
import time

from performer.data import mqar
from performer.errors import UserError

# Fields that may change on resume: how long, how often, where the devices are, what the plan
# calls the run. The data's path may move if the dataset's manifest is the same (same bytes).
MAY_CHANGE = {("train", "steps"), ("train", "log_every"), ("train", "eval_every"),
              ("train", "checkpoint_every"), ("train", "eval_batches"), ("train", "settings")}
MAY_CHANGE_GROUPS = ("mesh",)
# A run a NaN stopped (its workdir holds diverged.json) may resume with a gentler optimizer.
MAY_CHANGE_DIVERGED = {("optim", "learning_rate"), ("optim", "clip_norm"),
                       ("optim", "warmup_steps")}
DIVERGED = "diverged.json"  # divergence.DIVERGED, named here to keep resume free of the model
RESUMES = "resumes.jsonl"
DATASET = "dataset.json"  # the fingerprint of the dataset the run trained on (check_dataset)


def differences(before, after):
  """[(field, before, after)] of two config.json dicts, fields as 'group.name', sorted."""
  out = []
  for group in sorted(set(before) | set(after)):
    old, new = before.get(group) or {}, after.get(group) or {}
    if not isinstance(old, dict) or not isinstance(new, dict):
      if old != new:
        out.append((group, old, new))
      continue
    for name in sorted(set(old) | set(new)):
      if _plain(old.get(name)) != _plain(new.get(name)):
        out.append((f"{group}.{name}", old.get(name), new.get(name)))
  return out


def _plain(value):
  return json.loads(json.dumps(value))  # tuples as lists, as config.json holds them


def check(workdir, cfg, step, *, record=True):
  """Refuses to resume `workdir` at `step` with a Config that is another run; records allowed changes.

  Call before restoring a checkpoint (step > 0). Does nothing when the
  workdir has no config.json (an older run's or an empty one). A run a NaN
  stopped may also change its learning rate, clipping and warm-up. Every process
  of a multi-process run checks; the one with `record` writes resumes.jsonl.

  Raises:
    UserError: naming the first difference in what the run is, its value in
      the workdir and in this config, and how many more there are.
  """
  path = os.path.join(workdir, "config.json")
  try:
    with open(path) as f:
      before = json.load(f)
  except (OSError, ValueError):
    return []
  try:  # a field added since the run was trained reads as its default, as Config.load gives it
    before = type(cfg).from_json(before).to_json()
  except ValueError:
    pass  # not a config this version reads: compared as written
  after = cfg.to_json()
  changes = differences(before, after)
  diverged = os.path.exists(os.path.join(workdir, DIVERGED))
  refused = [c for c in changes if not _may_change(c[0], before, after, diverged)]
  if refused:
    field, old, new = refused[0]
    more = f" (and {len(refused) - 1} more: {', '.join(c[0] for c in refused[1:])})" \
        if len(refused) > 1 else ""
    raise UserError(f"--workdir {workdir} holds another run: {field} is {old!r} there and {new!r} "
                    f"here{more}; resume it with its own config ({path}) or use another --workdir")
  if changes and record:
    with open(os.path.join(workdir, RESUMES), "a") as f:
      f.write(json.dumps({"step": step, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                          "changed": {k: [old, new] for k, old, new in changes}},
                         default=str) + "\n")
  return changes


def _may_change(field, before, after, diverged):
  group, _, name = field.partition(".")
  if (group, name) in MAY_CHANGE or group in MAY_CHANGE_GROUPS:
    return True
  if diverged and (group, name) in MAY_CHANGE_DIVERGED:
    return True
  if field == "data.path":
    return _fingerprint(os.path.join(before["data"]["path"], "manifest.json")) == _fingerprint(
        os.path.join(after["data"]["path"], "manifest.json")) is not None
  return False


def _fingerprint(path):
  """The "fingerprint" dict of a manifest.json or DATASET file, or None."""
  try:
    with open(path) as f:
      fingerprint = json.load(f).get("fingerprint")
  except (OSError, ValueError, AttributeError):
    return None
  return fingerprint if isinstance(fingerprint, dict) else None


def dataset_record(path):
  """{DATASET: text}: the fingerprint of the dataset at `path`, for the workdir (train writes it)."""
  return {DATASET: json.dumps({"path": path, "fingerprint": _fingerprint(
      os.path.join(path, "manifest.json"))}, indent=1, sort_keys=True)}


def check_dataset(workdir, path):
  """Refuses to resume or evaluate `workdir` on a dataset at `path` other than the one it trained on.

  A folder re-prepared under the same path (another V, seed or source)
  would otherwise be read by a model whose embeddings do not fit it: NaN
  losses, or a silently different test set. Does nothing for a workdir that
  recorded no dataset (trained before DATASET existed).

  Raises:
    UserError: naming the first field of the fingerprint that differs.
  """
  before = _fingerprint(os.path.join(workdir, DATASET))
  if before is None:
    return
  if before.get("kind") == mqar.KIND:  # generator options added since read as they were
    before = {**mqar.LEGACY, **before}
  now = _fingerprint(os.path.join(path, "manifest.json")) or {}
  changed = [k for k in sorted(set(before) | set(now))
             if _plain(before.get(k)) != _plain(now.get(k))]
  if changed:
    k = changed[0]
    raise UserError(f"{path} holds another dataset than {workdir} trained on: {k} is "
                    f"{now.get(k)!r} there and was {before.get(k)!r} "
                    f"({os.path.join(workdir, DATASET)}); prepare it again as it was, or point "
                    "DataConfig.path at that dataset")
