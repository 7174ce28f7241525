//! `convt tune`: times every candidate strategy (algorithm and tile) on the suite cases with GPU timestamps, each
//! after its pipelines are built and the GPU is warm again, times the three fastest a second time, and keeps each
//! case's winner in the persistent tuning cache, which later runs' selector reads. With `--backward` the
//! candidates are grad_input's kernels, each timed in the whole backward pass.

use anyhow::Result;
use clap::Args;
use convt::gpu::backward::grad_input;
use convt::gpu::tune::{self, TuneCache, TuneEntry};
use convt::gpu::Strategy;
use convt::suite::Case;
use convt::{GpuContext, GpuOptions, Precision};

use crate::bench::{median, Candidate, Pass, Prepared};
use crate::Outcome;

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// Cases to tune (default: all nine).
    #[arg(long, num_args = 1..)]
    case: Vec<String>,
    /// Override every case's batch size.
    #[arg(long)]
    batch: Option<usize>,
    /// Timed runs per candidate (median).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// The cache file (default: CONVT_TUNE_CACHE, else ~/.cache/convt/tune.json).
    #[arg(long)]
    cache: Option<std::path::PathBuf>,
    /// Tune for this precision: `f32` times the exact strategies, `fast` those with f16 operands this adapter
    /// runs (and the exact ones, which `fast` may also choose).
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// Tune the backward pass: grad_input's kernel (the forward's exact GEMM and Winograd kernels on the
    /// equivalent transposed convolution where the shape has one, at stride 1; elsewhere each exact GEMM tile on
    /// the sampled correlation; and the gather kernel), each timed in the whole backward; the winner is kept
    /// under the case's ` | grad_input` key.
    #[arg(long)]
    backward: bool,
}

/// Candidates timed a second time before the winner is chosen.
const FINALISTS: usize = 3;

pub fn run(a: TuneArgs) -> Result<Outcome> {
    let cases: Vec<Case> = crate::args::parse_cases(&a.case)?;
    if a.backward && a.precision != Precision::F32 {
        anyhow::bail!("the backward pass runs in exact f32 only: tune it without --precision fast");
    }
    let mut opts = GpuOptions::from_env()?;
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
    let what =
        if a.backward { "backward (grad_input's kernel)".to_string() } else { format!("precision {}", a.precision) };
    eprintln!("adapter: {}; cache: {}; {what}", ctx.adapter_info().name, path.display());
    for case in &cases {
        let case = a.batch.map_or(*case, |b| case.with_batch(b));
        let pass = if a.backward { Pass::Backward } else { Pass::Forward };
        let prepared = Prepared::new(&ctx, &case, pass)?;
        let mut timed: Vec<(Candidate, f64)> = Vec::new();
        let mut line = format!("{:<6}", case.name);
        // The candidates that compute this shape (the Winograd tiles take stride-1 shapes only), or grad_input's.
        let candidates: Vec<Candidate> = if a.backward {
            grad_input::candidates(&ctx, &prepared.shape).into_iter().map(Candidate::GradInput).collect()
        } else {
            Strategy::candidates_for(&ctx, a.precision)
                .into_iter()
                .filter(|s| s.computes(&ctx, &prepared.shape))
                .map(Candidate::Forward)
                .collect()
        };
        for (i, candidate) in candidates.into_iter().enumerate() {
            // The GPU idled while the case's inputs were drawn (and clocked down): the first candidate warms it
            // up for a second; each other one keeps it busy for a fraction of that after its pipelines are built
            // (the GPU idles while the driver compiles them; two calls of a 1-3 ms kernel measured up to twice
            // as slow as after a full warm-up on the H100).
            let min_warmup = std::time::Duration::from_millis(if i == 0 { 1000 } else { 250 });
            match prepared.time(&ctx, Some(candidate), a.warmup, min_warmup, a.runs) {
                Ok(times) => {
                    let ms = median(times);
                    line += &format!("  {} {:.3}", candidate.name(), ms);
                    timed.push((candidate, ms));
                }
                // A candidate this adapter cannot run (a tile too large for it, say) is skipped.
                Err(e) => line += &format!("  {} skipped ({e})", candidate.name()),
            }
        }
        // The fastest few again, back to back: the winner is the fastest of this second round.
        timed.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut best: Option<(Candidate, f64)> = None;
        line += "\n       again:";
        for &(candidate, _) in timed.iter().take(FINALISTS) {
            let ms = median(prepared.time(
                &ctx,
                Some(candidate),
                a.warmup,
                std::time::Duration::from_millis(250),
                a.runs,
            )?);
            line += &format!("  {} {:.3}", candidate.name(), ms);
            if best.is_none_or(|(_, b)| ms < b) {
                best = Some((candidate, ms));
            }
        }
        if let Some((candidate, ms)) = best {
            println!("{line}\n       -> {} {:.3} ms", candidate.name(), ms);
            let key = if a.backward {
                tune::grad_input_key(ctx.adapter_info(), &prepared.shape)
            } else {
                tune::key(ctx.adapter_info(), &prepared.shape, case.bias, a.precision)
            };
            cache.entries.insert(key, TuneEntry::new(candidate.name(), ms, a.precision));
            cache.save(&path)?; // after every case, so an interrupted run keeps what it measured
        }
    }
    Ok(Outcome::Ok)
}
