"""Budgets: how big each study's runs are (tiny, mini, paper), as typed values.

Attention sizes scale with the model: m = 4 d_head, as the paper's 256 at d_head = 64."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Recall:
  """The design of the associative-recall study (performer/plans/recall.py).

  Attributes:
    tasks: (L, kv) of each MQAR task (Zoology's Fig. 2 pairs).
    vocab_size, eval_examples: the tasks' V and their valid and test sizes.
    gin: files given after gin/recall/base.gin (sizes of the runs).
    learning_rates: the grid each row's rate is chosen from on valid (one
      rate: no tuning runs).
    seeds: the replicates of every row at its chosen rate.
    num_features: m of the FAVOR+ variant rows and of Performer-ReLU.
    feature_sweep: the m of the FAVOR+ accuracy-against-m rows.
    data: the tasks' folders are <runs>/data/<data>/L<L>_kv<kv>, prepared
      by jobs <data>_L<L>_kv<kv> with `data_flags` added.
    splits: the replicates' test splits (mqar.py: test, test_shuffled,
      test_kv<n>).
    rows: the rows run (plans/recall.py rows(); empty: all).
    tune_families: one rate per row family (plans/recall.py family()),
      chosen on the family's first row, instead of one per row.
    tune_steps: the tuning runs' TrainConfig.steps (None: the runs').
    mechanism: every softmax-estimating replicate is read by `performer
      recall-rows` after its eval (experiments/recall_rows.py).
    seeds_decision: `seeds` first, then more seeds (up to
      figures/recall_claims.py MOST_SEEDS) of the rows of each claim they leave
      inconclusive where more would resolve it (verdicts.seeds_to_resolve).
    rates_from: the study whose tuning chose the rates (its data and
      `<study>_lr.json`, its tuning runs' seed) instead of tuning anew; None:
      this design tunes its own.
    figure: the `performer figure` NAME of the study's figure.
    probe_split: the split `performer recall-rows` reads (mechanism).
  """
  tasks: tuple[tuple[int, int], ...]
  vocab_size: int
  eval_examples: int
  gin: tuple[str, ...]
  learning_rates: tuple[float, ...]
  seeds: tuple[int, ...]
  num_features: int
  feature_sweep: tuple[int, ...]
  data: str = "mqar"
  data_flags: tuple[str, ...] = ("--filler", "zero", "--train-pool", "0")  # the first generator
  splits: tuple[str, ...] = ("test",)
  rows: tuple[str, ...] = ()
  tune_families: bool = False
  tune_steps: int | None = None
  mechanism: bool = False
  seeds_decision: bool = False
  rates_from: str | None = None
  figure: str = "recall"
  probe_split: str = "test"


@dataclasses.dataclass(frozen=True)
class ListOps:
  """The design of the LRA ListOps study (performer/plans/listops.py).

  Attributes:
    gin: files given after gin/listops/base.gin (sizes and the stop rule).
    data_flags: `performer prepare-listops` flags (none: LRA's sizes).
    rows: the rows run (plans/listops.py ROWS), in the order they start.
    seeds: the replicates of every row.
  """
  gin: tuple[str, ...]
  data_flags: tuple[str, ...]
  rows: tuple[str, ...]
  seeds: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Budget:
  """The sizes of one budget.

  Attributes:
    name: tiny, mini or paper.
    protein_gin, text_gin: gin files given after each protein / PG-19 paper
      config (none: the paper's own sizes).
    data, text_data: where the protein and PG-19 datasets are prepared;
      "{runs}" stands for the runs folder.
    num_features: m of the Performers (attention_options num_features).
    num_projections: Linformer's k.
    redraw_every: the appendix runs' feature redraw period (steps).
    finetune_steps, text_finetune_steps: Fig. 5's fine-tunes (proteins, text).
    concat_steps, redraw_steps, kernel_steps: Fig. 7, Fig. 15, Fig. 16 runs;
      None keeps the config's steps.
    concat_bindings: Fig. 7's concatenated-protein sizes over the budget's.
    reformer_options: the Reformer's attention_options.
    probe_args: extra flags of each probe command (smaller probes for tiny).
    jobs: jobs at a time on one machine by default (two one-core trains
      outrun one on both of 2 cores: docs/reproducing.md; paper runs want a
      whole machine each).
    results: where tables and figures go ("{runs}" as above).
    sample_fasta: True: the tiny budget's proteins are the sample proteome,
      labelled and prepared in the runs folder (data.py).
    staged: True: Fig. 6's later seeds wait for its scale gate (fig6.py);
      False (tiny, a check of every job): every seed runs at once.
    recall: the associative-recall study's design (Recall): attention-only
      models (the "no convolution" ablation of recall_conv).
    recall_conv: the recall study in Zoology's own setting (a short
      convolution before attention; plans/recall_conv.py).
    recall_kv: the confirmatory study of recall_conv's rows at kv = 8 and 16
      on fresh seeds (plans/recall_kv.py, figures/recall_kv.py).
    listops: the LRA ListOps study (plans/listops.py, figures/listops.py).
  """
  name: str
  protein_gin: tuple[str, ...]
  text_gin: tuple[str, ...]
  data: str
  text_data: str
  num_features: int
  num_projections: int
  redraw_every: int
  finetune_steps: int
  text_finetune_steps: int
  concat_steps: int | None
  redraw_steps: int | None
  kernel_steps: int | None
  concat_bindings: tuple[str, ...] = ()
  reformer_options: dict = dataclasses.field(default_factory=dict)
  probe_args: dict = dataclasses.field(default_factory=dict)
  jobs: int = 1
  results: str = "{runs}/results"
  sample_fasta: bool = False
  staged: bool = True
  recall: Recall | None = None
  recall_conv: Recall | None = None
  recall_kv: Recall | None = None
  listops: ListOps | None = None


# Zoology's model and data (gin/recall/zoology.gin; data/mqar.py's defaults: random fillers, a
# pool of 100,000 training examples); tested at kv = 4, 8 and 16 and with shuffled query order.
ZOOLOGY_ROWS = ("exact", "favor_m16", "favor_m64", "favor_m256", "favor_m1024", "favor_no_redraw",
                "favor_iid", "hyperbolic", "trig", "smreg", "favorpp", "favorsharp", "simplex",
                "relu", "relu_deterministic", "elu_plus_one", "taylor", "identity")
ZOOLOGY_SPLITS = ("test", "test_shuffled", "test_kv8", "test_kv16")
# recall_kv (declared 2026-12-07, docs/ARCHITECTURE.md): the rows its claims compare, on seeds
# no recall_conv run used. 6 seeds: the Holm-aware design (figures/recall_kv.py design,
# results/recall_kv_design.json) for the estimator claims, at most 8.
RECALL_KV_ROWS = ("exact", "favor_m256", "favor_m1024", "favorpp", "favorsharp", "trig", "taylor",
                  "relu", "identity")
RECALL_KV_SEEDS = (4, 5, 6, 7, 8, 9)
# listops (declared 2026-12-07): the claims' rows first (exact, m = 128, m = 2, the control),
# so that a study cut short has decided what it could.
LISTOPS_ROWS = ("exact", "favor_m128", "favor_m2", "identity", "relu", "elu_plus_one",
                "linformer", "reformer")


BUDGETS = {
    # Every experiment for a few steps on the sample proteome: a check that data, runs, evals,
    # tables and figures connect (tests/plans). Its numbers mean nothing.
    "tiny": Budget(
        name="tiny", protein_gin=("gin/reproduce/tiny.gin",), text_gin=("gin/reproduce/tiny.gin",),
        data="{runs}/data/sample", text_data="{runs}/data/pg19-sample", num_features=16,
        num_projections=16, redraw_every=1, finetune_steps=3, text_finetune_steps=3,
        concat_steps=3, redraw_steps=3, kernel_steps=3, concat_bindings=("DataConfig.seq_len=64",),
        reformer_options={"chunk_size": 8, "n_buckets": 4},
        probe_args={"lemma2": ("--angles", "8", "--lengths", "4", "--slice-angles", "6",
                               "--samples", "500"),
                    "error_propagation": ("--sequences", "4", "--draws", "2", "--features", "8,16",
                                          "--init-layers", "2"),
                    "aa_similarity": ("--sequences", "16")},
        jobs=2, sample_fasta=True, staged=False,
        recall=Recall(tasks=((16, 2),), vocab_size=64, eval_examples=16,
                      gin=("gin/recall/tiny.gin",), learning_rates=(1e-2,), seeds=(0, 1),
                      num_features=8, feature_sweep=(8,)),
        recall_conv=Recall(tasks=((16, 2),), vocab_size=64, eval_examples=16,
                           gin=("gin/recall/zoology.gin", "gin/recall/tiny.gin"),
                           learning_rates=(1e-2, 3e-2), seeds=(0, 1), num_features=8,
                           feature_sweep=(8,), data="mqar_zoology",
                           data_flags=("--test-kv", "4", "--train-pool", "64"),
                           splits=("test", "test_shuffled", "test_kv4"),
                           rows=("exact", "favor_m8", "favor_iid", "relu", "identity"),
                           tune_families=True, tune_steps=2, mechanism=True),
        recall_kv=Recall(tasks=((16, 2),), vocab_size=64, eval_examples=16,
                         gin=("gin/recall/zoology.gin", "gin/recall/tiny.gin"),
                         learning_rates=(), seeds=(2, 3), num_features=8, feature_sweep=(8,),
                         data="mqar_zoology", splits=("test", "test_kv4"),
                         rows=("exact", "favor_m8", "relu", "identity"), tune_families=True,
                         mechanism=True, rates_from="recall_conv", figure="recall-kv",
                         probe_split="test_kv4"),
        listops=ListOps(gin=("gin/listops/tiny.gin",),
                        data_flags=("--train-examples", "64", "--valid-examples", "16",
                                    "--test-examples", "16", "--min-length", "10",
                                    "--max-length", "48"),
                        rows=LISTOPS_ROWS, seeds=(0, 1))),
    # Real Swiss-Prot 2014_01, 2-layer models at L = 256, sized for a 2-core CPU (job-minutes:
    # results/pages/appendix.md, "Wall time"); concatenated proteins at L = 1024
    # (docs/reproducing.md: why).
    "mini": Budget(
        name="mini", protein_gin=("gin/reproduce/mini.gin",), text_gin=("gin/mini/pg19_sizes.gin",),
        data="runs/data/swissprot", text_data="runs/data/pg19-sample", num_features=64,
        num_projections=150, redraw_every=100, finetune_steps=250, text_finetune_steps=500,
        concat_steps=300, redraw_steps=500, kernel_steps=300,
        concat_bindings=("DataConfig.seq_len=1024", "DataConfig.batch_size=4"),
        jobs=2, results="results",
        recall=Recall(tasks=((64, 4),), vocab_size=1024, eval_examples=3000, gin=(),
                      learning_rates=(1e-3, 3e-3, 1e-2), seeds=(0, 1, 2, 3, 4), num_features=64,
                      feature_sweep=(16, 32, 64, 128, 256)),
        # Zoology's smallest setting (V = 8192, L = 64, kv = 4, d_model 64, batch 128): exact
        # attention stops at 99% valid accuracy by step 500 here; the cap (gin/recall/zoology.gin,
        # 10,000 steps) is 20x it.
        recall_conv=Recall(tasks=((64, 4),), vocab_size=8192, eval_examples=3000,
                           gin=("gin/recall/zoology.gin",), learning_rates=(1e-3, 3e-3, 1e-2),
                           seeds=(0, 1, 2), num_features=256, feature_sweep=(16, 64, 256, 1024),
                           data="mqar_zoology", data_flags=("--test-kv", "8,16"),
                           splits=ZOOLOGY_SPLITS, rows=ZOOLOGY_ROWS, tune_families=True,
                           tune_steps=2000, mechanism=True, seeds_decision=True),
        recall_kv=Recall(tasks=((64, 4),), vocab_size=8192, eval_examples=3000,
                         gin=("gin/recall/zoology.gin",), learning_rates=(),
                         seeds=RECALL_KV_SEEDS, num_features=256, feature_sweep=(256, 1024),
                         data="mqar_zoology", splits=("test", "test_kv8", "test_kv16"),
                         rows=RECALL_KV_ROWS, tune_families=True, mechanism=True,
                         rates_from="recall_conv", figure="recall-kv",
                         probe_split="test_kv16"),
        listops=ListOps(gin=("gin/listops/mini.gin",), data_flags=(), rows=LISTOPS_ROWS,
                        seeds=(0, 1, 2))),
    # The paper-size configs (36 layers, L = 1024), for GPU/TPU machines or a cluster. PG-19 must
    # be prepared at runs/data/pg19 (performer prepare-pg19; data/README.md).
    "paper": Budget(
        name="paper", protein_gin=(), text_gin=(), data="runs/data/swissprot",
        text_data="runs/data/pg19", num_features=256, num_projections=600, redraw_every=1000,
        finetune_steps=20000, text_finetune_steps=20000, concat_steps=None, redraw_steps=None,
        kernel_steps=None,
        recall=Recall(tasks=((64, 4), (128, 8), (256, 16)), vocab_size=8192, eval_examples=3000,
                      gin=("gin/recall/paper.gin",), learning_rates=(1e-4, 4.6e-4, 2.2e-3, 1e-2),
                      seeds=(0, 1, 2, 3, 4), num_features=256,
                      feature_sweep=(16, 32, 64, 128, 256))),
}
