"""Memory a compiled computation plans to use, and what the device has: checked before running.

Used by `performer speed`, `performer train` and prepare-mqar (host memory, without jax)."""

from performer.errors import UserError


def planned_bytes(compiled):
  """Arguments + outputs + temporaries of XLA's buffer assignment, or None.

  Args:
    compiled: a compiled computation (`jax.jit(f).lower(...).compile()`, or
      nnx.jit's equivalent) with `.memory_analysis()`.
  """
  try:
    stats = compiled.memory_analysis()
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes
               + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
  except Exception:  # pylint: disable=broad-except
    return None  # a backend without the analysis


def available_bytes():
  """The device allocator's limit, else 90% of the memory Linux reports available; or None."""
  import jax  # pylint: disable=import-outside-toplevel  # not at the top: see host_available_bytes
  try:
    limit = (jax.local_devices()[0].memory_stats() or {}).get("bytes_limit")
    if limit:
      return int(limit)
  except Exception:  # pylint: disable=broad-except
    pass
  return host_available_bytes()


def host_available_bytes():
  """90% of the memory Linux reports available (MemAvailable), or None; imports no jax."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(0.9 * int(line.split()[1]) * 1024)
  except OSError:
    pass
  return None


def check_fits(nbytes, what):
  """Raises UserError when `what` (e.g. "--seq-len 100000: the L x L attention matrix") needs
  more than the host memory available, before anything that size is allocated.

  Args:
    nbytes: a lower bound of what the work allocates at once, in bytes.
    what: the flags and the array that make it that large.
  """
  available = host_available_bytes()
  if available is not None and nbytes > available:
    raise UserError(f"{what}: at least {format_bytes(nbytes)} needed, more than the "
                    f"{format_bytes(available)} of memory available here; use smaller sizes")


def format_bytes(n):
  """A byte count for people: '512 B', '1.0 KiB', '231.5 MiB', '20.20 GiB'."""
  for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
    if n >= size:
      return f"{n / size:.2f} {unit}" if unit in ("TiB", "GiB") else f"{n / size:.1f} {unit}"
  return f"{n:.0f} B"


def parse_bytes(text):
  """'512M', '20G', '1.5GiB', '4096' -> bytes (int; binary units).

  Raises:
    UserError: not a positive size.
  """
  units = {"": 1, "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30, "t": 2 ** 40}
  number, unit = text.strip().lower().rstrip("ib").rstrip(), ""
  if number and number[-1] in units:
    number, unit = number[:-1], number[-1]
  try:
    size = int(float(number) * units[unit])
  except (ValueError, OverflowError):  # OverflowError: inf
    size = None
  if size is None or size < 1:
    raise UserError(f"expected a positive size such as 512M or 20G, got {text!r}")
  return size
