"""performer: reproduce and extend "Rethinking Attention with Performers"."""

from performer.version import __version__  # noqa: F401  (performer.__version__)


def load(workdir):
  """A trained `performer train` workdir as (Config, model, step), for decoding or analysis.

  The latest checkpoint is restored into the run's `TransformerLM` (dropout
  off, a Performer keeping its last draw of W); see docs/training.md "Using a trained
  model".

  Args:
    workdir: a `performer train` workdir (config.json, checkpoints/).

  Returns:
    (train.config.Config, models.transformer.TransformerLM, step: int).

  Raises:
    UserError: not a trained workdir, or parameters that do not fit its model.
  """
  from performer.train import trained  # pylint: disable=import-outside-toplevel
  return trained.load(workdir)
