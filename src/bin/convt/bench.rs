//! `convt bench`: GPU-timestamp benchmark of the suite cases (the convolution's compute pass only), after
//! warm-up, median of many runs, on random inputs (several input sets rotated when they would fit in cache).
//! `--backward` times the backward pass instead (all three gradients, one compute pass, random grad_output).
//! `--ceilings` first measures the adapter's FMA rate and copy bandwidth and reports each case against them.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use convt::gpu::{
    conv_transpose2d_backward_into, conv_transpose2d_into, select, BackwardRun, CallProfile, Dispatch, GpuGradients,
    GpuTimer, GradInputKernel, GradWeightKernel, Profiler, Run, Strategy,
};
use convt::io::OutputFile;
use convt::suite::Case;
use convt::{
    cpu, ConvShape, ConvTranspose2d, DType, ErrorStats, GpuContext, GpuConvTranspose2d, GpuTensor, Precision, Tensor,
};
use serde_json::json;

use crate::ceilings::{self, Ceilings};
use crate::Outcome;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The problems: suite cases, or one shape given by flags.
    #[command(flatten)]
    shape: crate::args::ShapeArgs,
    /// Timed runs per case (the median is reported).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Untimed runs before timing.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Measure the adapter's FMA and copy ceilings first and report each case against them.
    #[arg(long)]
    ceilings: bool,
    /// Time the backward pass (grad_input, grad_weight and grad_bias from a random grad_output) instead of the
    /// forward; TFLOP/s count twice the forward's useful FLOPs.
    #[arg(long)]
    backward: bool,
    /// Arithmetic of the forward and the backward: `f32` (exact) or `fast` (the fastest kernel within 1e-3: f16 operands with f32
    /// accumulation, or an exact kernel where that measured faster). Each case line names the kernel that ran.
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// The tensors' dtype (f32, f16, bf16): inputs, weights and results in it, as PyTorch's tensors of that dtype.
    #[arg(long, default_value = "f32")]
    dtype: DType,
    /// After timing, compare this many randomly placed output elements of the last run with the float64
    /// reference (relative L2 error in the table and the JSON; 0: no check). With --backward: this many grad_input
    /// elements, a hundredth as many (at least 16) of grad_weight's (each sums over the whole batch), and all of
    /// grad_bias's, each gradient's error in the JSON and the table, against the tolerance `convt verify` holds it
    /// to.
    #[arg(long, default_value_t = 20_000)]
    check_samples: usize,
    /// The results as JSON: on stdout with no value (the table then goes to stderr), else into this file (never
    /// the tuning cache).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// Time the forward as a layer's repeated calls (`GpuConvTranspose2d::forward_into`: the weight prepared for
    /// its kernel once) instead of the functional call, which prepares it on every call. With --train, the step
    /// through a layer (f32 activations): its forward, backward and SGD step, the weight prepared again after
    /// each update.
    #[arg(long, conflicts_with = "backward")]
    layer: bool,
    /// After timing, time each dispatch of as many calls (with --train, steps) on its own (GPU timestamps inside the
    /// passes) and report each kernel's median share of a call, in the table and the JSON (`profile`), and the
    /// dispatches' sum (`busy_ms`): where a call's time goes, and for a step how long the GPU waited between its
    /// submissions (the step's time less that sum).
    #[arg(long)]
    profile: bool,
    /// Time a training step instead (src/bin/convt/train.rs): the f32 master weight and bias cast to --dtype, the
    /// forward, the backward with f32 weight and bias gradients, an SGD step on the master copy; from a GPU
    /// timestamp before its first submission to one after its last. TFLOP/s count three times the forward's
    /// useful FLOPs; the error is grad_weight's (check_samples / 100 elements, at least 16).
    #[arg(long, conflicts_with = "backward")]
    train: bool,
}

/// Inputs smaller than this are rotated among several copies so that repeated runs do not measure the cache.
const ROTATE_BELOW_BYTES: usize = 256 << 20;

/// Which pass of the convolution a benchmark times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// `output` from `input`, `weight` and `bias`.
    Forward,
    /// `grad_input`, `grad_weight` and (with a bias) `grad_bias` from `grad_output`, in one compute pass.
    Backward,
}

impl Pass {
    pub fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
        }
    }

    /// Useful FLOPs of one call: the forward's, or twice them for the backward (`grad_input` and `grad_weight`
    /// each cost the forward's multiply-adds; the bias gradient's sums are not counted).
    pub fn useful_flops(self, shape: &ConvShape) -> u64 {
        match self {
            Pass::Forward => shape.useful_flops(),
            Pass::Backward => 2 * shape.useful_flops(),
        }
    }

    /// Bytes moved if every tensor (of `dtype`) is read or written once: the forward's input, weight, bias and
    /// output; the backward's input, weight and grad_output read, grad_input, grad_weight and grad_bias written.
    pub fn min_bytes(self, shape: &ConvShape, has_bias: bool, dtype: DType) -> u64 {
        let n = |d: Vec<usize>| d.iter().product::<usize>() as u64;
        let f32_bytes = match self {
            Pass::Forward => shape.min_bytes(has_bias),
            Pass::Backward => shape.min_bytes(has_bias) + 4 * (n(shape.input_dims()) + n(shape.weight_dims())),
        };
        f32_bytes / 4 * dtype.size() as u64
    }
}

/// One set of the tensors a timed call reads and that change from call to call (rotated against the cache).
pub struct InputSet {
    pub input: GpuTensor,
    /// The backward's `grad_output`; `None` for the forward.
    grad_output: Option<GpuTensor>,
}

/// The kernels a call ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// The forward's algorithm.
    Forward(Strategy),
    /// The backward's grad_input and grad_weight kernels (grad_bias has one).
    Backward(GradInputKernel, GradWeightKernel),
}

/// Where a timed call writes.
enum Outputs {
    Forward(GpuTensor),
    Backward(GpuGradients),
}

/// A case's tensors on the GPU, ready to time one pass.
pub struct Prepared {
    pub case: Case,
    pub pass: Pass,
    /// The precision, forward and backward, when no kernel is given (the selector's choice at it).
    pub precision: Precision,
    pub shape: ConvShape,
    pub inputs: Vec<InputSet>,
    weight: GpuTensor,
    bias: Option<GpuTensor>,
    outputs: Outputs,
    /// The forward as a layer with these weights (`--layer`): timed instead of the functional call.
    layer: Option<GpuConvTranspose2d>,
    /// The kernels the last call ran.
    ran: std::cell::Cell<Option<Ran>>,
    /// The input set of the last call (whose outputs the error checks read).
    last_set: std::cell::Cell<usize>,
}

/// The backward's kernels where a caller gives them (`None`: the selector's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackwardKernels {
    pub grad_input: Option<GradInputKernel>,
    pub grad_weight: Option<GradWeightKernel>,
}

/// What `convt tune` times on a prepared case: a forward strategy, or the backward with some of its kernels given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidate {
    Forward(Strategy),
    Backward(BackwardKernels),
}

impl Candidate {
    /// The name the tuner prints and caches: the strategy's, or that of the backward's kernel being tuned (its
    /// grad_weight kernel where given, else its grad_input kernel).
    pub fn name(&self) -> String {
        match self {
            Candidate::Forward(s) => s.name(),
            Candidate::Backward(BackwardKernels { grad_weight: Some(k), .. }) => k.name(),
            Candidate::Backward(BackwardKernels { grad_input: Some(k), .. }) => k.cache_name(),
            Candidate::Backward(_) => "backward".into(),
        }
    }
}

impl InputSet {
    /// The backward's `grad_output`.
    pub fn grad_output(&self) -> Option<&GpuTensor> {
        self.grad_output.as_ref()
    }
}

impl Prepared {
    /// Random inputs U(0,1) (and for the backward grad_output U(-1,1)), several sets when small enough to sit in
    /// cache, weight and bias U(-0.1,0.1), and the outputs of a case's `pass`, all of `dtype`.
    pub fn new(ctx: &GpuContext, case: &Case, pass: Pass, dtype: DType) -> Result<Self> {
        let shape = case.params.resolve(
            &case.input_dims(),
            &case.weight_dims(),
            case.bias.then_some(&[case.out_channels][..]),
        )?;
        let numel = |d: Vec<usize>| d.iter().product::<usize>();
        let rotated_bytes = dtype.size()
            * match pass {
                Pass::Forward => numel(shape.input_dims()),
                Pass::Backward => numel(shape.input_dims()) + numel(shape.output_dims()),
            };
        let sets = ROTATE_BELOW_BYTES.div_ceil(rotated_bytes.max(1)).clamp(1, 4);
        let inputs: Vec<InputSet> = (0..sets as u64)
            .map(|i| {
                let random = |dims, low, seed| Ok(Tensor::uniform(dims, low, 1.0, seed)?.to_dtype(dtype));
                let input = GpuTensor::upload(ctx, &random(shape.input_dims(), 0.0, 100 + i)?)?;
                let grad_output = (pass == Pass::Backward)
                    .then(|| GpuTensor::upload(ctx, &random(shape.output_dims(), -1.0, 200 + i)?))
                    .transpose()?;
                Ok(InputSet { input, grad_output })
            })
            .collect::<convt::Result<_>>()?;
        let weight = GpuTensor::upload(ctx, &Tensor::uniform(shape.weight_dims(), -0.1, 0.1, 1)?.to_dtype(dtype))?;
        let bias = case
            .bias
            .then(|| GpuTensor::upload(ctx, &Tensor::uniform(vec![shape.out_channels], -0.1, 0.1, 2)?.to_dtype(dtype)))
            .transpose()?;
        let outputs = match pass {
            Pass::Forward => Outputs::Forward(GpuTensor::empty_with(ctx, &shape.output_dims(), dtype)?),
            Pass::Backward => {
                Outputs::Backward(GpuGradients::empty(ctx, &inputs[0].input, &weight, bias.as_ref(), &case.params)?)
            }
        };
        Ok(Self {
            case: *case,
            pass,
            precision: Precision::F32,
            shape,
            inputs,
            weight,
            bias,
            outputs,
            layer: None,
            ran: Default::default(),
            last_set: Default::default(),
        })
    }

    /// Times the forward as a layer of these weights at `precision` from now on.
    pub fn as_layer(&mut self, ctx: &GpuContext, precision: Precision) -> Result<()> {
        let weight = self.weight.download(ctx)?;
        let bias = self.bias.as_ref().map(|b| b.download(ctx)).transpose()?;
        let mut layer = ConvTranspose2d::from_weights(weight, bias, self.case.params)?;
        layer.set_precision(precision);
        self.precision = precision;
        self.layer = Some(layer.to_gpu(ctx)?);
        Ok(())
    }

    /// Relative L2 error of the forward output last written (from input set `set`) at `samples` random
    /// positions, against the float64 reference there. Downloads the whole output.
    pub fn sampled_error(&self, ctx: &GpuContext, set: usize, samples: usize) -> Result<ErrorStats> {
        let Outputs::Forward(output) = &self.outputs else { bail!("only the forward's output is checked") };
        let out = output.download(ctx)?;
        let (x, w) = (self.inputs[set].input.download(ctx)?, self.weight.download(ctx)?);
        let b = self.bias.as_ref().map(|b| b.download(ctx)).transpose()?;
        let (got, want): (Vec<f32>, Vec<f64>) =
            crate::verify::sample_positions(&self.shape.output_dims(), samples.min(out.numel()), 7)
                .into_iter()
                .map(|(i, p)| {
                    (out.data()[i], cpu::output_at(&self.shape, x.data(), w.data(), b.as_ref().map(|b| b.data()), p))
                })
                .unzip();
        Ok(ErrorStats::compare(&got, &want))
    }

    /// Relative L2 errors of the gradients last written (from input set `set`) against the float64 reference:
    /// grad_input at `samples` random positions, grad_weight at a hundredth as many (at least 16: each of its
    /// elements sums over the whole batch), grad_bias in full. Downloads the tensors whole.
    pub fn backward_errors(
        &self,
        ctx: &GpuContext,
        set: usize,
        samples: usize,
    ) -> Result<Vec<(&'static str, ErrorStats)>> {
        let Outputs::Backward(grads) = &self.outputs else { bail!("only the backward's gradients are checked here") };
        let g = grads.download(ctx)?;
        let Some(go) = &self.inputs[set].grad_output else { bail!("backward input sets carry a grad_output") };
        let (x, w, go) = (self.inputs[set].input.download(ctx)?, self.weight.download(ctx)?, go.download(ctx)?);
        let shape = &self.shape;
        let mut errors = vec![
            (
                "grad_input",
                sampled_error(&g.grad_input, samples, 7, &|p| cpu::grad_input_at(shape, go.data(), w.data(), p)),
            ),
            (
                "grad_weight",
                sampled_error(&g.grad_weight, (samples / 100).max(16), 8, &|p| {
                    cpu::grad_weight_at(shape, x.data(), go.data(), p)
                }),
            ),
        ];
        if let Some(gb) = &g.grad_bias {
            errors.push(("grad_bias", ErrorStats::compare(gb.data(), &cpu::grad_bias_f64(shape, go.data())?)));
        }
        Ok(errors)
    }

    /// The kernels the last timed call ran, or where none has run yet the selector's choice.
    pub fn ran(&self, ctx: &GpuContext) -> Ran {
        if let Some(ran) = self.ran.get() {
            return ran;
        }
        match self.pass {
            Pass::Forward => {
                Ran::Forward(select::forward(ctx, &self.shape, self.case.bias, self.precision, self.weight.dtype()))
            }
            Pass::Backward => {
                let set = &self.inputs[0];
                let chunks = [set.input.chunks().len(), set.grad_output.as_ref().map_or(1, |g| g.chunks().len())];
                Ran::Backward(
                    select::grad_input(ctx, &self.shape, self.precision, self.weight.dtype()),
                    select::grad_weight(ctx, &self.shape, chunks, self.precision, self.weight.dtype()),
                )
            }
        }
    }

    /// What runs: the forward's algorithm, or "backward" with grad_input's and grad_weight's kernels (those of the
    /// last timed call; before one, the selector's choice).
    pub fn algorithm(&self, ctx: &GpuContext) -> String {
        match self.ran(ctx) {
            Ran::Forward(strategy) if self.layer.is_some() => {
                format!("{} (layer, weight prepared once)", strategy.name())
            }
            Ran::Forward(strategy) => strategy.name(),
            Ran::Backward(gi, gw) => format!("backward, grad_input {}, {}", gi.name(), gw.name()),
        }
    }

    /// GPU times (ms) of `runs` calls after `warmup` untimed ones, and the buffers the timed calls allocated (none
    /// where each call finds its scratch idle in the pool; a buffer allocated anew may land elsewhere in device
    /// memory, which a call's time can follow). `candidate` picks the forward's algorithm or the backward's
    /// kernels; without one the selector (`gpu::select`) does.
    /// The warm-up is `warmup` calls, repeated until the GPU has been busy for `min_warmup`.
    pub fn time(
        &self,
        ctx: &GpuContext,
        candidate: Option<Candidate>,
        warmup: u32,
        min_warmup: std::time::Duration,
        runs: u32,
    ) -> Result<(Vec<f64>, u64)> {
        let timer = GpuTimer::new(ctx, runs)?;
        let candidate = candidate.or_else(|| self.selected(ctx));
        warm_up(ctx, warmup, min_warmup, |i| {
            self.call(ctx, candidate, &self.inputs[i as usize % self.inputs.len()], None)
        })?;
        let created = ctx.buffer_stats().0;
        for i in warmup..warmup + runs {
            let slot = Some((&timer, i - warmup));
            let set = &self.inputs[i as usize % self.inputs.len()];
            self.call(ctx, candidate, set, slot)?;
        }
        ctx.device().poll(wgpu::PollType::Wait { submission_index: None, timeout: None }).ok();
        let created = ctx.buffer_stats().0 - created;
        Ok((timer.read_ms(ctx, runs)?, created))
    }

    /// The candidate a call runs without one given: the selector's forward strategy for a functional forward; none
    /// for a layer (which picks its own) or the backward (whose selector runs in the call).
    fn selected(&self, ctx: &GpuContext) -> Option<Candidate> {
        match self.pass {
            Pass::Forward if self.layer.is_none() => Some(Candidate::Forward(select::forward(
                ctx,
                &self.shape,
                self.case.bias,
                self.precision,
                self.weight.dtype(),
            ))),
            _ => None,
        }
    }

    /// Each pipeline's and each section's median time in a call, over `runs` calls whose every dispatch is timed on
    /// its own ([`Profiler`]). Run after [`Prepared::time`] (warm: the pipelines built, the GPU busy).
    pub fn profile(&self, ctx: &GpuContext, runs: u32) -> Result<Profile> {
        profile_calls(ctx, runs, |i| {
            self.call(ctx, self.selected(ctx), &self.inputs[i as usize % self.inputs.len()], None)
        })
    }

    /// One call of the pass on input set `set`, timed into `slot` if given; records the kernels that ran.
    /// `candidate`: the forward's strategy (none for a layer, which picks its own), or the backward's kernels
    /// (`None`: the selector's at the prepared precision).
    fn call(
        &self,
        ctx: &GpuContext,
        candidate: Option<Candidate>,
        set: &InputSet,
        slot: Option<(&GpuTimer, u32)>,
    ) -> Result<()> {
        // The backward's selector reads the precision from the options (the forward's strategy is given, or a
        // layer holds its own).
        let params = self.case.params.precision(self.precision);
        let (weight, bias, params) = (&self.weight, self.bias.as_ref(), &params);
        let backward = |grads: &GpuGradients, kernels: BackwardKernels| -> Result<Ran> {
            let Some(go) = &set.grad_output else { bail!("backward input sets carry a grad_output") };
            let run = BackwardRun { grad_input: kernels.grad_input, grad_weight: kernels.grad_weight, timer: slot };
            let (gi, gw) = conv_transpose2d_backward_into(ctx, &set.input, weight, bias, go, params, grads, run)?;
            Ok(Ran::Backward(gi, gw))
        };
        let ran = match (&self.outputs, candidate) {
            (Outputs::Forward(output), Some(Candidate::Forward(strategy))) => {
                let run = Run { kernel: Some(strategy), timer: slot };
                Ran::Forward(conv_transpose2d_into(ctx, &set.input, weight, bias, params, output, run)?)
            }
            (Outputs::Forward(output), None) => match &self.layer {
                Some(layer) => Ran::Forward(layer.forward_into(&set.input, output, slot)?),
                None => bail!("the forward is timed with a strategy or as a layer"),
            },
            (Outputs::Backward(grads), None) => backward(grads, BackwardKernels::default())?,
            (Outputs::Backward(grads), Some(Candidate::Backward(kernels))) => backward(grads, kernels)?,
            _ => bail!("a forward strategy times the forward, backward kernels the backward"),
        };
        self.ran.set(Some(ran));
        self.last_set.set(self.inputs.iter().position(|s| std::ptr::eq(s, set)).unwrap_or(0));
        Ok(())
    }
}

/// Warm-up against the clocks, before timing `call` (given the call's number): a first call, which builds the
/// pipelines (the GPU idles while the driver compiles them, so the clock starts after it), then rounds of `warmup`
/// calls back to back until the GPU has been busy for `min_warmup` (a GPU left idle, as while the previous case's
/// error was checked on the CPU, clocks down: its first calls measured several times slower, docs/PERFORMANCE.md),
/// or `MAX_WARMUP_ROUNDS` rounds, a bound for calls too short to keep a GPU busy.
pub fn warm_up(
    ctx: &GpuContext,
    warmup: u32,
    min_warmup: std::time::Duration,
    mut call: impl FnMut(u32) -> Result<()>,
) -> Result<()> {
    call(0)?;
    ctx.wait_idle()?;
    let started = std::time::Instant::now();
    for _ in 0..MAX_WARMUP_ROUNDS {
        for i in 0..warmup.max(1) {
            call(i)?;
        }
        ctx.wait_idle()?;
        if started.elapsed() >= min_warmup {
            break;
        }
    }
    Ok(())
}

/// The most rounds of warm-up calls.
const MAX_WARMUP_ROUNDS: u32 = 1000;

/// Each pipeline's and each section's median time in a call, over `runs` calls of `call` (given the call's number)
/// whose every dispatch is timed on its own ([`Profiler`]). Run warm: the pipelines built, the GPU busy.
fn profile_calls(ctx: &GpuContext, runs: u32, mut call: impl FnMut(u32) -> Result<()>) -> Result<Profile> {
    let profiler = std::sync::Arc::new(Profiler::new(ctx)?);
    ctx.set_profiler(Some(profiler.clone()));
    let mut calls: Vec<CallProfile> = Vec::new();
    let mut record = || -> Result<()> {
        for i in 0..runs {
            profiler.begin_call();
            let before = profiler.recorded();
            call(i)?;
            // Read before the query set can run out: when it has no room for another call like this one.
            let used = profiler.recorded() - before;
            if profiler.room() <= used || i + 1 == runs {
                let (read, dropped) = profiler.read(ctx)?;
                if dropped > 0 {
                    bail!("{dropped} dispatches of one call went untimed (more than the profiler's room)");
                }
                calls.extend(read);
            }
        }
        Ok(())
    };
    let recorded = record();
    ctx.set_profiler(None);
    recorded?;
    // The median over the calls of what `part` picks of each, with the most dispatches it picked in one call, and
    // the least and the most any call took.
    let median_of = |part: &dyn Fn(&Dispatch) -> bool| {
        let per_call: Vec<(usize, f64)> = calls
            .iter()
            .map(|c| c.iter().filter(|d| part(d)).fold((0, 0.0), |(n, ms), d| (n + 1, ms + d.ms)))
            .collect();
        let count = per_call.iter().map(|&(n, _)| n).max().unwrap_or(0);
        let ms: Vec<f64> = per_call.into_iter().map(|(_, ms)| ms).collect();
        let spread = Spread {
            min: ms.iter().copied().fold(f64::INFINITY, f64::min),
            max: ms.iter().copied().fold(0.0, f64::max),
        };
        (count, median(ms), spread)
    };
    let mut pipelines: Vec<String> = Vec::new();
    let mut sections: Vec<&'static str> = Vec::new();
    for d in calls.iter().flatten() {
        if !pipelines.contains(&d.pipeline) {
            pipelines.push(d.pipeline.clone());
        }
        if let Some(s) = d.section.filter(|s| !sections.contains(s)) {
            sections.push(s);
        }
    }
    Ok(Profile {
        pipelines: pipelines
            .into_iter()
            .map(|name| {
                let (count, ms, spread) = median_of(&|d| d.pipeline == name);
                (name, count, ms, spread)
            })
            .collect(),
        sections: sections.into_iter().map(|s| (s, median_of(&|d| d.section == Some(s)).1)).collect(),
        busy_ms: median_of(&|_| true).1,
    })
}

/// The least and the most ms of one pipeline in a call, over the profiled calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spread {
    pub min: f64,
    pub max: f64,
}

/// A pipeline's spread over the calls is shown in the table where its slowest call took this much more than its
/// fastest: run-to-run variance to look into.
const SPREAD_SHOWN: f64 = 1.03;

/// Where a call's time goes (`--profile`): each pipeline, in the order they first ran, with its dispatches per call,
/// its median ms per call and the least and most a call took; each section the call names (the backward's gradients), with its median ms per call;
/// and the median over the calls of all their dispatches' ms (`busy_ms`: a timestamp is written once the commands
/// before it have finished, so a gap in which the GPU waited for the next submission counts in no dispatch).
#[derive(Debug, Default)]
pub struct Profile {
    pub pipelines: Vec<(String, usize, f64, Spread)>,
    pub sections: Vec<(&'static str, f64)>,
    pub busy_ms: f64,
}

/// The least time the benchmark keeps the GPU busy before timing a case.
const MIN_WARMUP: std::time::Duration = std::time::Duration::from_millis(1000);

/// The relative L2 error of `t` at `count` random elements (`seed`'s draw, at most all of them) against the float64
/// values `at` gives for their positions.
pub fn sampled_error(t: &Tensor, count: usize, seed: u64, at: &dyn Fn([usize; 4]) -> f64) -> ErrorStats {
    let (got, want): (Vec<f32>, Vec<f64>) = crate::verify::sample_positions(t.shape(), count.min(t.numel()), seed)
        .into_iter()
        .map(|(i, p)| (t.data()[i], at(p)))
        .unzip();
    ErrorStats::compare(&got, &want)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(a: BenchArgs) -> Result<Outcome> {
    let cases: Vec<Case> = a.shape.cases()?;
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    // The JSON file's path is checked before anything is measured.
    let json_stdout = a.json.as_deref() == Some(std::path::Path::new("-"));
    if let Some(path) = a.json.as_deref().filter(|_| !json_stdout) {
        crate::args::not_the_tune_cache(path, "--json")?;
    }
    if a.train {
        crate::train::check_layer(a.layer, a.dtype)?;
    }
    let json_out = a.json.as_deref().filter(|_| !json_stdout).map(|p| OutputFile::create(p, &[])).transpose()?;
    // The table: on stdout, or on stderr where stdout carries the JSON.
    let table = |line: String| if json_stdout { eprintln!("{line}") } else { println!("{line}") };
    let ctx = crate::args::gpu_context()?;
    let info = ctx.adapter_info().clone();
    eprintln!("adapter: {} ({:?}, driver {} {})", info.name, info.backend, info.driver, info.driver_info);
    let ceil: Option<Ceilings> = if a.ceilings {
        let c = ceilings::measure(&ctx, 1 << 30, a.warmup, a.runs)?;
        eprintln!("ceilings: fp32 FMA {:.1} TFLOP/s, copy {:.0} GB/s", c.fma_tflops, c.copy_gbs);
        if let (Some(products), Some(with_loads)) = (c.coop_tflops, c.coop_with_loads_tflops) {
            eprintln!(
                "ceilings: f16 cooperative-matrix products {products:.1} TFLOP/s, with loads from workgroup memory {with_loads:.1} TFLOP/s"
            );
        }
        if let (Some(gemm), Some(kernel), Some(products)) = (c.gemm_tflops, &c.gemm_kernel, c.coop_tflops) {
            eprintln!(
                "yardstick: f16 GEMM {0}^3 (f32 accumulation) through {kernel}'s tiling, loads from storage included: {gemm:.1} TFLOP/s, {1:.0}% of the products ceiling",
                ceilings::GEMM_SIZE,
                100.0 * gemm / products
            );
        }
        if let (Some([plain, grouped, bk64, no_loads, no_copy]), Some(products)) = (c.gemm_staged_tflops, c.coop_tflops)
        {
            eprintln!(
                "yardstick: the same GEMM with both operands staged in workgroup memory (ceiling_gemm.wgsl): {plain:.1} TFLOP/s in row order, {grouped:.1} ({:.0}% of the products ceiling) with grouped workgroups, {bk64:.1} with K stages of 64; without its loads from storage {no_loads:.1}; without its copy into workgroup memory too {no_copy:.1}",
                100.0 * grouped / products
            );
        }
        if let Some(pipelined) = &c.gemm_pipelined {
            let rates: Vec<String> = pipelined
                .iter()
                .map(|p| {
                    let ceilings::Pipeline { bk, ring, ahead } = p.pipeline;
                    format!("K {bk} x {ring} buffers x {ahead} ahead {:.1}", p.tflops)
                })
                .collect();
            eprintln!("yardstick: the staged GEMM's pipelines (K per stage x stage buffers x stages of loads in flight), TFLOP/s: {}", rates.join("; "));
        }
        Some(c)
    } else {
        None
    };

    // The results' JSON document: the run's setting and a row per case.
    let write_doc = |json_out: Option<OutputFile>, pass: &str, rows: Vec<serde_json::Value>| -> Result<()> {
        let doc = json!({"adapter": info.name, "backend": format!("{:?}", info.backend), "driver": info.driver,
            "driver_info": info.driver_info, "pass": pass, "layer": a.layer, "precision": a.precision,
            "dtype": a.dtype, "runs": a.runs, "warmup": a.warmup, "tolerance": crate::verify::tolerance(a.precision, a.dtype),
            "shader_checks": format!("{:?}", ctx.options().shader_checks), "ceilings": ceil, "cases": rows});
        if let Some(out) = json_out {
            out.write_bytes(serde_json::to_string_pretty(&doc)?.as_bytes())?;
        } else if json_stdout {
            println!("{doc}");
        }
        Ok(())
    };
    if a.train {
        write_doc(json_out, "train", train_rows(&ctx, &a, &cases, &table)?)?;
        return Ok(Outcome::Ok);
    }
    let pass = if a.backward { Pass::Backward } else { Pass::Forward };
    eprintln!("pass: {}, precision {}, dtype {}", pass.name(), a.precision, a.dtype);
    // The errors are held to `convt verify`'s tolerance for this precision and dtype (reported, not enforced).
    let tolerance = crate::verify::tolerance(a.precision, a.dtype);
    let mut rows = Vec::new();
    table(format!(
        "{:<6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>10}  algorithm",
        "case", "ms", "min ms", "TFLOP/s", "GB/s", "%FMA", "%copy", "rel L2", "peak MB", "scratch MB"
    ));
    let mut over = Vec::new();
    for &case in &cases {
        let mut prepared = Prepared::new(&ctx, &case, pass, a.dtype)?;
        prepared.precision = a.precision;
        if a.layer {
            prepared.as_layer(&ctx, a.precision)?;
        }
        let shape = prepared.shape;
        // Device memory: what convt's buffers held at most during the timed calls, and of it the calls' scratch (above
        // the tensors and prepared weights held before them).
        ctx.wait_idle()?;
        let held = ctx.buffer_bytes_in_use();
        ctx.reset_peak_memory();
        let (times, created) = prepared.time(&ctx, None, a.warmup, MIN_WARMUP, a.runs)?;
        let peak = ctx.peak_memory();
        let scratch_mb = peak.saturating_sub(held) as f64 / 1e6;
        // The time's parts, the same calls again with every dispatch timed on its own (the candidate the selector
        // or the layer picks, as above).
        let profile = if a.profile { prepared.profile(&ctx, a.runs)? } else { Profile::default() };
        let last_set = prepared.last_set.get();
        // (tensor, its error): the forward's output, or each gradient.
        let errors: Vec<(&str, ErrorStats)> = match (pass, a.check_samples) {
            (_, 0) => Vec::new(),
            (Pass::Forward, n) => vec![("output", prepared.sampled_error(&ctx, last_set, n)?)],
            (Pass::Backward, n) => prepared.backward_errors(&ctx, last_set, n)?,
        };
        let ms = median(times.clone());
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        let (flops, bytes) = (pass.useful_flops(&shape), pass.min_bytes(&shape, case.bias, a.dtype));
        let tflops = flops as f64 / (ms * 1e-3) / 1e12;
        let gbs = bytes as f64 / (ms * 1e-3) / 1e9;
        let algorithm = prepared.algorithm(&ctx);
        let pct = |v: f64, c: Option<f64>| c.map_or("-".to_string(), |c| format!("{:.0}%", 100.0 * v / c));
        // The table's and the JSON's `rel_l2`: the forward's output, or grad_input's (as PyTorch's side reports
        // its backward); the largest decides whether the case is within the tolerance.
        let rel_l2 = errors.first().map(|(_, e)| e.rel_l2);
        // Every error within the tolerance (a NaN error is not).
        let within = (!errors.is_empty()).then(|| errors.iter().all(|(_, e)| e.rel_l2 <= tolerance));
        if within == Some(false) {
            over.push(case.name);
        }
        let gradient_errors = if pass == Pass::Backward && !errors.is_empty() {
            let each: Vec<String> = errors.iter().map(|(what, e)| format!("{what} {:.1e}", e.rel_l2)).collect();
            format!("  [rel L2: {}]", each.join(", "))
        } else {
            String::new()
        };
        table(format!(
            "{:<6} {:>9.3} {:>9.3} {:>9.2} {:>9.0} {:>8} {:>8} {:>9} {:>9.0} {:>10.0}  {algorithm}{gradient_errors}{}{}",
            case.name,
            ms,
            min,
            tflops,
            gbs,
            pct(tflops, ceil.as_ref().map(|c| c.fma_tflops)),
            pct(gbs, ceil.as_ref().map(|c| c.copy_gbs)),
            rel_l2.map_or("-".to_string(), |e| format!("{e:.1e}")),
            peak as f64 / 1e6,
            scratch_mb,
            if within == Some(false) { "  OVER TOLERANCE" } else { "" },
            if created > 0 { format!("  ({created} buffers allocated in the timed calls)") } else { String::new() }
        ));
        let mut row = json!({"case": case.name, "batch": case.batch, "ms": ms, "min_ms": min, "times_ms": times,
            "tflops": tflops, "gbs": gbs, "gflop": flops as f64 / 1e9, "gb": bytes as f64 / 1e9,
            "input_sets": prepared.inputs.len(), "algorithm": algorithm, "rel_l2": rel_l2,
            "error_samples": errors.first().map(|(_, e)| e.compared), "within_tolerance": within,
            "peak_mb": peak as f64 / 1e6, "scratch_mb": scratch_mb, "buffers_created": created});
        if let Ran::Backward(gi, gw) = prepared.ran(&ctx) {
            // Each gradient's kernel, and its error under the name PyTorch's side gives it
            // (`{mode}_grad_input_rel_l2` there, `grad_input_rel_l2` here), with the elements compared.
            row["grad_input_kernel"] = json!(gi.name());
            row["grad_weight_kernel"] = json!(gw.name());
            row["grad_input_precision"] = json!(gi.precision());
            row["grad_weight_precision"] = json!(gw.precision());
            for (what, e) in &errors {
                row[format!("{what}_rel_l2")] = json!(e.rel_l2);
                row[format!("{what}_samples")] = json!(e.compared);
            }
        }
        report_profile(&profile, a.profile, shape.useful_flops(), &table, &mut row);
        rows.push(row);
    }
    if !over.is_empty() {
        eprintln!("warning: {} over the tolerance {tolerance:.1e} (convt verify's)", over.join(", "));
    }
    write_doc(json_out, pass.name(), rows)?;
    Ok(Outcome::Ok)
}

/// `profile`'s lines in the table (each pipeline's ms per call; each section's, with its rate at `flops` where it
/// has one: each gradient costs the forward's useful FLOPs, grad_bias none) and, where `json`, its fields in `row`:
/// `profile` (the pipelines), `busy_ms`, `grad_weight_ms` and `grad_weight_tflops`, and so on.
fn report_profile(profile: &Profile, json: bool, flops: u64, table: &dyn Fn(String), row: &mut serde_json::Value) {
    for (kernel, dispatches, ms, spread) in &profile.pipelines {
        // The pipeline's name without its constants.
        let short = kernel.split(" [(").next().unwrap_or(kernel);
        let short = short.trim_end_matches(" Trusted").trim_end_matches(" Checked");
        let varies = match spread.max > spread.min * SPREAD_SHOWN {
            true => format!("  (calls {:.3} to {:.3} ms)", spread.min, spread.max),
            false => String::new(),
        };
        table(format!("{:<6} {ms:>9.3} {dispatches:>4} x {short}{varies}", ""));
    }
    let rate = |section: &str, ms: f64| match section {
        "grad_bias" => None,
        _ => Some(flops as f64 / (ms * 1e-3) / 1e12),
    };
    let parts: Vec<String> = profile
        .sections
        .iter()
        .map(|&(section, ms)| match rate(section, ms) {
            Some(t) => format!("{section} {ms:.3} ms ({t:.1} TFLOP/s)"),
            None => format!("{section} {ms:.3} ms"),
        })
        .collect();
    if !parts.is_empty() {
        table(format!("{:<6} {}", "", parts.join(", ")));
    }
    if json {
        row["profile"] = json!(profile
            .pipelines
            .iter()
            .map(|(kernel, dispatches, ms, spread)| {
                json!({"kernel": kernel, "dispatches": dispatches, "ms": ms, "min_ms": spread.min, "max_ms": spread.max})
            })
            .collect::<Vec<_>>());
        row["busy_ms"] = json!(profile.busy_ms);
        for &(section, ms) in &profile.sections {
            row[format!("{section}_ms")] = json!(ms);
            if let Some(t) = rate(section, ms) {
                row[format!("{section}_tflops")] = json!(t);
            }
        }
    }
}

/// `--train`: each case's training step (crate::train), a table line and a JSON row each.
fn train_rows(
    ctx: &GpuContext,
    a: &BenchArgs,
    cases: &[Case],
    table: &dyn Fn(String),
) -> Result<Vec<serde_json::Value>> {
    let how = if a.layer { "a layer's forward, backward and SGD step" } else { "cast, forward, backward, SGD step" };
    eprintln!("pass: train ({how}), precision {}, activations {}", a.precision, a.dtype);
    let tolerance = crate::verify::tolerance(a.precision, a.dtype);
    table(format!(
        "{:<6} {:>9} {:>9} {:>9} {:>9} {:>9}  kernels (forward; grad_input; grad_weight)",
        "case", "ms", "min ms", "TFLOP/s", "gw rel L2", "peak MB"
    ));
    let mut rows = Vec::new();
    for case in cases {
        let mut step = crate::train::Step::new(ctx, case, a.precision, a.dtype, a.layer)?;
        ctx.wait_idle()?;
        ctx.reset_peak_memory();
        let (times, (forward, gi, gw), created) = step.time(ctx, a.warmup, MIN_WARMUP, a.runs)?;
        let peak = ctx.peak_memory() as f64 / 1e6;
        let profile = match a.profile {
            true => profile_calls(ctx, a.runs, |_| step.run(ctx).map(|_| ()))?,
            false => Profile::default(),
        };
        let error = match a.check_samples {
            0 => None,
            n => Some(step.grad_weight_error(ctx, (n / 100).max(16))?),
        };
        let ms = median(times.clone());
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        let flops = 3 * step.shape.useful_flops();
        let tflops = flops as f64 / (ms * 1e-3) / 1e12;
        let within = error.as_ref().map(|e| e.rel_l2 <= tolerance);
        let kernels = format!("{}; {}; {}", forward.name(), gi.name(), gw.name());
        table(format!(
            "{:<6} {ms:>9.3} {min:>9.3} {tflops:>9.2} {:>9} {peak:>9.0}  {kernels}{}{}",
            case.name,
            error.as_ref().map_or("-".to_string(), |e| format!("{:.1e}", e.rel_l2)),
            if within == Some(false) { "  OVER TOLERANCE" } else { "" },
            if created > 0 { format!("  ({created} buffers allocated in the timed steps)") } else { String::new() }
        ));
        let mut row = json!({"case": case.name, "batch": case.batch, "ms": ms, "min_ms": min, "times_ms": times,
            "tflops": tflops, "gflop": flops as f64 / 1e9, "algorithm": kernels, "forward_kernel": forward.name(),
            "grad_input_kernel": gi.name(), "grad_weight_kernel": gw.name(),
            "grad_weight_rel_l2": error.as_ref().map(|e| e.rel_l2), "rel_l2": error.as_ref().map(|e| e.rel_l2),
            "error_samples": error.as_ref().map(|e| e.compared), "within_tolerance": within, "peak_mb": peak,
            "buffers_created": created});
        if a.profile {
            report_profile(&profile, true, step.shape.useful_flops(), table, &mut row);
            let busy = profile.busy_ms;
            table(format!(
                "{:<6} dispatches {busy:.3} ms of the step's {ms:.3} (the rest: the GPU waiting between submissions)",
                ""
            ));
        }
        rows.push(row);
    }
    Ok(rows)
}
