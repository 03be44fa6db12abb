"""Joining the processes of a multi-host job, and printing so that their logs stay apart.

`initialize` must run before any JAX computation: afterwards jax.devices()
lists the devices of every process, and each jit runs on all of them (the
mesh in sharding.py spans them). One process needs none of this.
"""

import sys

import jax

from performer.errors import UserError


def initialize(coordinator=None, num_processes=None, process_id=None):
  """Connects this process to the others of its job (jax.distributed.initialize).

  Args:
    coordinator: "HOST:PORT" of process 0's coordination service (then
      num_processes and process_id are required); "auto" to take all three
      from the cluster's environment as JAX does (SLURM, Open MPI, TPU pods);
      None or "" for a single process (nothing happens).

  Raises:
    UserError: missing or inconsistent values, or a failed connection.
  """
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
    if num_processes is None or process_id is None:
      raise UserError(f"--coordinator {coordinator} needs --num-processes and --process-id")
    if not 0 <= process_id < num_processes:
      raise UserError(f"--process-id {process_id} must be in [0, --num-processes "
                      f"{num_processes})")
    kwargs = dict(coordinator_address=coordinator, num_processes=num_processes,
                  process_id=process_id)
  jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU devices talk over TCP
  try:
    jax.distributed.initialize(**kwargs)
  except (RuntimeError, ValueError) as e:
    raise UserError(f"--coordinator {coordinator}: {str(e).strip().splitlines()[0]}") from None


def say(message, *, file=None):
  """print(message), prefixed with "[process i/N]" when several processes share one log."""
  if jax.process_count() > 1:
    message = f"[process {jax.process_index()}/{jax.process_count()}] {message}"
  print(message, file=file or sys.stdout, flush=True)
