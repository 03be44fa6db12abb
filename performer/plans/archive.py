"""`performer archive`: a run's compact outputs, kept where they can be committed, and put back.

`restore` copies archived runs back, so a fresh machine trains only what is left."""

import dataclasses
import fnmatch
import glob
import json
import os
import shutil
import tempfile

from performer.atomic import writable_folder
from performer.errors import UserError
from performer.flags import flag, folder
from performer.plans import state

# dataset.json: the data's fingerprint (an MQAR run's task); stopped_early.json: where an early
# stop ended the run (train/early_stop.py); recall_rows.json: experiments/recall_rows.py's.
FILES = ("config.json", "config.gin", "metrics.jsonl", "diverged.json", "dataset.json",
         "stopped_early.json", "recall_rows.json")
PATTERNS = ("eval_*.json", "eval_*_sequences.npz")
CHECKPOINTS = "checkpoints"
STAMPS = "stamps"
# What save() writes last: marks the folder as an archive, listing its entries, so that
# --replace replaces an archive and never a training workdir or a folder of someone's files.
MANIFEST = "archive.json"
FORMAT = "performer-archive-v1"

NAME = "archive"  # the command
SUMMARY = "copy runs' compact outputs (configs, metrics, evals) into a folder to commit"
DESCRIPTION = ("Copies each run folder's config, metrics.jsonl, diverged.json and eval files (with "
               "their per-sequence sums), and the plan stamps of the jobs that made it, into "
               "DEST/<run name>/: what every table and figure reads, small enough to commit. "
               "`performer reproduce` archives each Fig. 6 run this way and restores archived "
               "runs on a fresh machine instead of training them again.")


@dataclasses.dataclass(frozen=True)
class Flags:
  """The flags of `performer archive`."""
  runs: tuple[str, ...] = flag(help="run folders (`performer train` workdirs)", positional=True,
                               nargs="+", metavar="RUN")
  to: str = flag(help="folder that receives one <run name>/ per run",
                 metavar="DEST", parse=folder)
  checkpoint: bool = flag(False, "also copy the last checkpoint (for runs that others start "
                                 "from)")
  replace: bool = flag(False, "replace archives already in DEST (by default an existing "
                              "DEST/<run name> is an error; a folder that is not an archive, "
                              "e.g. a training workdir, always is)")
  jobs: tuple[str, ...] = flag((), "plan jobs whose stamps go with the run (default: the run's "
                                   "train job, its _eval and its _rows probe)", nargs="+",
                                metavar="JOB")


FLAGS = (Flags,)


def main(args):
  """`performer archive`: archives each run, then names what it wrote.

  Every run and destination is checked before anything is written.
  """
  dests = {}
  for run in args.runs:
    dest = os.path.join(args.to, os.path.basename(os.path.realpath(run)))  # `.` is a name too
    if dest in dests:
      raise UserError(f"{dests[dest]} and {run} would both be archived as {dest}; archive them "
                      f"into different folders")
    check(run, dest, checkpoint=args.checkpoint, replace=args.replace)
    missing = [job for job in args.jobs if not _stamp_path(run, job)]
    if missing:
      raise UserError(f"{run}: no stamp of job {missing[0]} (looked for "
                      f"{state.stamp_path(_runs_folder(run), missing[0])} and "
                      f"{os.path.join(run, STAMPS, missing[0] + '.json')})")
    dests[dest] = run
  writable_folder(args.to)
  for dest, run in dests.items():
    name = os.path.basename(dest)
    save(run, dest, checkpoint=args.checkpoint, replace=args.replace,
         jobs=args.jobs or stamped_jobs(name))
    print(f"wrote {dest} ({_size(dest) / 1e3:.0f} KB)")


def stamped_jobs(name):
  """The plan jobs whose stamps an archive of run `name` keeps by default: its train job and
  the jobs that write into its folder (the eval, recall's row probe), so a restored run's
  outputs count as done; a probe redone on a restored run would find no checkpoint."""
  return (name, f"{name}_eval", f"{name}_rows")


def check(workdir, dest, *, checkpoint=False, replace=False):
  """Raises UserError unless `save` may archive `workdir` into `dest`.

  Raises:
    UserError: `workdir` is not a run folder (no config.json), or has no
      checkpoint while `checkpoint` asks for one; `dest` is `workdir`, lies
      inside it or holds it (whatever `replace` says: writing it would
      delete the run); `dest` exists and `replace` is False, or is no folder,
      or is not an archive (`not_an_archive`: a training workdir, a user's
      folder), which `replace` never deletes.
  """
  if not os.path.isdir(workdir):
    raise UserError(f"{workdir}: no such folder")
  if not os.path.isfile(os.path.join(workdir, "config.json")):
    raise UserError(f"{workdir}: no config.json; is it a `performer train` workdir?")
  if checkpoint:
    _last_checkpoint(workdir)
  run, out = os.path.realpath(workdir), os.path.realpath(dest)
  if os.path.commonpath([run, out]) in (run, out):
    where = ("is the run" if run == out else "lies inside the run"
             if os.path.commonpath([run, out]) == run else "holds the run")
    raise UserError(f"cannot archive {workdir} as {dest}: that {where}; give --to another "
                    f"folder")
  if os.path.islink(dest) or os.path.lexists(dest) and not os.path.isdir(dest):
    raise UserError(f"{dest} exists and is not a folder; move it away")
  if os.path.lexists(dest) and not replace:
    raise UserError(f"{dest} exists; pass --replace to replace it")
  why = os.path.isdir(dest) and not_an_archive(dest)
  if why:
    raise UserError(f"{dest} is not an archive ({why}); --replace replaces only archives: move "
                    f"it away or give --to another folder")


def not_an_archive(folder):
  """Why `folder` is no archive that `save` may replace, or None when it is one (or empty).

  An archive is what `save` wrote: its MANIFEST lists every entry, and it
  holds no other. One written before MANIFEST existed (this repository's
  results/runs/) is known by its shape: only files `save` copies (FILES,
  PATTERNS), a stamps/ folder (a workdir never has one: the plan keeps its
  stamps in <runs>/.plan/) and at most one checkpoint; a training workdir
  has tensorboard/ and, once it has saved twice, several checkpoints.

  Returns:
    None, or a reason for an error message (str).
  """
  entries = sorted(os.listdir(folder))
  if not entries:
    return None
  if MANIFEST in entries:
    try:
      with open(os.path.join(folder, MANIFEST)) as f:
        manifest = json.load(f)
      listed = set(manifest["entries"]) if manifest.get("format") == FORMAT else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
      listed = None
    if listed is None:
      return f"its {MANIFEST} is not the manifest `performer archive` writes"
    other = [e for e in entries if e not in listed]
    return f"it holds {_some(other)}, which no archive wrote" if other else None
  if "tensorboard" in entries:
    return "it holds tensorboard/: a training workdir"
  steps = _steps(os.path.join(folder, CHECKPOINTS))
  if len(steps) > 1:
    return f"it holds {len(steps)} checkpoints: a training workdir (an archive keeps one)"
  other = [e for e in entries if not _archived(folder, e)]
  if other:
    return f"it holds {_some(other)}, which `performer archive` does not write"
  if STAMPS not in entries:
    return f"it has neither {MANIFEST} nor the {STAMPS}/ of an archive"
  return None


def _archived(folder, entry):
  """Whether `entry` of `folder` is one that `save` writes (before MANIFEST existed too)."""
  path = os.path.join(folder, entry)
  if os.path.islink(path):
    return False
  if entry in (STAMPS, CHECKPOINTS):
    return os.path.isdir(path)
  return os.path.isfile(path) and (entry in FILES or any(fnmatch.fnmatch(entry, p)
                                                         for p in PATTERNS))


def _some(names):
  """'a', 'a and b' or 'a, b and 3 more': entries named in a one-line error."""
  shown = ", ".join(names[:2])
  return shown if len(names) <= 2 else f"{shown} and {len(names) - 2} more"


def save(workdir, dest, *, checkpoint=False, replace=False, jobs=()):
  """Copies the compact outputs of `workdir` (and the stamps of `jobs`) to folder `dest`.

  The copy is made beside `dest` and renamed into place (an archive it
  replaces is renamed away first, then removed), so `dest` is always a
  whole archive, the old or the new, or absent. MANIFEST, written last,
  lists what the archive holds: what `check` lets `replace` replace.

  Raises:
    UserError: see `check`; a copy or rename that fails (a full disk, a
      busy DEST).
  """
  check(workdir, dest, checkpoint=checkpoint, replace=replace)
  names = [f for f in FILES if os.path.isfile(os.path.join(workdir, f))]
  names += sorted({os.path.basename(p) for pattern in PATTERNS
                   for p in glob.glob(os.path.join(workdir, pattern))})
  last = _last_checkpoint(workdir) if checkpoint else None
  parent = os.path.dirname(os.path.abspath(dest))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(dir=parent, prefix=".tmp-")
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's folder is private; an archive is not
  try:
    for f in names:
      shutil.copy2(os.path.join(workdir, f), os.path.join(tmp, f))
    if last:
      shutil.copytree(last, os.path.join(tmp, CHECKPOINTS, os.path.basename(last)))
    for job in jobs:
      stamp = _stamp_path(workdir, job)
      if stamp:
        os.makedirs(os.path.join(tmp, STAMPS), exist_ok=True)
        shutil.copy2(stamp, os.path.join(tmp, STAMPS, f"{job}.json"))
    with open(os.path.join(tmp, MANIFEST), "w") as f:
      json.dump({"format": FORMAT, "entries": sorted([*os.listdir(tmp), MANIFEST])}, f,
                indent=1)
      f.write("\n")
    _swap_in(tmp, dest)
  except OSError as e:  # a full disk, a DEST that is busy (a mount point) or not ours
    shutil.rmtree(tmp, ignore_errors=True)
    raise UserError(f"cannot archive {workdir} as {dest}: {e.strerror or e}") from None
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return dest


def _runs_folder(workdir):
  return os.path.dirname(os.path.normpath(workdir))


def _stamp_path(workdir, job):
  """The stamp of `job` for run `workdir`: the plan's, else the one an archive holds (an
  archive archived again keeps its stamps); None if neither exists."""
  for path in (state.stamp_path(_runs_folder(workdir), job),
               os.path.join(workdir, STAMPS, f"{job}.json")):
    if os.path.isfile(path):
      return path
  return None


def _swap_in(tmp, dest):
  """Renames folder `tmp` to `dest`; an existing `dest` is renamed away first, then removed."""
  if not os.path.lexists(dest):
    os.rename(tmp, dest)
    return
  old = f"{tmp}-old"  # a free name, as mkdtemp's `tmp` is
  os.rename(dest, old)
  try:
    os.rename(tmp, dest)
  except BaseException:
    os.rename(old, dest)
    raise
  shutil.rmtree(old, ignore_errors=True)  # the new archive is in place whatever is left here


def restorable(plan):
  """What `restore` would bring back, reading only: [(train job, archive job, folder, stamps)].

  The plan's archive job of train job T is named T_archive and its first
  output is <archive>/config.json. T is restorable when its run folder has
  no config.json and the archived stamp of T is done and carries the plan's
  fingerprint of T; `stamps` holds the archived stamps whose fingerprints
  match the plan's ({job name: stamp}: T's, its eval's).
  """
  out = []
  for job, archive_job, source, stamps in _archived_runs(plan):
    if stamps[job.name].get("state") == "done":  # else unfinished: `resumable`
      matching = {n: s for n, s in stamps.items()
                  if n in plan.fingerprints and s.get("fingerprint") == plan.fingerprints[n]}
      out.append((job, archive_job, source, matching))
  return out


def resumable(plan):
  """Unfinished runs archived with their last checkpoint (`archive --checkpoint` of a run still
  training, to carry it to another machine): [(train job, folder)] whose archived train stamp
  carries the plan's fingerprint of the job but no end, and whose run folder has no
  config.json. `restore` copies them back without stamps, so the job runs again and
  `performer train` resumes from the checkpoint."""
  return [(job, source) for job, _, source, stamps in _archived_runs(plan)
          if stamps[job.name].get("state") != "done"
          and os.path.isdir(os.path.join(source, CHECKPOINTS))]


def _archived_runs(plan):
  """(train job, archive job, folder, archived stamps) of each train job T of the plan whose
  run folder has no config.json and whose archive holds a stamp of T with the plan's
  fingerprint of T."""
  for archive_job in plan.jobs:
    name = archive_job.name.removesuffix("_archive")
    if archive_job.kind != "archive" or name not in plan.fingerprints:
      continue
    job, source = plan[name], os.path.dirname(archive_job.outputs[0])
    if not os.path.isdir(source) or os.path.exists(os.path.join(job.workdir, "config.json")):
      continue
    stamps = _stamps(source)
    if stamps.get(job.name, {}).get("fingerprint") == plan.fingerprints[job.name]:
      yield job, archive_job, source, stamps


def preview(plan):
  """The plan with the jobs `restore` would bring back in Plan.restorable; nothing is copied.

  --status and dry runs show the plan as a run would find it after
  restoring, without writing to the runs folder.
  """
  marks = {}
  for _, archive_job, source, stamps in restorable(plan):
    for name in (*stamps, archive_job.name):
      marks[name] = f"archived in {source}; a run copies it back first"
  return dataclasses.replace(plan, restorable=marks)


def restore(plan, say=print):
  """Copies the `restorable` runs of `plan` back into their run folders, with their stamps,
  then the `resumable` ones, without.

  The matching stamps (the train's, its eval's) come back and the archive
  job is marked done. Returns the names of the restored and resumed runs.
  """
  restored = []
  for job, archive_job, source, stamps in restorable(plan):
    _copy_back(plan, source, job.workdir)
    for name, stamp in stamps.items():
      state.write(plan.ctx.runs, name, **{k: v for k, v in stamp.items()
                                          if k not in ("time", "host", "pid", "detail")},
                  detail=f"restored from {source}")
    state.write(plan.ctx.runs, archive_job.name, state="done", detail="restored",
                fingerprint=plan.fingerprints[archive_job.name])
    restored.append(job.name)
  if restored:
    say(f"restored {len(restored)} finished run(s) from their archives: {', '.join(restored)}")
  resumed = []
  for job, source in resumable(plan):
    _copy_back(plan, source, job.workdir)
    resumed.append(job.name)
  if resumed:
    say(f"copied back {len(resumed)} unfinished run(s) with their last checkpoint, to resume: "
        f"{', '.join(resumed)}")
  return restored + resumed


def _copy_back(plan, source, workdir):
  """An archive's files (its checkpoint too) into run folder `workdir`; not its stamps."""
  writable_folder(plan.ctx.runs)  # a clear error, not a traceback, for a bad --runs
  os.makedirs(workdir, exist_ok=True)
  for f in os.listdir(source):
    path = os.path.join(source, f)
    if f == CHECKPOINTS:
      shutil.copytree(path, os.path.join(workdir, CHECKPOINTS), dirs_exist_ok=True)
    elif f not in (STAMPS, MANIFEST):  # a run folder marked as an archive could be replaced
      shutil.copy2(path, os.path.join(workdir, f))


def _stamps(source):
  out = {}
  for path in glob.glob(os.path.join(source, STAMPS, "*.json")):
    try:
      with open(path) as f:
        out[os.path.basename(path)[:-len(".json")]] = json.load(f)
    except (OSError, ValueError):
      continue
  return out


def _steps(folder):
  """The step folders' names of a checkpoints/ folder ([] without one)."""
  return [d for d in os.listdir(folder) if d.isdigit()] if os.path.isdir(folder) else []


def _last_checkpoint(workdir):
  folder = os.path.join(workdir, CHECKPOINTS)
  steps = _steps(folder)
  if not steps:
    raise UserError(f"{workdir}: no checkpoint to archive")
  return os.path.join(folder, max(steps, key=int))


def _size(folder):
  return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder)
             for f in files)
