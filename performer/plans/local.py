"""The local launcher: N jobs at a time on this machine, each pinned to its share of the cores.

A job starts once every job it needs has finished; a stop signal lets each train save first."""

import ctypes
import os
import signal
import subprocess
import sys
import time

from performer.atomic import exclusive_lock
from performer.plans import state

_PR_SET_PDEATHSIG = 1
POLL_SECONDS = 0.5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def executable():
  """The argv prefix that runs this package's `performer` command."""
  script = os.path.join(os.path.dirname(sys.executable), "performer")
  return [script] if os.path.exists(script) else [sys.executable, "-m", "performer.cli"]


def argv(job):
  command = list(job.command)
  return executable() + command[1:] if command[0] == "performer" else command


def core_shares(jobs, cores=None):
  """The cores of each of `jobs` slots: equal contiguous shares of this process's cores.

  Returns [] (no pinning) when there are fewer cores than slots.
  """
  cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
  share = len(cores) // jobs
  return [cores[i * share:(i + 1) * share] for i in range(jobs)] if share else []


def _child_setup(cores):
  def setup():
    if cores:
      os.sched_setaffinity(0, cores)
    try:  # Linux: SIGTERM to the job when the launcher dies
      ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
      pass
  return setup


def run(plan, *, jobs=1, say=print):
  """Runs the plan's unfinished jobs here. Returns the exit status (0, 1 on failures, 130 stopped).

  Raises:
    UserError: another launcher holds this runs folder.
  """
  runs = plan.ctx.runs
  with exclusive_lock(os.path.join(runs, ".plan", "lock"), f"the runs folder {runs}"):
    return _Launcher(plan, plan.jobs, jobs, say).loop()


def run_one(plan, name, *, say=print):
  """Runs job `name` alone, in the foreground (a SLURM job's step). Returns its exit status.

  A train that diverged counts as finished (status 0): SLURM's afterok then
  starts the figures that show where it stopped. Under SLURM its stamps name
  the SLURM job (SLURM_JOB_ID), so that one that ends without recording it
  is found (scheduler.py).

  Raises:
    UserError: a job it needs has not finished, or it is running already.
  """
  job = plan[name]
  pending = [f"{n} ({state.state(plan, plan[n])[0]})" for n in job.needs
             if state.state(plan, plan[n])[0] not in state.FINISHED]
  if pending:
    from performer.errors import UserError  # pylint: disable=import-outside-toplevel
    raise UserError(f"job {name} needs jobs that have not finished: {', '.join(pending)}")
  with exclusive_lock(os.path.join(plan.ctx.runs, ".plan", f"{name}.lock"), f"job {name}"):
    slurm = {"slurm_id": os.environ["SLURM_JOB_ID"]} if os.environ.get("SLURM_JOB_ID") else {}
    return _Launcher(plan, (job,), 1, say, pin=False, tags=slurm).loop()


class _Launcher:
  """The scheduling loop of `run`: slots, signals, stamps."""

  def __init__(self, plan, selected, jobs, say, pin=True, tags=None):
    self.plan, self.selected, self.jobs = plan, selected, jobs
    self.say = _quiet_when_gone(say)
    self.shares = core_shares(jobs) if pin else []
    self.tags = {"launcher": os.getpid(), **(tags or {})}  # in each running stamp
    self.running = {}  # slot -> (job, Popen, log, started)
    self.stopping = False
    self.failed, self.interrupted, self.blocked, self.elsewhere = [], [], [], []

  def loop(self):
    env = dict(os.environ)
    # Every job is a new process compiling much the same programs: JAX's persistent cache
    # keeps them.
    env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(self.plan.ctx.runs, "jax_cache"))
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    self.env = env
    previous = {s: signal.signal(s, self._stop) for s in STOP_SIGNALS}
    try:
      states = {j.name: state.state(self.plan, j)[0] for j in self.selected}
      todo = [j for j in self.selected if states[j.name] not in state.FINISHED + state.ELSEWHERE]
      # A free slot takes a ready eval, archive, probe or figure before the next train: they are
      # short, and they unlock what waits on them (a study's gate, the archives a session keeps).
      todo.sort(key=lambda j: j.kind == "train")
      done = sum(s in state.FINISHED for s in states.values())
      self.elsewhere = [n for n, s in states.items() if s in state.ELSEWHERE]
      if self.elsewhere:
        self.say(f"running or queued elsewhere, not started here: {', '.join(self.elsewhere)}")
      self.say(f"{len(self.selected)} jobs, {done} finished before; {self.jobs} at a time"
               + (f", {len(self.shares[0])} core(s) each" if self.shares else ""))
      total, started = len(todo), 0
      while todo or self.running:
        self._reap()
        for job in [] if self.stopping else list(todo):
          verdict = self._ready(job)
          if verdict == "wait" or verdict == "start" and len(self.running) >= self.jobs:
            continue
          todo.remove(job)
          if verdict == "blocked":
            self.blocked.append(job.name)
          elif verdict == "start":
            started += 1
            self._start(job, f"[{started}/{total}]")
        if self.stopping:
          todo = []
        elif todo and not self.running:  # what is left waits on jobs that run elsewhere
          self.blocked += [j.name for j in todo]
          todo = []
        time.sleep(POLL_SECONDS if self.running else 0)
    finally:
      for s, handler in previous.items():
        signal.signal(s, handler)
    return self._summary()

  def _ready(self, job):
    """'start'; 'wait' while a need runs or waits; 'blocked' when one failed, was interrupted,
    was blocked itself or is an input that is missing; 'skip' for the eval of a diverged run."""
    states = {n: state.state(self.plan, self.plan[n])[0] for n in job.needs}
    if any(n in self.failed + self.interrupted + self.blocked or s == "missing"
           for n, s in states.items()):
      return "blocked"
    if not all(s in state.FINISHED for s in states.values()):
      return "wait"
    if job.kind == "eval" and "diverged" in states.values():
      state.write(self.plan.ctx.runs, job.name, state="skipped", detail="its run diverged",
                  fingerprint=self.plan.fingerprints[job.name])
      self.say(f"{job.name}: skipped, its run diverged")
      return "skip"
    return "start"

  def _start(self, job, tag):
    slot = next(s for s in range(self.jobs) if s not in self.running)
    cores = self.shares[slot] if self.shares else []
    log = state.new_log(self.plan.ctx.runs, job.name)
    with open(log, "w") as f:
      f.write("$ " + " ".join(argv(job)) + "\n")
      f.flush()
      proc = subprocess.Popen(argv(job), stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=self.env, start_new_session=True,
                              preexec_fn=_child_setup(cores))
    state.write(self.plan.ctx.runs, job.name, state="running", pid=proc.pid, log=log,
                fingerprint=self.plan.fingerprints[job.name], **self.tags)
    self.running[slot] = (job, proc, log, time.time())
    where = f" on cpu {cores[0]}" + (f"-{cores[-1]}" if len(cores) > 1 else "") if cores else ""
    self.say(f"{tag} {job.name}: started{where} (log {log})")

  def _reap(self):
    for slot, (job, proc, log, started) in list(self.running.items()):
      rc = proc.poll()
      if rc is None:
        continue
      del self.running[slot]
      minutes = (time.time() - started) / 60
      fields = dict(fingerprint=self.plan.fingerprints[job.name], log=log, rc=rc, pid=proc.pid,
                    minutes=round(minutes, 2))
      diverged = job.kind == "train" and os.path.exists(os.path.join(job.workdir, "diverged.json"))
      if rc == 0:
        state.write(self.plan.ctx.runs, job.name, state="done", **fields)
        self.say(f"{job.name}: done in {minutes:.1f} min")
      elif diverged:
        state.write(self.plan.ctx.runs, job.name, state="diverged", detail="kept as it stopped",
                    **fields)
        self.say(f"{job.name}: diverged; kept as it stopped ({job.workdir}/diverged.json)")
      elif self.stopping:
        state.write(self.plan.ctx.runs, job.name, state="interrupted", **fields)
        self.interrupted.append(job.name)
        self.say(f"{job.name}: interrupted after {minutes:.1f} min (log {log})")
      else:
        state.write(self.plan.ctx.runs, job.name, state="failed", **fields)
        self.failed.append(job.name)
        tail = state.last_lines(log, 1)
        self.say(f"{job.name}: failed with exit status {rc}: {tail[0] if tail else ''} (log {log})")

  def _stop(self, signum, frame):
    del frame
    if self.stopping:
      return  # each job gets one SIGTERM: a second would stop a train before it saves
    self.stopping = True
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    self.say(f"{name}: stopping {len(self.running)} running job(s); each saves first")
    for job, proc, _, _ in self.running.values():
      try:
        os.killpg(proc.pid, signal.SIGTERM)
      except ProcessLookupError:
        pass

  def _summary(self):
    if self.stopping:
      self.say("interrupted: " + (", ".join(self.interrupted) or "no job was running")
               + "; run the same command to resume")
      return 130
    if self.failed:
      self.say(f"failed: {', '.join(self.failed)}"
               + (f"; not started, as they need them: {', '.join(self.blocked)}" if self.blocked else "")
               + "; `--status` shows their logs' last lines")
      return 1
    if self.blocked:
      self.say(f"not started: {', '.join(self.blocked)}: they need jobs that run elsewhere "
               "or inputs that are missing (`--status`)")
      return 1
    if self.elsewhere:
      self.say(f"nothing left to run here; still running or queued elsewhere: "
               f"{', '.join(self.elsewhere)} (`--status`)")
      return 0
    self.say("every job has finished")
    return 0


def _quiet_when_gone(say):
  """`say`, silenced for good once its terminal or pipe is gone (SIGHUP, a dropped ssh).

  A write there raises; unguarded, it would end the launcher while its jobs
  save. The standard streams then go to /dev/null, so that exiting does not
  fail on them either."""
  def guarded(text):
    try:
      say(text)
    except OSError:
      devnull = os.open(os.devnull, os.O_WRONLY)
      for stream in (sys.stdout, sys.stderr):
        try:
          os.dup2(devnull, stream.fileno())
        except (OSError, ValueError, AttributeError):
          pass
      os.close(devnull)
  return guarded
