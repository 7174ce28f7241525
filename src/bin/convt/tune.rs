//! `convt tune`: times every candidate strategy (algorithm and tile) on the suite cases with GPU timestamps, each
//! after its pipelines are built and the GPU is warm again, times the three fastest a second time, and keeps each
//! case's winner in the persistent tuning cache, which later runs' selector reads. With `--backward` the
//! candidates are grad_input's kernels, then grad_weight's, each timed in the whole backward pass.

use anyhow::Result;
use clap::Args;
use convt::gpu::tune::{self, Pass as TunePass, TuneCache, TuneEntry, TuneKey};
use convt::gpu::{GradInputKernel, GradWeightKernel, Strategy};
use convt::suite::Case;
use convt::{GpuContext, Precision};

use crate::bench::{median, BackwardKernels, Candidate, Pass, Prepared};
use crate::Outcome;

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// The problems: suite cases, or one shape given by flags (its tuned kernel serves the shapes of its
    /// bucket: batch and input size rounded up to powers of two).
    #[command(flatten)]
    shape: crate::args::ShapeArgs,
    /// Timed runs per candidate (median).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// The cache file (default: CONVT_TUNE_CACHE, else convt/tune.json in the platform's cache directory, ~/.cache on
    /// Linux).
    #[arg(long)]
    cache: Option<std::path::PathBuf>,
    /// Tune for this precision: `f32` times the exact strategies, `fast` those with f16 operands this adapter
    /// runs (and the exact ones, which `fast` may also choose).
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// Tune for tensors of this dtype (f32, f16, bf16): inputs, weights and results in it. A half call reads
    /// the entries of its own dtype; each dtype is tuned on its own.
    #[arg(long, default_value = "f32")]
    dtype: convt::DType,
    /// Tune the backward pass: grad_input's kernel (the forward's kernels of the precision on the equivalent
    /// transposed convolution where the shape has one, at stride 1; elsewhere each GEMM tile, and for `fast` each
    /// cooperative-matrix tile, on the sampled correlation; and the gather kernel), then grad_weight's (each
    /// per-tap GEMM tile, for `fast` the f16 tiles this adapter runs too, and the rows kernel where it takes the
    /// shape), each timed in the whole backward; the winners are kept under the case's grad_input and grad_weight
    /// keys.
    #[arg(long)]
    backward: bool,
    /// With --backward, tune one gradient's kernel only (`input` or `weight`); the other is the selector's (from
    /// the context's tuning cache, CONVT_TUNE_CACHE or the default path, where that holds one).
    #[arg(long, requires = "backward")]
    gradient: Option<Gradient>,
    /// Print one JSON object per tuned kernel choice (case, winner, its time, every candidate's first-round time)
    /// instead of text.
    #[arg(long)]
    json: bool,
}

/// The gradient `--gradient` tunes alone.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Gradient {
    Input,
    Weight,
}

/// Candidates timed a second time before the winner is chosen.
const FINALISTS: usize = 3;

pub fn run(a: TuneArgs) -> Result<Outcome> {
    let cases: Vec<Case> = a.shape.cases()?;
    let mut opts = crate::args::gpu_options()?;
    opts.strategy = None;
    let path = a
        .cache
        .clone()
        .or_else(|| opts.tune_cache.clone())
        .or_else(tune::default_path)
        .ok_or_else(|| anyhow::anyhow!("no cache location: pass --cache or set CONVT_TUNE_CACHE"))?;
    let mut cache = TuneCache::load(&path)?;
    TuneCache::check_writable(&path)?;
    let ctx = GpuContext::with_options(opts)?;
    let what = if a.backward {
        match a.gradient {
            None => "backward (grad_input's and grad_weight's kernels)",
            Some(Gradient::Input) => "backward (grad_input's kernels)",
            Some(Gradient::Weight) => "backward (grad_weight's kernels)",
        }
        .to_string()
    } else {
        format!("precision {}", a.precision)
    };
    let what = format!("{what}, dtype {}", a.dtype);
    eprintln!("adapter: {}; cache: {}; {what}", ctx.adapter_info().name, path.display());
    for case in &cases {
        let case = *case;
        let pass = if a.backward { Pass::Backward } else { Pass::Forward };
        let mut prepared = Prepared::new(&ctx, &case, pass, a.dtype)?;
        // The precision whose kernels are tuned: the backward's other kernel is the selector's at it.
        prepared.precision = a.precision;
        let shape = &prepared.shape;
        let mut record = |key: TuneKey, (candidate, ms): (Candidate, f64)| -> Result<()> {
            cache.insert(&key, TuneEntry::new(candidate.name(), ms, a.precision, a.dtype));
            cache.save(&path)?; // after every winner, so an interrupted run keeps what it measured
            Ok(())
        };
        let key = |pass| TuneKey::new(ctx.adapter_info(), pass, shape, case.bias, a.precision, a.dtype);
        if a.backward {
            // grad_input's kernels first (grad_weight's chosen as usual), then grad_weight's with grad_input's
            // winner: each timed in the whole backward pass; `--gradient` skips the other (its kernel then the
            // selector's).
            let winner = if a.gradient == Some(Gradient::Weight) {
                None
            } else {
                let grad_input: Vec<Candidate> = GradInputKernel::candidates(&ctx, shape, a.precision)
                    .into_iter()
                    .map(|k| Candidate::Backward(BackwardKernels { grad_input: Some(k), grad_weight: None }))
                    .collect();
                let label = format!("{:<6} grad_input", case.name);
                let Some(gi) = fastest(&ctx, &prepared, &a, &label, grad_input)? else {
                    continue;
                };
                record(key(TunePass::GradInput), gi)?;
                let Candidate::Backward(BackwardKernels { grad_input: winner, .. }) = gi.0 else { continue };
                winner
            };
            if a.gradient == Some(Gradient::Input) {
                continue;
            }
            let set = &prepared.inputs[0];
            let chunks = [set.input.chunks().len(), set.grad_output().map_or(1, |g| g.chunks().len())];
            let grad_weight: Vec<Candidate> = GradWeightKernel::candidates(&ctx, shape, chunks, a.precision)
                .into_iter()
                .map(|k| Candidate::Backward(BackwardKernels { grad_input: winner, grad_weight: Some(k) }))
                .collect();
            if let Some(gw) = fastest(&ctx, &prepared, &a, &format!("{:<6} grad_weight", case.name), grad_weight)? {
                record(key(TunePass::GradWeight), gw)?;
            }
        } else {
            // The candidates that compute this shape (the Winograd tiles take stride-1 shapes only).
            let candidates: Vec<Candidate> = Strategy::candidates_for(&ctx, a.precision)
                .into_iter()
                .filter(|s| s.computes(&ctx, shape))
                .map(Candidate::Forward)
                .collect();
            if let Some(best) = fastest(&ctx, &prepared, &a, &format!("{:<6}", case.name), candidates)? {
                record(key(TunePass::Forward), best)?;
            }
        }
    }
    Ok(Outcome::Ok)
}

/// Times every candidate, then the fastest few again back to back, prints both rounds after `label`, and returns
/// the fastest of the second round.
fn fastest(
    ctx: &GpuContext,
    prepared: &Prepared,
    a: &TuneArgs,
    label: &str,
    candidates: Vec<Candidate>,
) -> Result<Option<(Candidate, f64)>> {
    let mut timed: Vec<(Candidate, f64)> = Vec::new();
    let mut line = label.to_string();
    // Progress on stderr while the candidates are timed (drawn only where stderr is a terminal).
    let bar = indicatif::ProgressBar::new((candidates.len() + FINALISTS.min(candidates.len())) as u64)
        .with_style(
            indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        )
        .with_prefix(label.trim().to_string());
    for (i, candidate) in candidates.into_iter().enumerate() {
        bar.set_message(candidate.name());
        // The GPU idled while the case's inputs were drawn (and clocked down): the first candidate warms it up for a
        // second; each other one keeps it busy for a fraction of that after its pipelines are built (the GPU idles
        // while the driver compiles them, and a kernel timed right after measured up to twice as slow).
        let min_warmup = std::time::Duration::from_millis(if i == 0 { 1000 } else { 250 });
        match prepared.time(ctx, Some(candidate), a.warmup, min_warmup, a.runs) {
            Ok((times, _)) => {
                let ms = median(times);
                line += &format!("  {} {:.3}", candidate.name(), ms);
                timed.push((candidate, ms));
            }
            // A candidate this adapter cannot run (a tile too large for it, say) is skipped.
            Err(e) => line += &format!("  {} skipped ({e})", candidate.name()),
        }
        bar.inc(1);
    }
    timed.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut best: Option<(Candidate, f64)> = None;
    line += "\n       again:";
    for &(candidate, _) in timed.iter().take(FINALISTS) {
        bar.set_message(format!("{} again", candidate.name()));
        let ms =
            median(prepared.time(ctx, Some(candidate), a.warmup, std::time::Duration::from_millis(250), a.runs)?.0);
        bar.inc(1);
        line += &format!("  {} {:.3}", candidate.name(), ms);
        if best.is_none_or(|(_, b)| ms < b) {
            best = Some((candidate, ms));
        }
    }
    bar.finish_and_clear();
    if let Some((candidate, ms)) = best {
        if a.json {
            let timings: Vec<serde_json::Value> =
                timed.iter().map(|(c, ms)| serde_json::json!({"kernel": c.name(), "ms": ms})).collect();
            let case = label.split_whitespace().collect::<Vec<_>>().join(" ");
            println!("{}", serde_json::json!({"case": case, "winner": candidate.name(), "ms": ms, "timings": timings}));
        } else {
            println!("{line}\n       -> {} {:.3} ms", candidate.name(), ms);
        }
    }
    Ok(best)
}
