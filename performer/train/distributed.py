"""Joining the processes of a multi-host job, and printing so that their logs stay apart.

`initialize` must run before any JAX computation; a single process needs none of this."""

import dataclasses
import math
import os
import sys
import threading

import jax
import tqdm

from performer.errors import UserError
from performer.flags import flag


DEFAULT_TIMEOUT = 300  # seconds, JAX's own default


@dataclasses.dataclass(frozen=True)
class ClusterFlags:
  """One process of a multi-host job: the arguments of `initialize` as command-line flags."""
  coordinator: str | None = flag(
      None, "join a multi-process job (jax.distributed): the address of process 0's coordinator, "
      "with --num-processes and --process-id; or 'auto' under SLURM, Open MPI or on a TPU pod, "
      "which say all three (docs/training.md: Running on a cluster)", metavar="HOST:PORT|auto",
      shown="one process")
  num_processes: int | None = flag(None, "processes in the job")
  process_id: int | None = flag(None, "this process's index, from 0")
  init_timeout: float = flag(DEFAULT_TIMEOUT, "how long to wait for every process of the job to "
                             "connect before a one-line error, in seconds (JAX's)",
                             metavar="SECONDS")


def initialize(coordinator=None, num_processes=None, process_id=None, timeout=DEFAULT_TIMEOUT):
  """Connects this process to the others of its job (jax.distributed.initialize).

  Args:
    coordinator: "HOST:PORT" of process 0's coordination service (then
      num_processes and process_id are required); "auto" to take all three
      from the cluster's environment as JAX does (SLURM, Open MPI, TPU pods);
      None or "" for a single process (nothing happens).
    timeout: seconds to wait for every process of the job to connect. Past
      it the process prints a one-line error and exits with status 2 (JAX
      itself would abort with a C++ stack trace, from inside a call that
      Python cannot interrupt).

  Raises:
    UserError: missing, malformed or inconsistent values, or a failed connection.
  """
  if not 0 < timeout < math.inf:
    raise UserError(f"--init-timeout must be a finite number of seconds > 0, got {timeout}")
  if not coordinator:
    if num_processes is not None or process_id is not None:
      raise UserError("--num-processes and --process-id need --coordinator HOST:PORT")
    return
  if coordinator == "auto":
    if num_processes is not None or process_id is not None:
      raise UserError("--coordinator auto takes the process count and id from the cluster; "
                      "drop --num-processes and --process-id")
    kwargs = {}
  else:
    host, sep, port = coordinator.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
      raise UserError(f"--coordinator {coordinator!r} is not HOST:PORT with a port in 1-65535 "
                      "(or 'auto')")
    if num_processes is None or process_id is None:
      raise UserError(f"--coordinator {coordinator} needs --num-processes and --process-id")
    if num_processes < 1:
      raise UserError(f"--num-processes must be >= 1, got {num_processes}")
    if not 0 <= process_id < num_processes:
      raise UserError(f"--process-id {process_id} must be in [0, --num-processes "
                      f"{num_processes})")
    kwargs = dict(coordinator_address=coordinator, num_processes=num_processes,
                  process_id=process_id)
  jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU devices talk over TCP
  watchdog = threading.Timer(timeout, _give_up, (coordinator, timeout))
  watchdog.daemon = True
  watchdog.start()
  try:  # JAX's own timeout comes later: ours gives the error
    jax.distributed.initialize(**kwargs, initialization_timeout=int(timeout) + 60)
  except (RuntimeError, ValueError) as e:
    raise UserError(f"--coordinator {coordinator}: {str(e).strip().splitlines()[0]}") from None
  finally:
    watchdog.cancel()


def _give_up(coordinator, timeout):
  """The watchdog of `initialize`: the main thread is stuck in C++, so leave from here."""
  print(f"performer: error: --coordinator {coordinator}: the job's processes did not all connect "
        f"within {timeout:g} s (--init-timeout); start every process with the same "
        "--coordinator and --num-processes, each with its own --process-id", file=sys.stderr,
        flush=True)
  os._exit(2)  # pylint: disable=protected-access


def say(message, *, file=None):
  """print(message), prefixed with "[process i/N]" when several processes share one log."""
  if jax.process_count() > 1:
    message = f"[process {jax.process_index()}/{jax.process_count()}] {message}"
  print(message, file=file or sys.stdout, flush=True)


def progress(desc, total, *, initial=0, unit="it", enabled=True):
  """A tqdm bar on stderr, shown by process 0 alone (`enabled` False: none).

  Stderr that is not a terminal (a log file) gets a line every 30 s rather
  than every 0.1 s.
  """
  every = {} if sys.stderr.isatty() else dict(mininterval=30, maxinterval=30)
  return tqdm.tqdm(desc=desc, total=total, initial=initial, unit=unit,
                   disable=not enabled or jax.process_index() > 0, **every)
