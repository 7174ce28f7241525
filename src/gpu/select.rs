//! The one place that picks a kernel, for each of the three passes: the forward ([`forward`]), grad_input
//! ([`grad_input`]) and grad_weight ([`grad_weight`]). Each asks, in this order:
//! 1. a kernel forced by the context's options (`GpuOptions::strategy`, `CONVT_STRATEGY`), where it applies;
//! 2. the tuning cache's winner for the problem's [`TuneKey`] (sizes bucketed, so nearby shapes share it; the
//!    tensors' dtype part of it, so a half call runs the kernel measured fastest on half tensors), where that
//!    kernel computes the shape on this adapter;
//! 3. the heuristic below, whose rules follow the measurements of docs/PERFORMANCE.md.
//!
//! Every per-algorithm default tile lives here too, so a kernel's selection rule is found in one file.

use crate::dtype::DType;
use crate::gpu::backward::grad_input::{as_sampled_correlation, as_transposed_convolution, GradInputKernel};
use crate::gpu::backward::grad_weight::{self, GradWeightKernel};
use crate::gpu::backward::grad_weight_half::{self, HalfTile};
use crate::gpu::backward::grad_weight_nhwc::{NhwcGwTile, NHWC_16X16_T4, NHWC_32X32_T3, NHWC_64X32_T2};
use crate::gpu::context::GpuContext;
use crate::gpu::forward::coop::{self, CoopTile};
use crate::gpu::forward::coop_nhwc::{self, NhwcTile, STAGED_MIN_ROW_TAPS};
use crate::gpu::forward::gemm::{self, Tile, TILE_128X128_8X8, TILE_128X32_4X8, TILE_64X64_4X8};
use crate::gpu::forward::rows::Rows;
use crate::gpu::forward::winograd::{self, WinoTile};
use crate::gpu::tune::{Pass, TuneKey};
use crate::gpu::Strategy;
use crate::params::ConvShape;
use crate::precision::Precision;

/// The forward's algorithm for a shape at a precision on tensors of `dtype` on this context's adapter: the one forced by the
/// context's options (when it has that precision and takes the shape), else the tuning cache's winner, else the
/// heuristic (for `fast` where it keeps to exact kernels: the exact winner of the tuning cache when there is one).
///
/// The heuristic for `fast` (the same kernel for every dtype; the padded-NHWC kernel's tile may follow the output's
/// dtype, `coop_nhwc_tiles`): at stride 1 the padded-NHWC
/// cooperative-matrix kernel wherever it takes the shape (one group, input channels a multiple of 16 and output
/// channels of 32, its padded f16 input within one binding, not a shape for the rows kernel), where it measured
/// faster than the best exact kernel. Elsewhere the staged
/// cooperative-matrix kernel on problems with at least 64 input and output channels per group (on the strided
/// decoders it measured faster than the best exact kernel) unless the shape is one for the rows kernel (few
/// products per output) or one for the exact Winograd kernel with fewer than 128 output channels per group; with
/// fewer channels the exact kernels measured fastest, and `fast` takes them (its error is then f32's). The
/// f16-operand register kernels never won. `convt tune --precision fast` measures every candidate instead.
pub fn forward(ctx: &GpuContext, shape: &ConvShape, has_bias: bool, precision: Precision, dtype: DType) -> Strategy {
    // A forced strategy applies at its precision, and on the shapes it computes: a Winograd or padded-NHWC tile
    // gives way on shapes it does not take (strides, dilation, large kernels; groups, channel counts, sizes);
    // any other forced strategy that cannot run on this adapter reaches the caller as an error.
    if let Some(forced) = ctx.options().strategy.filter(|s| s.precision() == precision && s.takes_shape(ctx, shape)) {
        return forced;
    }
    let tuned = |precision| tuned_forward(ctx, shape, has_bias, precision, dtype);
    if let Some(tuned) = tuned(precision) {
        return tuned;
    }
    let heuristic = exact_heuristic(ctx, shape);
    let gather = prefers_gather(shape);
    let coop = Strategy::Coop(coop_tile(shape));
    // `fast` takes the tensor cores where a group has 64+ input and output channels, except where the exact
    // Winograd kernel measured faster: below 128 output channels per group (at 128 the tensor cores won).
    let winograd_beats_coop = matches!(heuristic, Strategy::Winograd(_)) && shape.out_per_group() < 128;
    let tensor_cores = !gather && !winograd_beats_coop && shape.in_per_group() >= 64 && shape.out_per_group() >= 64;
    // At stride 1 `fast` takes the padded-NHWC kernel wherever it computes the shape (not the gather kernel's
    // shapes): its operands load straight from storage (or, with 128 output channels, its input rows from
    // workgroup memory), and it measured faster than both the exact Winograd kernel and the staged
    // cooperative-matrix kernel on every stride-1 case of the suite. Per stride phase it lost to the staged kernel
    // on the strided decoders, on f32 and on half tensors alike (docs/PERFORMANCE.md).
    let nhwc_stride = shape.stride == [1, 1];
    let nhwc = coop_nhwc_tiles(shape, dtype)
        .into_iter()
        .map(Strategy::CoopNhwc)
        .find(|s| nhwc_stride && !gather && s.computes(ctx, shape));
    match (precision, nhwc) {
        (Precision::Fast, Some(nhwc)) => nhwc,
        (Precision::Fast, None) if tensor_cores && coop.runs_on(ctx) => coop,
        // `fast` on the exact kernels: the exact winner where the shape is tuned for f32.
        (Precision::Fast, None) => tuned(Precision::F32).unwrap_or(heuristic),
        (Precision::F32, _) => heuristic,
    }
}

/// The exact heuristic: the rows kernel where [`prefers_gather`], else at stride 1 the first Winograd tile of
/// [`winograd_tiles`] that computes the shape here (fewer products than the GEMM; it measured faster wherever
/// that list has a tile), else the GEMM with [`gemm_tile`].
fn exact_heuristic(ctx: &GpuContext, shape: &ConvShape) -> Strategy {
    if prefers_gather(shape) {
        return Strategy::Rows(rows_variant(shape));
    }
    winograd_tiles(shape)
        .iter()
        .map(|t| Strategy::Winograd(*t))
        .find(|w| w.computes(ctx, shape))
        .unwrap_or(Strategy::Gemm(gemm_tile(shape)))
}

/// The tuning cache's forward winner for `shape` at `precision`, where it computes the shape here and, for an
/// exact call, computes exactly (an exact call never runs an f16 kernel from the cache).
fn tuned_forward(
    ctx: &GpuContext,
    shape: &ConvShape,
    has_bias: bool,
    precision: Precision,
    dtype: DType,
) -> Option<Strategy> {
    let key = TuneKey::new(ctx.adapter_info(), Pass::Forward, shape, has_bias, precision, dtype);
    let name = ctx.tuned().lookup(&key)?;
    let strategy = Strategy::from_name(name);
    match strategy {
        Some(s) if precision == Precision::F32 && s.precision() != Precision::F32 => {
            ctx.tuned().ignore(&key, &format!("its strategy `{name}` computes at precision {}", s.precision()))
        }
        Some(s) => Some(s).filter(|s| s.computes(ctx, shape)),
        None => ctx.tuned().ignore(&key, &format!("this build has no strategy `{name}`")),
    }
}

/// grad_input's kernel for `shape` at `precision`, in this order:
/// - the context's forced strategy (`CONVT_STRATEGY`) where it names one: `direct` or a rows variant the gather
///   kernel; an exact GEMM tile, or a Winograd tile that computes the transposed convolution, the forward kernel
///   on the transposed convolution where the shape has one; elsewhere an exact GEMM tile the sampled correlation
///   (the gather kernel if the tile cannot run here);
/// - the tuning cache's entry (written by `convt tune --backward`) where it computes the shape on this device (for
///   an exact call, an exact kernel only);
/// - for `fast`: where the shape has a transposed convolution, the forward selector's `fast` choice for it where
///   that is an f16 kernel (a forced f16 strategy reaches grad_input this way, through the forward's selector);
///   elsewhere the staged cooperative-matrix tile on the sampled correlation where its problem has 64+ channels a
///   side per group and is not a gather kernel's shape (the forward's rule for tensor cores, without its
///   Winograd exception: Winograd does not compute the sampled correlation). Otherwise `fast` takes the exact
///   choice below, as the forward does;
/// - where the shape has a transposed convolution, the forward selector's exact choice for it, if that is a GEMM
///   or Winograd kernel;
/// - else the forward's heuristic for a stride-1 problem of the sampled correlation's sizes: its GEMM tile, or the
///   gather kernel where it would take a gather kernel, where f32 tensors' grad_output is too sparse for the GEMM
///   (`sparse_for_gemm`), or where the tile cannot run here.
pub fn grad_input(ctx: &GpuContext, shape: &ConvShape, precision: Precision, dtype: DType) -> GradInputKernel {
    let transposed = as_transposed_convolution(shape);
    let (sampled, _) = as_sampled_correlation(shape);
    let runs = |tile: Tile| {
        if Strategy::Gemm(tile).runs_on(ctx) {
            GradInputKernel::Sampled(Strategy::Gemm(tile))
        } else {
            GradInputKernel::Gather
        }
    };
    match (ctx.options().strategy, transposed) {
        (Some(Strategy::Direct | Strategy::Rows(_)), _) => return GradInputKernel::Gather,
        (Some(s @ Strategy::Gemm(tile)), t) if tile.operand == gemm::Operand::F32 => {
            // As the forward takes a forced strategy: one this adapter cannot run reaches the caller as an error
            // at stride 1 (the transposed convolution is the forward's kernel); the sampled path runs the gather
            // kernel instead.
            return if t.is_some() { GradInputKernel::Transposed(s) } else { runs(tile) };
        }
        (Some(s @ Strategy::Winograd(_)), Some(t)) if s.computes(ctx, &t) => return GradInputKernel::Transposed(s),
        _ => {}
    }
    let key = TuneKey::new(ctx.adapter_info(), Pass::GradInput, shape, false, precision, dtype);
    let tuned = ctx.tuned().lookup(&key).and_then(|name| GradInputKernel::from_cache_name(name, shape));
    let allowed = |k: &GradInputKernel| precision == Precision::Fast || k.precision() == Precision::F32;
    if let Some(tuned) = tuned.filter(|k| allowed(k) && k.computes(ctx, shape)) {
        return tuned;
    }
    if precision == Precision::Fast {
        match transposed {
            Some(t) => {
                let strategy = forward(ctx, &t, false, Precision::Fast, dtype);
                if strategy.precision() == Precision::Fast {
                    return GradInputKernel::Transposed(strategy);
                }
            }
            None => {
                let coop = Strategy::Coop(coop_tile(&sampled));
                let wide = sampled.in_per_group() >= 64 && sampled.out_per_group() >= 64;
                if wide && !prefers_gather(&sampled) && coop.runs_on(ctx) {
                    return GradInputKernel::Sampled(coop);
                }
            }
        }
    }
    if let Some(t) = transposed {
        let strategy = forward(ctx, &t, false, Precision::F32, dtype);
        if let Strategy::Gemm(_) | Strategy::Winograd(_) = strategy {
            return GradInputKernel::Transposed(strategy);
        }
    }
    if prefers_gather(&sampled) || (dtype == DType::F32 && sparse_for_gemm(shape)) {
        GradInputKernel::Gather
    } else {
        runs(gemm_tile(&sampled))
    }
}

/// Whether the sampled correlation's GEMM reads grad_output too sparsely to beat the gather kernel on f32 tensors:
/// grad_output at least 8 times the input's pixels (a large stride) and at most 32 input channels per group. So
/// measured on kb81 (stride 5, 32 input channels, grad_output 25 times the input): the gather kernel well ahead on
/// f32 tensors, the GEMM ahead on f16 ones, which halve its bytes (docs/PERFORMANCE.md).
fn sparse_for_gemm(shape: &ConvShape) -> bool {
    let pixels = |hw: [usize; 2]| hw[0] * hw[1];
    pixels(shape.out_hw) >= 8 * pixels(shape.in_hw) && shape.in_per_group() <= 32
}

/// grad_weight's kernel for `shape` at `precision` with the input and grad_output in `chunks` bindings: the tuning
/// cache's entry where it computes the shape here (for an exact call, an exact kernel only); for `fast` on an
/// adapter with cooperative matrices the NHWC tensor-core GEMM with the first of `grad_weight_nhwc_tiles` that
/// computes the shape, where it pays for its copies (`nhwc_pays`), else the tensor-core per-tap GEMM with the first
/// of `grad_weight_half_tiles` that runs here, where a group has 64+ input and output channels, or 32+ at stride 1
/// (on kb81's strided groups of 32 x 64 exact kernels measured faster); else the rows kernel wherever it takes the
/// shape (strided, narrow groups: it measured faster than the per-tap GEMM there,
/// `grad_weight::RowsKernel::for_shape`), else the per-tap GEMM with `grad_weight_tile`. The forward's forced
/// strategy does not apply: grad_weight has no kernel in common with it.
pub fn grad_weight(
    ctx: &GpuContext,
    shape: &ConvShape,
    chunks: [usize; 2],
    precision: Precision,
    dtype: DType,
) -> GradWeightKernel {
    let key = TuneKey::new(ctx.adapter_info(), Pass::GradWeight, shape, false, precision, dtype);
    let tuned = ctx.tuned().lookup(&key).and_then(GradWeightKernel::from_name);
    let allowed = |k: &GradWeightKernel| precision == Precision::Fast || k.precision() == Precision::F32;
    if let Some(tuned) = tuned.filter(|k| allowed(k) && k.computes(ctx, shape, chunks)) {
        return tuned;
    }
    let channels = shape.in_per_group().min(shape.out_per_group());
    let wide = channels >= 64 || (channels >= 32 && shape.stride == [1, 1]);
    if precision == Precision::Fast {
        // The NHWC GEMM where it pays for its copies, else the per-tap tensor-core tiles on wide groups.
        let nhwc = grad_weight_nhwc_tiles(shape).into_iter().filter(|_| nhwc_pays(shape)).map(GradWeightKernel::Nhwc);
        let half = grad_weight_half_tiles(shape).into_iter().filter(|_| wide).map(GradWeightKernel::Half);
        if let Some(k) = nhwc.chain(half).find(|k| k.computes(ctx, shape, chunks)) {
            return k;
        }
    }
    if GradWeightKernel::Rows.computes(ctx, shape, chunks) {
        GradWeightKernel::Rows
    } else {
        GradWeightKernel::Taps(grad_weight_tile(shape))
    }
}

/// Whether grad_weight's NHWC GEMM pays for its copies of x and grad_output: at least `NHWC_MIN_FLOPS_PER_BYTE`
/// of its products per byte the copies read and write (f16 tensors' bytes). On the suite it won every case but
/// kb81, whose stride-5 grad_output, many times its input, makes the copy most of its time; the threshold lies
/// between kb81 and the others by a wide margin (docs/PERFORMANCE.md).
fn nhwc_pays(shape: &ConvShape) -> bool {
    let pixels = |c: usize, hw: [usize; 2]| (shape.batch * c * hw[0] * hw[1]) as f64;
    let bytes = 4.0 * (pixels(shape.in_channels, shape.in_hw) + pixels(shape.out_channels, shape.out_hw));
    shape.useful_flops() as f64 >= NHWC_MIN_FLOPS_PER_BYTE * bytes
}
const NHWC_MIN_FLOPS_PER_BYTE: f64 = 32.0;

/// grad_weight's NHWC tensor-core tiles at `fast`, the preferred first (the selector takes the first that computes
/// the shape here), the fastest measured on the suite (docs/PERFORMANCE.md): 64 x 32 channels of 2 taps for layers
/// of 64 input and 64 output channels (kb57, kb65); 32 x 32 of 3 taps, 8 subgroups a workgroup, where both channel
/// counts are multiples of 32 (kb69, kb71, kb78, up2x; within noise of the best on dcgan); 16 x 16 of 4 taps for
/// the rest. Where rows rounded up to whole blocks of 16 pixels would leave a quarter of the blocks or more empty
/// (dcgan's rows of 8: half), each tile gathered first (blocks across rows), then in rows (for a gathered copy
/// past one binding).
pub(crate) fn grad_weight_nhwc_tiles(shape: &ConvShape) -> Vec<NhwcGwTile> {
    let (t32, t64, t16) = (NHWC_32X32_T3, NHWC_64X32_T2, NHWC_16X16_T4);
    let (cin, cout) = (shape.in_channels, shape.out_channels);
    let in_rows = if cin == 64 && cout == 64 {
        vec![t64, t32, t16]
    } else if cin.is_multiple_of(32) && cout.is_multiple_of(32) {
        vec![t32, t16]
    } else {
        vec![t16]
    };
    let w = shape.in_hw[1];
    let sparse_rows = 4 * w <= 3 * w.div_ceil(16).max(1) * 16;
    match sparse_rows {
        true => in_rows.iter().map(|&t| NhwcGwTile { gathered: true, ..t }).chain(in_rows.clone()).collect(),
        false => in_rows,
    }
}

/// grad_weight's tensor-core tiles at `fast`, the preferred first (the selector takes the first that runs here):
/// where a group has 64+ input and output channels, 64 x 64 channels in K steps of 128 pixels (the fastest measured
/// on kb69, up2x and dcgan, within 6% of the fastest on kb57), then in steps of 64 (half the workgroup memory, for
/// adapters with less of it); 32 x 32 (one subgroup; on kb71's groups of 32 it measured faster than every exact
/// tile) for narrower groups, and last for every group.
pub(crate) fn grad_weight_half_tiles(shape: &ConvShape) -> Vec<HalfTile> {
    use grad_weight_half::{HALF_32X32X32, HALF_64X64X128, HALF_64X64X64};
    if shape.in_per_group().min(shape.out_per_group()) >= 64 {
        vec![HALF_64X64X128, HALF_64X64X64, HALF_32X32X32]
    } else {
        vec![HALF_32X32X32]
    }
}

/// Whether the heuristic gives `shape` to a gather kernel rather than a GEMM: few output channels per group
/// (the GEMM's channel tile would be mostly waste), few input channels per group, or few products per output
/// (large strides: the GEMM's per-phase dispatches and strided stores do not pay off). There the rows kernel,
/// whose stores run along the output rows, measured faster.
pub(crate) fn prefers_gather(shape: &ConvShape) -> bool {
    let products_per_output =
        shape.in_per_group() * shape.kernel[0] * shape.kernel[1] / (shape.stride[0] * shape.stride[1]);
    shape.out_per_group() < 16 || shape.in_per_group() < 8 || products_per_output < 64
}

/// The rows kernel's variant (the fastest measured at 256 invocations): 16 output channels of 2 rows per
/// invocation, 8 channels of 4 rows when a group has fewer than 16.
pub(crate) fn rows_variant(shape: &ConvShape) -> Rows {
    if shape.out_per_group() >= 16 {
        Rows { channels: 16, rows: 2 }
    } else {
        Rows { channels: 8, rows: 4 }
    }
}

/// The GEMM's tile, the fastest measured on such shapes: 8 x 8 per invocation on 128 x 128 tiles for one stride
/// phase with 128+ output channels per group, else 4 x 8 on 64 x 64 tiles from 64 output channels per group,
/// 128 x 32 below.
pub(crate) fn gemm_tile(shape: &ConvShape) -> Tile {
    let phases = shape.stride[0] * shape.stride[1];
    match shape.out_per_group() {
        c if phases == 1 && c >= 128 => TILE_128X128_8X8,
        c if c >= 64 => TILE_64X64_4X8,
        _ => TILE_128X32_4X8,
    }
}

/// The staged cooperative-matrix tile, the fastest measured: 128x128 tiles with K steps of 32, 64x64 per subgroup
/// and 16-pixel epilogue runs from 128 output channels per group (its workgroup memory lets two workgroups share a
/// multiprocessor, and it measured faster than K steps of 16; with 32-pixel runs the same tile ran one workgroup
/// per multiprocessor, much slower), else 128x64 with 64x32 per subgroup.
pub(crate) fn coop_tile(shape: &ConvShape) -> CoopTile {
    if shape.out_per_group() >= 128 {
        coop::COOP_128X128X32_E16
    } else {
        coop::COOP_128X64X16
    }
}

/// The padded-NHWC kernel's tiles, best first as measured (the selector takes the first that computes the
/// shape): where the output channels are a multiple of 128, 128 pixels x 128 channels with staged rows for kernel
/// rows of `STAGED_MIN_ROW_TAPS` taps or more per stride phase (faster than the direct 128 x 64 and 128 x 128
/// tiles on kb69; on the 2-tap phases of the strided decoders the direct 128 x 64 tile measured faster), then
/// 128 x 64 of four 64 x 32 subgroups; where they are an odd multiple of 64, 128 x 64 of 64 x 64 subgroups with staged rows for kernel rows of `STAGED_MIN_ROW_TAPS` taps or
/// more (for f32 outputs on shorter rows the same tile without staged rows), then 128 x 64 of four 64 x 32
/// subgroups (faster than 256 x 32), then 256 x 32; 128 x 32 where they are a multiple of 32 (staged rows measured
/// slower there); none otherwise. The output's dtype changes how the fragments are stored (f32 outputs store a
/// subgroup's aligned fragments straight from its accumulators, half ones pass every fragment through workgroup
/// memory), and with it the winner: on kb57 (64 channels, 3-tap rows) the 64 x 64 subgroups measured faster with
/// f32 outputs and slower with f16 ones (docs/PERFORMANCE.md).
pub(crate) fn coop_nhwc_tiles(shape: &ConvShape, dtype: DType) -> Vec<NhwcTile> {
    let mut tiles = Vec::new();
    let row_taps = shape.kernel[1].div_ceil(shape.stride[1]);
    if shape.out_channels.is_multiple_of(128) {
        if row_taps >= STAGED_MIN_ROW_TAPS {
            tiles.push(coop_nhwc::staged(64, 64, 2, 2));
        }
        tiles.push(coop_nhwc::tile(64, 32, 2, 2));
    } else if shape.out_channels.is_multiple_of(64) {
        if row_taps >= STAGED_MIN_ROW_TAPS {
            tiles.push(coop_nhwc::staged(64, 64, 2, 1));
        } else if dtype == DType::F32 {
            tiles.push(coop_nhwc::tile(64, 64, 2, 1));
        }
        tiles.push(coop_nhwc::tile(64, 32, 2, 2));
        tiles.push(coop_nhwc::tile(64, 32, 4, 1));
    } else if shape.out_channels.is_multiple_of(32) {
        tiles.push(coop_nhwc::tile(64, 32, 2, 1));
    }
    tiles
}

/// The Winograd tiles for a stride-1 shape, the preferred first (the selector takes the first that computes the
/// shape here), by channels per group and kernel size; empty (the GEMM) where the GEMM measured faster or the
/// shape is far from what was measured (3x3, 3x5 and 3x7 kernels):
/// - 64+ input and output channels: for width 3 F(4, 3) on 128 x 32 tiles in bands of 4 rows (faster than F(6, 3)
///   on 64 x 64 tiles in bands, and it fits every adapter's workgroup memory); F(4, K_W) for widths 4-7: on
///   64 x 64 tiles in bands of 2 rows up to width 5, on 48 x 64, else 32 x 64, tiles for widths 6-7 (where bands
///   did not pay. Widths 4 and 6 are the nearest unmeasured ones);
/// - otherwise, with 32+ input and output channels: F(4, K_W) on 128 x 32 tiles in bands of 4 rows for widths
///   3-5, on 64 x 32 tiles in bands of 8 rows for widths 6-7;
/// - each banded tile followed by its tile without bands, for adapters with less workgroup memory;
/// - kernel heights 2-7 only: with one row K is just the input channels, and taller kernels were not tested.
pub fn winograd_tiles(shape: &ConvShape) -> &'static [WinoTile] {
    use winograd::*;
    let (cin, cout) = (shape.in_per_group(), shape.out_per_group());
    let wide = cin >= 64 && cout >= 64;
    if !(2..=7).contains(&shape.kernel[0]) {
        return &[];
    }
    match (shape.kernel[1], wide) {
        (3, true) => &[WINO_W4_NARROW_BANDS],
        (4..=5, true) => &[WINO_W4_BANDS, WINO_W4],
        (6..=7, true) => &[WINO_W4_48, WINO_W4_32],
        (3..=5, false) if cin >= 32 && cout >= 32 => &[WINO_W4_NARROW_BANDS, WINO_W4_NARROW],
        (6..=7, false) if cin >= 32 && cout >= 32 => &[WINO_W4_NARROW_64_BANDS, WINO_W4_NARROW_64],
        _ => &[],
    }
}

/// grad_weight's per-tap GEMM tile: the smallest that holds a group's input and output channels, at most 64 (on
/// small groups the 64-wide tile is mostly waste, and measured much slower).
pub(crate) fn grad_weight_tile(shape: &ConvShape) -> usize {
    let channels = shape.in_per_group().max(shape.out_per_group());
    let tiles = grad_weight::TILES;
    tiles.into_iter().find(|&t| t >= channels).unwrap_or(tiles[tiles.len() - 1])
}
