//! `convt bench`: GPU-timestamp benchmark of the suite cases (the convolution's compute pass only), after
//! warm-up, median of many runs, on random inputs (several input sets rotated when they would fit in cache).
//! `--ceilings` first measures the adapter's FMA rate and copy bandwidth and reports each case against them.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use convt::gpu::ceilings::{self, Ceilings};
use convt::gpu::{conv_transpose2d_with, GpuTimer, Strategy};
use convt::suite::Case;
use convt::{GpuContext, GpuTensor, Tensor};
use serde_json::json;

use crate::Outcome;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Cases to time (default: all nine).
    #[arg(long, num_args = 1..)]
    case: Vec<String>,
    /// Timed runs per case (the median is reported).
    #[arg(long, default_value_t = 30)]
    runs: u32,
    /// Untimed runs before timing.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Override every case's batch size (e.g. to run the suite on a small or software adapter).
    #[arg(long)]
    batch: Option<usize>,
    /// Measure the adapter's FMA and copy ceilings first and report each case against them.
    #[arg(long)]
    ceilings: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Inputs smaller than this are rotated among several copies so that repeated runs do not measure the cache.
const ROTATE_BELOW_BYTES: usize = 256 << 20;

/// A case's tensors on the GPU, ready to be timed.
pub struct Prepared {
    pub case: Case,
    pub shape: convt::ConvShape,
    pub inputs: Vec<GpuTensor>,
    weight: GpuTensor,
    bias: Option<GpuTensor>,
    output: GpuTensor,
}

impl Prepared {
    /// Random inputs (several sets when small enough to sit in cache), weight, bias and output of a case.
    pub fn new(ctx: &GpuContext, case: &Case) -> Result<Self> {
        let shape = case.params.resolve(
            &case.input_dims(),
            &case.weight_dims(),
            case.bias.then_some(&[case.out_channels][..]),
        )?;
        let input_bytes = shape.input_dims().iter().product::<usize>() * 4;
        let sets = ROTATE_BELOW_BYTES.div_ceil(input_bytes.max(1)).clamp(1, 4);
        let inputs: Vec<GpuTensor> = (0..sets)
            .map(|i| GpuTensor::upload(ctx, &Tensor::uniform(shape.input_dims(), 0.0, 1.0, 100 + i as u64)?))
            .collect::<convt::Result<_>>()?;
        let weight = GpuTensor::upload(ctx, &Tensor::uniform(shape.weight_dims(), -0.1, 0.1, 1)?)?;
        let bias = case
            .bias
            .then(|| GpuTensor::upload(ctx, &Tensor::uniform(vec![shape.out_channels], -0.1, 0.1, 2)?))
            .transpose()?;
        let output = GpuTensor::empty(ctx, &shape.output_dims())?;
        Ok(Self { case: *case, shape, inputs, weight, bias, output })
    }

    /// GPU times (ms) of `runs` calls after `warmup` untimed ones, with `strategy` or the selector's choice.
    pub fn time(&self, ctx: &GpuContext, strategy: Option<Strategy>, warmup: u32, runs: u32) -> Result<Vec<f64>> {
        let timer = GpuTimer::new(ctx, runs)?;
        let strategy = strategy.unwrap_or_else(|| convt::gpu::select(ctx, &self.shape, self.case.bias));
        for i in 0..warmup + runs {
            let slot = (i >= warmup).then(|| (&timer, i - warmup));
            let input = &self.inputs[i as usize % self.inputs.len()];
            let params = &self.case.params;
            conv_transpose2d_with(ctx, strategy, input, &self.weight, self.bias.as_ref(), params, &self.output, slot)?;
        }
        ctx.device().poll(wgpu::PollType::Wait { submission_index: None, timeout: None }).ok();
        Ok(timer.read_ms(ctx, runs)?)
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(a: BenchArgs) -> Result<Outcome> {
    let cases: Vec<Case> = crate::args::parse_cases(&a.case)?;
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let ctx = GpuContext::new()?;
    let info = ctx.adapter_info().clone();
    eprintln!("adapter: {} ({:?}, driver {} {})", info.name, info.backend, info.driver, info.driver_info);
    let ceil: Option<Ceilings> = if a.ceilings {
        let c = ceilings::measure(&ctx, 1 << 30, a.warmup, a.runs)?;
        eprintln!("ceilings: fp32 FMA {:.1} TFLOP/s, copy {:.0} GB/s", c.fma_tflops, c.copy_gbs);
        Some(c)
    } else {
        None
    };

    let mut rows = Vec::new();
    println!(
        "{:<6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}  algorithm",
        "case", "ms", "min ms", "TFLOP/s", "GB/s", "%FMA", "%copy"
    );
    for case in &cases {
        let case = match a.batch {
            Some(b) => case.with_batch(b),
            None => *case,
        };
        let prepared = Prepared::new(&ctx, &case)?;
        let shape = prepared.shape;
        let times = prepared.time(&ctx, None, a.warmup, a.runs)?;
        let ms = median(times.clone());
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        let tflops = shape.useful_flops() as f64 / (ms * 1e-3) / 1e12;
        let gbs = shape.min_bytes(case.bias) as f64 / (ms * 1e-3) / 1e9;
        let algorithm = convt::gpu::select(&ctx, &shape, case.bias).name();
        let pct = |v: f64, c: Option<f64>| c.map_or("-".to_string(), |c| format!("{:.0}%", 100.0 * v / c));
        println!(
            "{:<6} {:>9.3} {:>9.3} {:>9.2} {:>9.0} {:>8} {:>8}  {}",
            case.name,
            ms,
            min,
            tflops,
            gbs,
            pct(tflops, ceil.map(|c| c.fma_tflops)),
            pct(gbs, ceil.map(|c| c.copy_gbs)),
            algorithm
        );
        rows.push(json!({"case": case.name, "batch": case.batch, "ms": ms, "min_ms": min, "times_ms": times,
            "tflops": tflops, "gbs": gbs, "gflop": shape.useful_flops() as f64 / 1e9,
            "gb": shape.min_bytes(case.bias) as f64 / 1e9, "input_sets": prepared.inputs.len(), "algorithm": algorithm}));
    }
    if let Some(path) = a.json {
        let doc = json!({"adapter": info.name, "backend": format!("{:?}", info.backend), "driver": info.driver,
            "driver_info": info.driver_info, "runs": a.runs, "warmup": a.warmup,
            "shader_checks": format!("{:?}", ctx.options().shader_checks), "ceilings": ceil, "cases": rows});
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    Ok(Outcome::Ok)
}
