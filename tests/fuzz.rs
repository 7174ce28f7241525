//! Fuzzing on the stable toolchain (cargo-fuzz needs nightly): a seeded random-input loop per target, each input
//! run under `catch_unwind`, each result checked against an independent oracle.
//!
//! * `fuzz_params`: random `ConvTranspose2dOptions` (i64 values across the whole range, extremes included) and
//!   random input / weight / bias sizes (0 and huge included) into `params.resolve`. It must never panic, and its
//!   answer must be the one an independent re-implementation of the rules predicts, computed in u128 / i128: the
//!   same error variant (with the same values), or the same sizes, the output's from the output-size formula and
//!   every dimension but the batch at least 1. Accepted problems small enough run through the CPU reference,
//!   compared exactly (small integer values) with a naive scatter loop indexed in i128, which also checks
//!   `ConvShape::useful_macs` and `min_bytes`.
//! * `fuzz_safetensors`: random bytes, and random mutations (bit flips, truncation, header-length edits,
//!   insertions, deletions, number and dtype edits inside the JSON header, splices) of valid files written by
//!   `convt::io::save_tensors`, into `TensorFile::from_bytes`. It must never panic; it may return only
//!   `TensorFile` or `DType` errors, and `Ok` only with tensors that an independent reading of the header
//!   (serde_json's untyped values) finds, with the same shapes and bit-identical data.
//!
//! Each target runs for `CONVT_FUZZ_SECONDS` (default 30 in the full tier, 5 in the fast one) and prints its seed,
//! executions and outcomes. The seed is fresh each run; `CONVT_FUZZ_SEED=<seed>` replays a run. The first failure stops the target and fails the
//! test, naming the seed and the iteration (a safetensors input is also saved under the target's temp dir).
//! `scripts/fuzz.sh [SECONDS]` runs the long version; docs/RELIABILITY.md records its figures.

mod common;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use convt::io::{save_tensors, TensorFile};
use convt::MAX_TENSOR_BYTES;
use convt::{ConvTranspose2dOptions, ConvtError, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------------------

/// Each target's time: `CONVT_FUZZ_SECONDS`, else 30 s in the full tier and 5 s in the fast tier.
fn budget() -> Duration {
    let default = if common::full_tier() { 30.0 } else { 5.0 };
    let secs = std::env::var("CONVT_FUZZ_SECONDS").ok().and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(default);
    Duration::from_secs_f64(secs.max(0.0))
}

fn seed() -> u64 {
    if let Some(s) = std::env::var("CONVT_FUZZ_SEED").ok().and_then(|v| v.trim().parse::<u64>().ok()) {
        return s;
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (t as u64) ^ ((t >> 64) as u64) ^ (std::process::id() as u64).rotate_left(32)
}

/// Runs `one` on fresh inputs until the budget is spent; stops at the first failure (a panic, or an oracle
/// violation reported as `Err`) and reports it with the input, which `one` describes in its third argument
/// before using it. Prints the executions and the outcome counts.
fn run(target: &str, mut one: impl FnMut(&mut StdRng, u64, &mut String) -> Result<String, String>) {
    let seed = seed();
    let budget = budget();
    println!("fuzz {target}: seed {seed} (CONVT_FUZZ_SEED={seed} replays it), budget {budget:?}");
    let mut rng = StdRng::seed_from_u64(seed);
    let start = Instant::now();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut executions = 0u64;
    let mut input = String::new();
    while executions == 0 || start.elapsed() < budget {
        input.clear();
        let verdict = catch_unwind(AssertUnwindSafe(|| one(&mut rng, executions, &mut input)));
        let failure = match verdict {
            Ok(Ok(outcome)) => {
                *outcomes.entry(outcome).or_default() += 1;
                executions += 1;
                continue;
            }
            Ok(Err(violation)) => violation,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                format!("panic: {msg}")
            }
        };
        panic!("fuzz {target}: failure at execution {executions} (seed {seed}) on {input}: {failure}");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "fuzz {target}: {executions} executions in {secs:.1} s ({:.0}/s), 0 crashes, 0 oracle violations",
        executions as f64 / secs
    );
    for (outcome, n) in &outcomes {
        println!("fuzz {target}:   {n:>10}  {outcome}");
    }
}

/// The variant name of an error (`SizeOverflow`, `TensorFile`, ...).
fn variant(e: &ConvtError) -> String {
    let debug = format!("{e:?}");
    debug.split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default().to_string()
}

// ---------------------------------------------------------------------------------------------------------
// Target 1: parameter validation
// ---------------------------------------------------------------------------------------------------------

const HOSTILE_I64: &[i64] = &[
    i64::MIN,
    i64::MIN + 1,
    -(1 << 32),
    -(1 << 31),
    -3,
    -2,
    -1,
    0,
    1,
    2,
    3,
    (1 << 31) - 1,
    1 << 31,
    1 << 32,
    1 << 62,
    i64::MAX / 2,
    i64::MAX - 1,
    i64::MAX,
];

const HOSTILE_USIZE: &[usize] = &[
    0,
    1,
    2,
    (1 << 31) - 1,
    1 << 31,
    1 << 32,
    1 << 40,
    1 << 61,
    (1 << 61) + 1,
    1 << 62,
    usize::MAX / 4,
    usize::MAX / 4 + 1,
    usize::MAX / 2,
    usize::MAX / 2 + 1,
    usize::MAX - 1,
    usize::MAX,
];

/// An option value: small and plausible (`lo..=hi`), or hostile with probability `hostile`.
fn any_i64(rng: &mut StdRng, hostile: f64, lo: i64, hi: i64) -> i64 {
    if !rng.random_bool(hostile) {
        return rng.random_range(lo..=hi);
    }
    match rng.random_range(0..4) {
        0 | 1 => HOSTILE_I64[rng.random_range(0..HOSTILE_I64.len())],
        2 => {
            let v = 1i64.checked_shl(rng.random_range(0..63)).unwrap_or(1) + rng.random_range(-1..=1);
            if rng.random() {
                v
            } else {
                v.wrapping_neg()
            }
        }
        _ => rng.random(),
    }
}

/// A tensor dimension: small (1 to 6, sometimes 0), or hostile with probability `hostile`.
fn any_dim(rng: &mut StdRng, hostile: f64) -> usize {
    if !rng.random_bool(hostile) {
        return if rng.random_range(0..12) == 0 { 0 } else { rng.random_range(1..=6) };
    }
    match rng.random_range(0..3) {
        0 | 1 => HOSTILE_USIZE[rng.random_range(0..HOSTILE_USIZE.len())],
        _ => {
            if rng.random() {
                rng.random::<u64>() as usize
            } else {
                (1usize << rng.random_range(0..64)).wrapping_add(rng.random_range(0..=2)).wrapping_sub(1)
            }
        }
    }
}

fn dims(rng: &mut StdRng, hostile: f64, usual_rank: usize) -> Vec<usize> {
    let rank = if rng.random_bool(hostile / 4.0) { rng.random_range(0..=6) } else { usual_rank };
    (0..rank).map(|_| any_dim(rng, hostile)).collect()
}

#[derive(Debug, Clone)]
struct Case {
    params: ConvTranspose2dOptions,
    input: Vec<usize>,
    weight: Vec<usize>,
    bias: Option<Vec<usize>>,
}

fn any_case(rng: &mut StdRng) -> Case {
    // How hostile this case is: each value is extreme with this probability.
    let hostile = [0.01, 0.05, 0.2, 0.5][rng.random_range(0..4)];
    let pair = |rng: &mut StdRng, lo: i64, hi: i64| -> [i64; 2] {
        let h = any_i64(rng, hostile, lo, hi);
        if rng.random_range(0..3) == 0 {
            [h, h]
        } else {
            [h, any_i64(rng, hostile, lo, hi)]
        }
    };
    let params = ConvTranspose2dOptions {
        stride: pair(rng, 1, 4),
        padding: pair(rng, 0, 3),
        output_padding: pair(rng, 0, 2),
        dilation: pair(rng, 1, 3),
        groups: any_i64(rng, hostile, 1, 4),
        ..Default::default()
    };
    let rank = if rng.random_range(0..4) == 0 { 3 } else { 4 };
    let input = dims(rng, hostile, rank);
    let mut weight = dims(rng, hostile, 4);
    // Often consistent with the input and the groups, so that the later rules are reached.
    if rng.random_range(0..3) > 0 && input.len() >= 3 && !weight.is_empty() {
        weight[0] = input[input.len() - 3];
    }
    let bias = match rng.random_range(0..4) {
        0 => None,
        1 => Some(dims(rng, hostile, 1)),
        _ => weight.get(1).map(|&cog| vec![cog.wrapping_mul(params.groups.max(1) as usize)]),
    };
    Case { params, input, weight, bias }
}

/// What `resolve` must answer: the output's dimensions (batched), or the error variant with its values.
#[derive(Debug, PartialEq)]
enum Expected {
    Ok { out: [usize; 4] },
    Err { variant: String, detail: String },
}

fn err(variant: &'static str, detail: impl std::fmt::Debug) -> Expected {
    Expected::Err { variant: variant.into(), detail: format!("{detail:?}") }
}

/// One axis of the output-size formula `(in - 1) * s - 2p + d (k - 1) + op + 1`, exactly, for valid options and
/// sizes of at least 1: `None` when it exceeds i128 (larger than anything addressable).
fn exact_out(input: usize, s: i64, p: i64, d: i64, k: usize, op: i64) -> Option<i128> {
    let positive = ((input as u128 - 1).checked_mul(s as u128)?)
        .checked_add((k as u128 - 1).checked_mul(d as u128)?)?
        .checked_add(op as u128 + 1)?;
    let negative = 2 * p as u128;
    if positive >= negative {
        i128::try_from(positive - negative).ok()
    } else {
        Some(-((negative - positive) as i128))
    }
}

/// Whether a tensor's f32 byte count is at most MAX_TENSOR_BYTES, and its samples' (all but the first
/// dimension) too, so that an empty batch of samples too large to address is refused as well.
fn fits(d: &[usize]) -> bool {
    let bytes = |d: &[usize]| d.iter().try_fold(4u128, |acc, &x| acc.checked_mul(x as u128));
    let ok = |b: Option<u128>| b.is_some_and(|b| b <= MAX_TENSOR_BYTES as u128);
    ok(bytes(d)) && ok(bytes(&d[1..]))
}

/// The rules, re-implemented independently (in the order the library documents), in wide integers.
fn expected(c: &Case) -> Expected {
    let p = &c.params;
    let (batch, cin, h, w) = match c.input[..] {
        [n, ci, h, w] => (n, ci, h, w),
        [ci, h, w] => (1, ci, h, w),
        _ => return err("InputRank", &c.input),
    };
    if p.groups < 1 {
        return err("NonPositiveGroups", p.groups);
    }
    if p.stride[0] < 1 || p.stride[1] < 1 {
        return err("NonPositiveStride", p.stride);
    }
    if p.dilation[0] < 1 || p.dilation[1] < 1 {
        return err("NonPositiveDilation", p.dilation);
    }
    if p.padding[0] < 0 || p.padding[1] < 0 {
        return err("NegativePadding", p.padding);
    }
    if p.output_padding[0] < 0 || p.output_padding[1] < 0 {
        return err("NegativeOutputPadding", p.output_padding);
    }
    if (0..2).any(|a| p.output_padding[a] >= p.stride[a].max(p.dilation[a])) {
        return err("OutputPaddingTooLarge", (p.output_padding, p.stride, p.dilation));
    }
    let [wc, cog, kh, kw] = match c.weight[..] {
        [a, b, c, d] => [a, b, c, d],
        _ => return err("WeightRank", &c.weight),
    };
    if [wc, cog, kh, kw].contains(&0) {
        return err("EmptyWeight", &c.weight);
    }
    let groups = p.groups as u128;
    if !(wc as u128).is_multiple_of(groups) {
        return err("InChannelsNotDivisible", (wc, p.groups));
    }
    let cout = cog as u128 * groups;
    if cout > usize::MAX as u128 {
        return err("SizeOverflow", &c.weight);
    }
    let cout = cout as usize;
    if let Some(b) = &c.bias {
        if b[..] != [cout] {
            return err("BiasShape", (cout, b));
        }
    }
    if cin != wc {
        return err("ChannelMismatch", (wc, cin));
    }
    if h == 0 || w == 0 {
        return err("EmptyInput", &c.input);
    }
    let oh = exact_out(h, p.stride[0], p.padding[0], p.dilation[0], kh, p.output_padding[0]);
    let ow = exact_out(w, p.stride[1], p.padding[1], p.dilation[1], kw, p.output_padding[1]);
    // None: beyond i128 (the library saturates at i128::MAX).
    let (oh, ow) = (oh.unwrap_or(i128::MAX), ow.unwrap_or(i128::MAX));
    if oh < 1 || ow < 1 {
        let clamp = |v: i128| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        return err("OutputTooSmall", (h, w, clamp(oh), clamp(ow)));
    }
    if oh > usize::MAX as i128 || ow > usize::MAX as i128 {
        return err("OutputTooLarge", (h, w, oh, ow));
    }
    let input = [batch, cin, h, w];
    let out = [batch, cout, oh as usize, ow as usize];
    for d in [&input[..], &out[..], &[cin, cog, kh, kw][..]] {
        if !fits(d) {
            return err("SizeOverflow", d);
        }
    }
    Expected::Ok { out }
}

/// What `resolve` answered, in the oracle's terms.
fn actual(c: &Case) -> (Expected, Option<convt::ConvShape>) {
    match c.params.resolve(&c.input, &c.weight, c.bias.as_deref()) {
        Ok(s) => {
            let d = s.output_dims();
            (Expected::Ok { out: [d[0], d[1], d[2], d[3]] }, Some(s))
        }
        Err(e) => {
            let _ = e.to_string(); // formatting must not panic either
            let detail = match &e {
                ConvtError::InputRank { shape } | ConvtError::WeightRank { shape } => format!("{shape:?}"),
                ConvtError::EmptyWeight { shape } | ConvtError::EmptyInput { shape } => format!("{shape:?}"),
                ConvtError::SizeOverflow { shape } => format!("{shape:?}"),
                ConvtError::NonPositiveGroups { groups } => format!("{groups:?}"),
                ConvtError::NonPositiveStride { stride } => format!("{stride:?}"),
                ConvtError::NonPositiveDilation { dilation } => format!("{dilation:?}"),
                ConvtError::NegativePadding { padding } => format!("{padding:?}"),
                ConvtError::NegativeOutputPadding { output_padding } => format!("{output_padding:?}"),
                ConvtError::OutputPaddingTooLarge { output_padding, stride, dilation } => {
                    format!("{:?}", (output_padding, stride, dilation))
                }
                ConvtError::InChannelsNotDivisible { in_channels, groups } => format!("{:?}", (in_channels, groups)),
                ConvtError::BiasShape { expected, shape } => format!("{:?}", (expected, shape)),
                ConvtError::ChannelMismatch { expected, actual, .. } => format!("{:?}", (expected, actual)),
                ConvtError::OutputTooSmall { in_h, in_w, out_h, out_w } => format!("{:?}", (in_h, in_w, out_h, out_w)),
                ConvtError::OutputTooLarge { in_h, in_w, out_h, out_w } => format!("{:?}", (in_h, in_w, out_h, out_w)),
                other => format!("unexpected error {other:?}"),
            };
            (Expected::Err { variant: variant(&e), detail }, None)
        }
    }
}

/// The naive scatter form, indexed in i128 so that no size can wrap: the oracle for the CPU reference. Also
/// returns the multiply-adds that land inside the output (the oracle for `useful_macs`).
fn naive(s: &convt::ConvShape, x: &[f32], w: &[f32], b: Option<&[f32]>) -> (Vec<f32>, u64) {
    let mut macs = 0u64;
    let [ho, wo] = s.out_hw;
    let (cig, cog) = (s.in_per_group(), s.out_per_group());
    let mut out = vec![0f64; s.batch * s.out_channels * ho * wo];
    for n in 0..s.batch {
        for ic in 0..s.in_channels {
            let g = ic / cig;
            for ih in 0..s.in_hw[0] {
                for iw in 0..s.in_hw[1] {
                    let xv = x[((n * s.in_channels + ic) * s.in_hw[0] + ih) * s.in_hw[1] + iw] as f64;
                    for oc in 0..cog {
                        for kh in 0..s.kernel[0] {
                            let oh = ih as i128 * s.stride[0] as i128 + kh as i128 * s.dilation[0] as i128
                                - s.padding[0] as i128;
                            if oh < 0 || oh >= ho as i128 {
                                continue;
                            }
                            for kw in 0..s.kernel[1] {
                                let ow = iw as i128 * s.stride[1] as i128 + kw as i128 * s.dilation[1] as i128
                                    - s.padding[1] as i128;
                                if ow < 0 || ow >= wo as i128 {
                                    continue;
                                }
                                let wv = w[((ic * cog + oc) * s.kernel[0] + kh) * s.kernel[1] + kw] as f64;
                                let co = g * cog + oc;
                                macs += 1;
                                out[((n * s.out_channels + co) * ho + oh as usize) * wo + ow as usize] += xv * wv;
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(b) = b {
        for (i, v) in out.iter_mut().enumerate() {
            *v += b[(i / (ho * wo)) % s.out_channels] as f64;
        }
    }
    (out.into_iter().map(|v| v as f32).collect(), macs)
}

/// Small integers (exact in f32 sums of this size), so results compare exactly.
fn ints(rng: &mut StdRng, shape: Vec<usize>) -> Tensor {
    let n = shape.iter().product();
    Tensor::new(shape, (0..n).map(|_| rng.random_range(-3..=3) as f32).collect()).unwrap()
}

fn params_once(rng: &mut StdRng, input: &mut String) -> Result<String, String> {
    let case = any_case(rng);
    *input = format!("{case:?}");
    let want = expected(&case);
    let (got, shape) = actual(&case);
    if got != want {
        return Err(format!("{case:?}: resolve gave {got:?}, the rules say {want:?}"));
    }
    let Some(s) = shape else {
        let Expected::Err { variant, .. } = got else { unreachable!() };
        return Ok(format!("err {variant}"));
    };
    // Invariants of an accepted problem.
    let out = s.output_dims_as_given();
    let unbatched = case.input.len() == 3;
    let per_sample = if unbatched { &out[..] } else { &out[1..] };
    if s.input_dims_as_given() != case.input
        || out.len() != case.input.len()
        || s.unbatched != unbatched
        || per_sample.contains(&0)
        || s.weight_dims() != case.weight
        || s.in_channels % s.groups != 0
        || s.out_channels % s.groups != 0
    {
        return Err(format!("{case:?}: inconsistent shape {s:?}"));
    }
    // Small enough: the CPU reference against the naive loop.
    let numel = |d: &[usize]| d.iter().product::<usize>();
    let (ni, no, nw) = (numel(&s.input_dims()), numel(&s.output_dims()), numel(&s.weight_dims()));
    if ni > 4096 || no > 4096 || nw > 4096 || ni.saturating_mul(s.out_per_group() * s.kernel[0] * s.kernel[1]) > 200_000
    {
        return Ok("ok (large)".into());
    }
    let x = ints(rng, case.input.clone());
    let w = ints(rng, case.weight.clone());
    let b = case.bias.clone().map(|d| ints(rng, d));
    let cpu = convt::cpu::conv_transpose2d(&x, &w, b.as_ref(), &case.params).map_err(|e| format!("{case:?}: {e}"))?;
    let (reference, macs) = naive(&s, x.data(), w.data(), b.as_ref().map(|b| b.data()));
    if cpu.shape() != &out[..] || cpu.data() != &reference[..] {
        return Err(format!("{case:?}: the CPU reference disagrees with the naive loop"));
    }
    if s.useful_macs() != macs || s.useful_flops() != 2 * macs {
        return Err(format!("{case:?}: useful_macs {} but {macs} multiply-adds land in the output", s.useful_macs()));
    }
    let bytes = 4 * (ni + nw + no + if b.is_some() { s.out_channels } else { 0 }) as u64;
    if s.min_bytes(b.is_some()) != bytes {
        return Err(format!("{case:?}: min_bytes {} but the tensors hold {bytes} bytes", s.min_bytes(b.is_some())));
    }
    Ok("ok (CPU reference checked)".into())
}

#[test]
fn fuzz_params() {
    run("params", |rng, _, input| params_once(rng, input));
}

// ---------------------------------------------------------------------------------------------------------
// Target 2: the safetensors reader
// ---------------------------------------------------------------------------------------------------------

/// Valid files to mutate: written by `save_tensors` (f32, f16 and bf16, zero-sized dimensions and metadata
/// included), plus a few of dtypes convt does not read, written by the safetensors crate.
/// Each file comes with its tensors (`None` for the files convt does not read).
type Corpus = Vec<(Vec<u8>, Option<BTreeMap<String, Tensor>>)>;

fn corpus(rng: &mut StdRng) -> Corpus {
    let dir = std::env::temp_dir().join(format!("convt-fuzz-{}-{}", std::process::id(), rng.random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    let names = ["input", "weight", "bias", "grad_output", "w", "a.b", "\u{e9}t\u{e9}", ""];
    for i in 0..48 {
        let count = rng.random_range(0..=3);
        let mut tensors = BTreeMap::new();
        for _ in 0..count {
            let rank = rng.random_range(0..=4);
            let shape: Vec<usize> =
                (0..rank).map(|_| if rng.random_range(0..8) == 0 { 0 } else { rng.random_range(1..=3) }).collect();
            let n = shape.iter().product();
            let specials = [f32::NAN, f32::INFINITY, -0.0, f32::MIN_POSITIVE, 1.0];
            let data = (0..n)
                .map(|_| if rng.random_range(0..6) == 0 { specials[rng.random_range(0..5)] } else { rng.random() })
                .collect();
            // Each tensor in one of the dtypes convt reads, its values rounded to it.
            let dtype = convt::DType::ALL[rng.random_range(0..3)];
            let t = Tensor::new(shape, data).unwrap().to_dtype(dtype);
            tensors.insert(names[rng.random_range(0..names.len())].to_string(), t);
        }
        let metadata = (i % 3 == 0).then(|| [("params".to_string(), r#"{"stride": [2, 2]}"#.to_string())].into());
        let path = dir.join(format!("{i}.safetensors"));
        let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        save_tensors(&path, &refs, metadata).unwrap();
        files.push((std::fs::read(&path).unwrap(), Some(tensors)));
    }
    let _ = std::fs::remove_dir_all(&dir);
    use safetensors::Dtype;
    for dtype in [Dtype::F64, Dtype::F8_E4M3, Dtype::F8_E5M2, Dtype::I32, Dtype::I64, Dtype::U8, Dtype::BOOL, Dtype::F4]
    {
        let data: Vec<u8> = (0..4 * dtype.bitsize() / 8).map(|_| rng.random()).collect();
        let view = safetensors::tensor::TensorView::new(dtype, vec![2, 2], &data).unwrap();
        files.push((safetensors::serialize([("weight", view)], None).unwrap(), None));
    }
    files
}

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "4",
    "-1",
    "2147483648",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "4611686018427387904",
    "1e3",
    "4.5",
    "null",
    "\"4\"",
    "[]",
];
const DTYPES: &[&str] =
    &["F32", "F16", "BF16", "F64", "F8_E4M3", "F8_E5M2", "I32", "I64", "U8", "BOOL", "F4", "F6_E2M3", "f32", "F99", ""];
const TOKENS: &[u8] = b"{}[]\",:0123456789-. \\";

/// The header's length prefix and range, if the prefix lies within the file.
fn header_range(bytes: &[u8]) -> Option<std::ops::Range<usize>> {
    let n = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    (8usize.checked_add(n)? <= bytes.len()).then(|| 8..8 + n)
}

fn set_header_len(bytes: &mut Vec<u8>, n: u64) {
    if bytes.len() < 8 {
        bytes.resize(8, 0);
    }
    bytes[..8].copy_from_slice(&n.to_le_bytes());
}

/// One random mutation of `bytes` (`other` is another corpus file, for splicing).
fn mutate(rng: &mut StdRng, bytes: &mut Vec<u8>, other: &[u8]) -> &'static str {
    let header = header_range(bytes);
    // A position, biased to the header, where most of the parsing happens.
    let pos = |rng: &mut StdRng, len: usize| -> usize {
        match &header {
            Some(h) if rng.random_range(0..3) > 0 && !h.is_empty() => rng.random_range(h.clone()),
            _ if len == 0 => 0,
            _ => rng.random_range(0..len),
        }
    };
    match rng.random_range(0..10) {
        0 => {
            if !bytes.is_empty() {
                let i = pos(rng, bytes.len());
                bytes[i] ^= 1 << rng.random_range(0..8);
            }
            "bit flip"
        }
        1 => {
            if !bytes.is_empty() {
                let i = pos(rng, bytes.len());
                bytes[i] = if rng.random() { TOKENS[rng.random_range(0..TOKENS.len())] } else { rng.random() };
            }
            "byte set"
        }
        2 => {
            let len = bytes.len();
            bytes.truncate(rng.random_range(0..=len));
            "truncation"
        }
        3 => {
            let n = header.as_ref().map_or(0, |h| h.len() as u64);
            let len = bytes.len() as u64;
            let choices = [
                0,
                1,
                n.wrapping_sub(1),
                n + 1,
                n + rng.random_range(2..64),
                len,
                len.wrapping_sub(8),
                len + 1,
                100_000_000,
                100_000_001,
                u64::MAX,
                u64::MAX - 7,
                1 << 63,
                rng.random(),
            ];
            set_header_len(bytes, choices[rng.random_range(0..choices.len())]);
            "header length"
        }
        4 => {
            let i = pos(rng, bytes.len() + 1).min(bytes.len());
            let count = rng.random_range(1..=16);
            let ins: Vec<u8> = (0..count)
                .map(|_| if rng.random() { TOKENS[rng.random_range(0..TOKENS.len())] } else { rng.random() })
                .collect();
            bytes.splice(i..i, ins);
            "insertion"
        }
        5 => {
            if !bytes.is_empty() {
                let i = pos(rng, bytes.len());
                let end = (i + rng.random_range(1..=16)).min(bytes.len());
                bytes.drain(i..end);
            }
            "deletion"
        }
        6 | 7 => {
            // Replace a number (or a dtype name) inside the JSON header, keeping the header length right.
            let Some(h) = header else { return "header edit (no header)" };
            let text = String::from_utf8_lossy(&bytes[h.clone()]).into_owned();
            let edited = if rng.random() {
                let spans: Vec<(usize, usize)> = number_spans(&text);
                if spans.is_empty() {
                    return "number edit (none)";
                }
                let (a, b) = spans[rng.random_range(0..spans.len())];
                format!("{}{}{}", &text[..a], NUMBERS[rng.random_range(0..NUMBERS.len())], &text[b..])
            } else {
                let found: Vec<usize> = text.match_indices("\"dtype\":\"").map(|(i, _)| i).collect();
                if found.is_empty() {
                    return "dtype edit (none)";
                }
                let start = found[rng.random_range(0..found.len())] + 9;
                let end = start + text[start..].find('"').unwrap_or(0);
                format!("{}{}{}", &text[..start], DTYPES[rng.random_range(0..DTYPES.len())], &text[end..])
            };
            let mut out = (edited.len() as u64).to_le_bytes().to_vec();
            out.extend_from_slice(edited.as_bytes());
            out.extend_from_slice(&bytes[h.end..]);
            *bytes = out;
            "header edit"
        }
        8 => {
            // Splice: this file's prefix with another's suffix.
            let a = rng.random_range(0..=bytes.len());
            let b = rng.random_range(0..=other.len());
            bytes.truncate(a);
            bytes.extend_from_slice(&other[b..]);
            "splice"
        }
        _ => {
            // Data-section growth or shrinkage with the header intact.
            if rng.random() {
                bytes.extend((0..rng.random_range(1..=8)).map(|_| rng.random::<u8>()));
            } else {
                let cut = rng.random_range(1..=8).min(bytes.len());
                bytes.truncate(bytes.len() - cut);
            }
            "data resize"
        }
    }
}

/// Byte ranges of the decimal numbers in a text.
fn number_spans(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            spans.push((start, i));
        } else {
            i += 1;
        }
    }
    spans
}

/// The independent reading of an accepted file: every tensor of the header is F32, F16 or BF16, the offsets tile
/// the data section exactly, and the reader's tensors are those, bit for bit.
/// An F8_E4M3 (`float8_e4m3fn`) value: sign, 4 exponent bits of bias 7, 3 mantissa bits; all ones is NaN.
fn e4m3(b: u8) -> f32 {
    let magnitude = b & 0x7f;
    let v = if magnitude == 0x7f {
        f32::NAN
    } else if magnitude < 8 {
        f32::from(magnitude) * 2f32.powi(-9)
    } else {
        (8.0 + f32::from(magnitude & 7)) * 2f32.powi(i32::from(magnitude >> 3) - 10)
    };
    if b & 0x80 != 0 {
        -v
    } else {
        v
    }
}

fn check_accepted(bytes: &[u8], file: &TensorFile) -> Result<(), String> {
    let h = header_range(bytes).ok_or("accepted, but the header length does not fit the file")?;
    let value: serde_json::Value = serde_json::from_slice(&bytes[h.clone()]).map_err(|e| format!("accepted: {e}"))?;
    let map = value.as_object().ok_or("accepted, but the header is not a JSON object")?;
    let data = &bytes[h.end..];
    let mut spans = Vec::new();
    let mut seen = 0;
    for (name, entry) in map {
        if name == "__metadata__" {
            continue;
        }
        seen += 1;
        let stored: safetensors::Dtype =
            serde_json::from_value(entry["dtype"].clone()).map_err(|e| format!("accepted tensor `{name}`: {e}"))?;
        let shape: Vec<usize> = serde_json::from_value(entry["shape"].clone()).map_err(|e| e.to_string())?;
        let offsets: [usize; 2] = serde_json::from_value(entry["data_offsets"].clone()).map_err(|e| e.to_string())?;
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or("accepted an overflowing shape")?;
        let raw = data.get(offsets[0]..offsets[1]).ok_or("accepted offsets outside the data")?;
        // What the reader must return: the values as stored (convt's dtypes), converted to f32 (F64, float8), or a
        // DType error naming the tensor's dtype (the others).
        let (dtype, values): (convt::DType, Vec<f32>) = match stored {
            safetensors::Dtype::F32 | safetensors::Dtype::F16 | safetensors::Dtype::BF16 => {
                let dtype = match stored {
                    safetensors::Dtype::F32 => convt::DType::F32,
                    safetensors::Dtype::F16 => convt::DType::F16,
                    _ => convt::DType::BF16,
                };
                let mut values = vec![0f32; raw.len() / dtype.size()];
                dtype.decode(raw, &mut values);
                (dtype, values)
            }
            safetensors::Dtype::F64 => (
                convt::DType::F32,
                raw.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap()) as f32).collect(),
            ),
            safetensors::Dtype::F8_E5M2 => {
                (convt::DType::F32, raw.iter().map(|&b| half::f16::from_bits(u16::from(b) << 8).to_f32()).collect())
            }
            safetensors::Dtype::F8_E4M3 => (convt::DType::F32, raw.iter().map(|&b| e4m3(b)).collect()),
            other => {
                let want = format!("{other:?}");
                match file.get(name) {
                    Err(ConvtError::DType { dtype, .. }) if dtype == want => {}
                    r => return Err(format!("tensor `{name}` of dtype {want}: {:?}", r.map(|t| t.shape().to_vec()))),
                }
                spans.push(offsets);
                continue;
            }
        };
        let t = file.get(name).map_err(|e| format!("tensor `{name}` of the header does not read: {e}"))?;
        if t.shape() != &shape[..]
            || t.numel() != n
            || values.len() != n
            || offsets[1] - offsets[0] != n * stored.bitsize() / 8
        {
            return Err(format!("tensor `{name}`: shape {shape:?}, offsets {offsets:?}, read {:?}", t.shape()));
        }
        let same = t.dtype() == dtype
            && values.iter().zip(t.data()).all(|(a, v)| a.to_bits() == v.to_bits() || (a.is_nan() && v.is_nan()));
        if !same {
            return Err(format!("tensor `{name}`: data differs from the file's bytes"));
        }
        spans.push(offsets);
    }
    if seen != file.len() {
        return Err(format!("the header has {seen} tensors, the reader returned {}", file.len()));
    }
    spans.sort();
    let mut end = 0;
    for [a, b] in spans {
        if a != end {
            return Err(format!("accepted data_offsets that do not tile the data: [{a}, {b}] after {end}"));
        }
        end = b;
    }
    if end != data.len() {
        return Err(format!("accepted a data section of {} bytes whose tensors end at {end}", data.len()));
    }
    Ok(())
}

fn reader_once(rng: &mut StdRng, corpus: &Corpus, iteration: u64, input: &mut String) -> Result<String, String> {
    let path = Path::new("fuzz.safetensors");
    let (bytes, kind) = match rng.random_range(0..20) {
        0 => {
            // Unmutated: must read back exactly what was written (a tensor of another dtype: as check_accepted
            // says).
            let (bytes, tensors) = &corpus[rng.random_range(0..corpus.len())];
            return match (TensorFile::from_bytes(bytes, path), tensors) {
                (Ok(f), Some(tensors)) => {
                    let same = f.len() == tensors.len()
                        && tensors.iter().all(|(n, t)| {
                            f.get(n).is_ok_and(|r| {
                                r.shape() == t.shape()
                                    && r.dtype() == t.dtype()
                                    && r.data().iter().zip(t.data()).all(|(a, b)| a.to_bits() == b.to_bits())
                            })
                        });
                    if same {
                        Ok("valid file read back".into())
                    } else {
                        Err("round trip differs".into())
                    }
                }
                (Ok(f), None) => check_accepted(bytes, &f).map(|()| "valid file of another dtype".into()),
                (Err(e), _) => Err(format!("a valid file was rejected: {e}")),
            };
        }
        1 | 2 => {
            // Random bytes, sometimes behind a plausible header length.
            let len = rng.random_range(0..=256);
            let mut b: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if len >= 8 && rng.random() {
                let n = rng.random_range(0..=len as u64 - 8);
                b[..8].copy_from_slice(&n.to_le_bytes());
            }
            (b, "random bytes")
        }
        _ => {
            let mut b = corpus[rng.random_range(0..corpus.len())].0.clone();
            let other = &corpus[rng.random_range(0..corpus.len())].0;
            let mut kind = "";
            for _ in 0..rng.random_range(1..=4) {
                kind = mutate(rng, &mut b, other);
            }
            (b, kind)
        }
    };
    *input = format!("{} bytes after {kind}", bytes.len());
    let verdict = catch_unwind(AssertUnwindSafe(|| {
        let r = TensorFile::from_bytes(&bytes, path);
        if let Err(e) = &r {
            let _ = e.to_string();
        }
        r
    }));
    let save = |why: &str| -> String {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-crashes");
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join(format!("reader-{iteration}.safetensors"));
        let _ = std::fs::write(&file, &bytes);
        format!("{why} (input saved to {})", file.display())
    };
    match verdict {
        Err(_) => Err(save("TensorFile::from_bytes panicked")),
        Ok(Ok(file)) => check_accepted(&bytes, &file).map(|()| format!("ok after {kind}")).map_err(|e| save(&e)),
        Ok(Err(e @ (ConvtError::TensorFile { .. } | ConvtError::DType { .. }))) => {
            if let ConvtError::DType { dtype, .. } = &e {
                if ["F32", "F16", "BF16"].contains(&dtype.as_str()) {
                    return Err(save(&format!("DType error for a tensor of dtype {dtype}, which convt reads")));
                }
            }
            Ok(format!("err {}", variant(&e)))
        }
        Ok(Err(e)) => Err(save(&format!("unexpected error variant: {e:?}"))),
    }
}

#[test]
fn fuzz_safetensors() {
    let mut corpus_rng = StdRng::seed_from_u64(0x5afe_7e45);
    let corpus = corpus(&mut corpus_rng);
    run("safetensors", |rng, i, input| reader_once(rng, &corpus, i, input));
}
