"""Writing experiment results: one JSON file per run, stamped and atomic."""

import dataclasses
import datetime
import json
import os
import platform
import sys
import time

import jax
import numpy as np

from performer.atomic import atomic_path, check_writable
from performer import flags
from performer.errors import UserError
from performer.flags import flag

SCHEMA_VERSION = 1


def environment():
  """Versions and device of this run, as a JSON-ready dict."""
  import flax  # pylint: disable=import-outside-toplevel
  device = jax.devices()[0]
  return {
      "python": platform.python_version(),
      "jax": jax.__version__,
      "flax": flax.__version__,
      "numpy": np.__version__,
      "backend": jax.default_backend(),
      "device": device.device_kind,
      "device_count": jax.device_count(),
      "machine": platform.machine(),
  }


def write_result(path, experiment, config, rows, *, wall_seconds=None, env=None, extra=None):
  """Writes {schema_version, experiment, config, environment, rows, ...} to path.

  The file appears complete or not at all: it is written under a temporary
  name in the same folder and renamed when done.

  Args:
    path: output file (.json); parent folders are created.
    experiment: experiment name, e.g. "approx_error".
    config: a dataclass or dict, stored as the resolved configuration.
    rows: list of dicts of JSON-serialisable values.
    wall_seconds: optional run time to record.
    env: the environment to record (default `environment()`, which starts
      JAX's backend in this process).
    extra: further top-level fields (a dict of JSON-serialisable values).

  Returns:
    The path written.
  """
  record = {
      "schema_version": SCHEMA_VERSION,
      "experiment": experiment,
      "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "wall_seconds": wall_seconds,
      "config": dataclasses.asdict(config) if dataclasses.is_dataclass(config) else config,
      "environment": environment() if env is None else env,
      "rows": rows,
      **(extra or {}),
  }
  with atomic_path(path) as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
  return path


@dataclasses.dataclass
class Result:
  """What an experiment's `run` returns.

  rows: JSON-ready dicts, one per measurement.
  extra: further top-level fields of the result file.
  env: the environment to record, when the run measured it elsewhere (worker
    processes); None: this process's `environment()`.
  arrays: numpy arrays written to the .npz beside the JSON (named in its
    `arrays` field); None: no .npz.
  """
  rows: list
  extra: dict = dataclasses.field(default_factory=dict)
  env: dict | None = None
  arrays: dict | None = None


def arrays_path(out):
  """The .npz beside a result JSON: maps.json -> maps.npz."""
  return os.path.splitext(out)[0] + ".npz"


def main(experiment, cfg, out, *, progress=True):
  """Runs an experiment module's `run(cfg)` and writes its result file(s) to `out`.

  What every experiment command does: check that `out` can be written before
  any work, time the run, write the JSON (and the .npz of `Result.arrays`)
  atomically.

  Args:
    experiment: a module of performer.experiments (NAME, run).
    cfg: its config dataclass.
    out: the result JSON to write.

  Returns:
    (Result, wall seconds).

  Raises:
    UserError: `out` is not a writable .json path, or any error of the run.
  """
  check_writable(out)
  if not out.endswith(".json"):
    raise UserError(f"--out {out}: give a .json file")
  start = time.perf_counter()
  result = experiment.run(cfg, progress=progress)
  seconds = time.perf_counter() - start
  extra = dict(result.extra)
  if result.arrays is not None:
    with atomic_path(arrays_path(out)) as tmp, open(tmp, "wb") as f:
      np.savez_compressed(f, **result.arrays)
    extra["arrays"] = os.path.basename(arrays_path(out))
  write_result(out, experiment.NAME, cfg, result.rows, wall_seconds=round(seconds, 1),
               env=result.env, extra=extra)
  return result, seconds


def command(name):
  """(FLAGS, main) of the experiment module `name`: every experiment is a command this way.

  The module declares CONFIG (its flags), run, report, NAME, OUT (the default
  --out), FIGURE (what draws it, or None; figure_of(cfg), when present, picks
  by the flags) and, when its model comes from gin
  files, GIN = True. Call at the end of the module, as
  `FLAGS, main = results.command(__name__)`.
  """
  module = sys.modules[name]
  out = dataclasses.make_dataclass(
      "Out", [("out", str, flag(module.OUT, "result JSON"))], frozen=True)
  gin = getattr(module, "GIN", False)
  from performer import configurables  # pylint: disable=import-outside-toplevel

  def run_command(args):
    given = {}
    if gin:
      configurables.parse(args.gin, args.gin_param)
      configurables.check_names_a_model()
      given["run"] = configurables.resolve().to_json()
    cfg = flags.build(module.CONFIG, args, **given)
    result, seconds = main(module, cfg, args.out)
    print("\n".join(module.report(cfg, result)))
    arrays = f" and {arrays_path(args.out)}" if result.arrays is not None else ""
    figure = getattr(module, "figure_of", lambda _: module.FIGURE)(cfg)
    hint = f"; draw it with: {program()} figure {figure} --input {args.out}" if figure else ""
    print(f"wrote {args.out}{arrays} in {seconds:.0f} s{hint}")
  return ((configurables.GinFlags,) if gin else ()) + (module.CONFIG, out), run_command


def program():
  """How the user called us, for "draw it with" hints: sys.argv[0] if it is the performer script."""
  return sys.argv[0] if os.path.basename(sys.argv[0]) == "performer" else "performer"
