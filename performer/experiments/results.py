"""Writing experiment results: one JSON file per run, stamped and atomic."""

import dataclasses
import datetime
import json
import platform

import jax
import numpy as np

from performer.atomic import atomic_path

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
