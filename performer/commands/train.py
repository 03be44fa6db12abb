"""`performer train`: a model from gin configs, resumed when its workdir has a checkpoint."""

import dataclasses

from performer import configurables
from performer.flags import flag, folder
from performer.train import distributed

NAME = "train"
SUMMARY = "train a language model from gin configs (resumes a workdir)"
DESCRIPTION = (
    "Trains the model the gin files describe (see gin/ and gin/mini/). TensorBoard events, "
    "metrics.jsonl, checkpoints and the operative config go to --workdir; running again on the "
    "same workdir resumes from its latest checkpoint. Ctrl-C saves a checkpoint after the "
    "current step, then stops.")


@dataclasses.dataclass(frozen=True)
class Flags:
  """Where `performer train` writes."""
  workdir: str = flag(help="folder for logs, checkpoints and results", parse=folder)


FLAGS = (configurables.GinFlags, Flags, distributed.ClusterFlags)


def main(args):
  """Trains, then prints the last validation metrics.

  Raises:
    UserError: a bad gin file or binding, a workdir in use or of another
      run, a failed connection to the other processes, or any error the
      loop names before its first step.
  """
  from performer.train import loop  # pylint: disable=import-outside-toplevel
  configurables.parse(args.gin, args.gin_param)  # UserError names a bad file or binding
  configurables.check_names_a_model()
  loop.check_workdir(args.workdir)
  distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                         args.init_timeout)
  cfg = configurables.resolve()
  valid = loop.run(cfg, args.workdir, records={"config.gin": configurables.operative_config()})
  if valid:
    distributed.say("valid: " + ", ".join(f"{k} {v:.4g}" for k, v in valid.items()))
