"""Training batches built ahead of the step that needs them, by grain's reader threads."""

import grain.python as grain


class StepBatches:
  """A base of the batch classes: `train_batches` over a subclass's `train_batch(step)`.

  train_batch(step) must be a pure function of the step, so any thread may
  build any batch and a resumed run reads the batches an uninterrupted one
  would.
  """

  def train_batch(self, step):
    raise NotImplementedError

  def train_batches(self, start, stop, place=None, *, prefetch=4):
    """train_batch(step) for step in [start, stop), built ahead by grain's reader threads.

    place: applied to each batch in those threads too (e.g. sharding it onto
    the devices), so neither building nor copying waits for the step.
    """
    def build(step):
      batch = self.train_batch(step)
      return place(batch) if place else batch
    batches = grain.MapDataset.range(start, stop).map(build)
    return iter(batches.to_iter_dataset(grain.ReadOptions(num_threads=2,
                                                          prefetch_buffer_size=prefetch)))
