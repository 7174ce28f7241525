//! The implicit-GEMM kernel per stride phase, `shaders/forward/gemm.wgsl` (its opening comment explains the tiling).
//! The tile shape is a generated constant header in front of the shader source: one module per [`Tile`] (and
//! per [`crate::gpu::forward::coop::CoopTile`], the other [`GemmKernel`]).

use crate::error::{ConvtError, Result};
use crate::gpu::absmax;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{
    axis_phase, check_index_range, dispatch_buffers, grid, AxisPhase, GridParams, Operands, Weight,
};
use crate::gpu::memory::{GpuTensor, InFlight, PooledBuffer, STORAGE};
use crate::gpu::slices::{plan, SliceFields};
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::register::register_tile;
use crate::gpu::wgsl::scale::{scaled_module, scaled_prologue, MAXIMA_BINDING, SCALE_SHADER_NAME, SLOTS_01};
use crate::gpu::wgsl::{self, fill_markers, shape_constants, with_shape_prelude};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "forward/gemm.wgsl";
/// `shaders/forward/gemm.wgsl` behind the shape's constants: the template of every variant.
pub const SHADER: &str = with_shape_prelude!("forward/gemm.wgsl");
pub const PACK_SHADER_NAME: &str = "forward/gemm_weights.wgsl";
/// `shaders/forward/gemm_weights.wgsl` behind the shape's constants, with the scale functions it uses
/// (`finite_magnitude_bits`).
const PACK_SHADER: &str = with_shape_prelude!("forward/gemm_weights.wgsl", "common/scale.wgsl");

/// The packing's source for a weight of `io` (the packed weight has the weight's dtype).
fn pack_source(io: Io) -> String {
    let operands = declare(io.storage, &[io.operand("src", 1, Access::Read), io.operand("dst", 2, Access::ReadWrite)]);
    wgsl::module(&[&operands, PACK_SHADER])
}
/// Rows and taps of the blocks `shaders/forward/gemm_weights.wgsl` moves per workgroup (its BLOCK).
const PACK_BLOCK: usize = 32;

/// Encodes the repacking of `weight` [Cin, Cog, kH, kW] into [kH*kW, Cin, Cog] (the GEMM kernel's B layout, in the
/// weight's dtype); with `maxima` (precision `fast`), the same pass takes the weight's largest finite magnitude into
/// its slot 1, except for an f16 weight, which needs no scale (its slot stays zero: a scale of 1).
fn pack_weights(
    ctx: &GpuContext,
    shape: &ConvShape,
    weight: &GpuTensor,
    maxima: Option<&wgpu::Buffer>,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<PooledBuffer> {
    let src = weight.single_buffer("weight", ctx)?;
    let packed = ctx.pool.get(&ctx.device, src.bytes, STORAGE);
    let io = Io::of(ctx, weight.dtype());
    let module = ctx.module_with(&format!("{PACK_SHADER_NAME} {}", io.key()), || pack_source(io))?;
    let maxima = maxima.filter(|_| weight.dtype() != crate::dtype::DType::F16);
    let (rows, taps) = (shape.in_channels * shape.out_per_group(), shape.kernel[0] * shape.kernel[1]);
    let consts = [
        ("C_IN", shape.in_channels as f64),
        ("COG", shape.out_per_group() as f64),
        ("TAPS", taps as f64),
        ("TAKE_MAX", f64::from(u8::from(maxima.is_some()))),
    ];
    let key = format!("pack {} {:?} {consts:?}", io.key(), ctx.options().shader_checks);
    let pipeline = ctx.pipeline(key, &module, &consts)?;
    let grid = grid(ctx, rows.div_ceil(PACK_BLOCK) * taps.div_ceil(PACK_BLOCK));
    let u = GridParams::of(grid);
    let maxima = maxima.unwrap_or(&ctx.unused_binding);
    dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[src, &packed, maxima], grid);
    Ok(packed)
}

/// Encodes the packing of `weight` for `kernel` into `pass` ([`crate::gpu::plan`]): the packed weight and, for
/// f16 operands, the maxima buffer whose slot 1 the packing fills with the weight's largest magnitude.
pub(crate) fn prepare_weight(
    ctx: &GpuContext,
    shape: &ConvShape,
    kernel: &impl GemmKernel,
    weight: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<(PooledBuffer, Option<wgpu::Buffer>)> {
    let maxima = if kernel.scaled() { Some(absmax::encode_slots(ctx, &[], &[], pass)?) } else { None };
    Ok((pack_weights(ctx, shape, weight, maxima.as_ref(), pass)?, maxima))
}

/// The type the staged operands have in workgroup memory (the products and sums are f32 either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operand {
    /// Exact: the f32 values themselves.
    F32,
    /// f16, each tensor scaled by a power of two to fit f16's range (precision `fast`; needs `SHADER_F16`).
    F16,
}

/// A workgroup tile of the register variant: BM output pixels x BN output channels, K steps of BK input
/// channels, TM x TN outputs per invocation, (BM/TM) * (BN/TN) invocations, operands staged as `operand`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub tm: u32,
    pub tn: u32,
    pub operand: Operand,
}

const fn tile(bm: u32, bn: u32, bk: u32, tm: u32, tn: u32) -> Tile {
    Tile { bm, bn, bk, tm, tn, operand: Operand::F32 }
}

/// 64 pixels x 64 channels, 4 x 8 per invocation (128 invocations): the default from 64 channels per group.
pub const TILE_64X64_4X8: Tile = tile(64, 64, 16, 4, 8);
/// 128 x 128, 8 x 8 per invocation: the default for one stride phase and 128+ channels per group.
pub const TILE_128X128_8X8: Tile = tile(128, 128, 16, 8, 8);
/// 128 x 32, 4 x 8 per invocation: the default below 64 channels per group.
pub const TILE_128X32_4X8: Tile = tile(128, 32, 16, 4, 8);

/// Every exact (f32) tile shape the selector may choose (each is validated by naga and tested on the software
/// driver): each the heuristic's or the tuner's choice for a suite case's forward or grad_input
/// (docs/PERFORMANCE.md); 64 x 128 and 64 x 64 with 4 x 4 per invocation never won and were removed.
pub const TILES: &[Tile] =
    &[TILE_64X64_4X8, TILE_128X128_8X8, TILE_128X32_4X8, tile(128, 64, 32, 4, 8), tile(128, 64, 16, 8, 8)];

/// The f16-operand tiles (precision `fast` where the adapter has no cooperative matrices): the shapes the
/// f32 heuristic picks, staged as f16.
pub const F16_TILES: &[Tile] = &[
    TILE_64X64_4X8.with_operand(Operand::F16),
    TILE_128X128_8X8.with_operand(Operand::F16),
    TILE_128X32_4X8.with_operand(Operand::F16),
];

/// What a GEMM variant contributes to `shaders/forward/gemm.wgsl`: the constants prepended to it and the code put in
/// place of its marker lines (see the shader's opening comment).
pub(crate) struct Parts {
    pub header: String,
    pub module: String,
    pub prologue: String,
    pub acc_decl: String,
    pub math: String,
    pub epilogue: String,
}

impl Parts {
    /// The variant's whole source for tensors of `io`.
    pub fn render(&self, io: Io) -> String {
        let body = fill_markers(
            SHADER,
            &[
                ("MODULE", &self.module),
                ("PROLOGUE", &self.prologue),
                ("ACC_DECL", &self.acc_decl),
                ("MATH", &self.math),
                ("EPILOGUE", &self.epilogue),
            ],
        );
        let operands = crate::gpu::wgsl::operands::forward(io);
        wgsl::module(&[&self.header, &operands, &body])
    }
}

/// A variant of the GEMM kernel as [`encode`] needs it: a register [`Tile`] or a cooperative-matrix
/// [`crate::gpu::forward::coop::CoopTile`].
pub trait GemmKernel {
    fn name(&self) -> String;
    /// The shader for tensors of `io`: `shaders/forward/gemm.wgsl` with this variant's constants and generated parts
    /// (generated only when the context has no module of this name yet).
    fn source(&self, io: Io) -> String;
    /// Output pixels (BM) and output channels (BN) per workgroup.
    fn tile_mn(&self) -> (u32, u32);
    /// Invocations per workgroup.
    fn threads(&self) -> u32;
    /// Workgroup memory the variant declares.
    fn workgroup_bytes(&self) -> u32;
    /// The shader's layout rules (see its opening comment), checked for every variant in the tests.
    fn is_consistent(&self) -> bool;
    /// f16 operands scaled by powers of two: the operand maxima are bound at binding 5.
    fn scaled(&self) -> bool;
    /// Whether an adapter with these limits can run the workgroup.
    fn fits(&self, limits: &wgpu::Limits) -> bool {
        self.is_consistent()
            && self.workgroup_bytes() <= limits.max_compute_workgroup_storage_size
            && self.threads() <= limits.max_compute_invocations_per_workgroup
    }
}

impl Tile {
    pub const fn with_operand(self, operand: Operand) -> Tile {
        Tile { operand, ..self }
    }
}

impl GemmKernel for Tile {
    fn threads(&self) -> u32 {
        (self.bm / self.tm) * (self.bn / self.tn)
    }
    fn name(&self) -> String {
        let op = match self.operand {
            Operand::F32 => "",
            Operand::F16 => "f16_",
        };
        format!("gemm_{op}{}x{}x{}_{}x{}", self.bm, self.bn, self.bk, self.tm, self.tn)
    }
    /// The staged A and B steps.
    fn workgroup_bytes(&self) -> u32 {
        let bytes = match self.operand {
            Operand::F32 => 4,
            Operand::F16 => 2,
        };
        bytes * self.bk * (self.bm + self.bn)
    }
    /// The register micro-kernel: named vec4 accumulators, straight-line updates.
    fn source(&self, io: Io) -> String {
        let (quads_m, quads_n) = (self.tm / 4, self.tn / 4);
        // Run q of the invocation's pixels starts at pixel (q * WG_M + tm) * 4 of the tile, run j of its channels
        // at channel (j * WG_N + tn) * 4 (see the shader's opening comment).
        let (mut decl, math) = register_tile(
            self.tm,
            self.tn,
            self.bk,
            |k, q| format!("vec4<f32>(a_tile[({k}u) * (BM / 4u) + tm + {q}u * WG_M])"),
            |k, j| format!("vec4<f32>(b_tile[({k}u) * (BN / 4u) + tn + {j}u * WG_N])"),
        );
        let scaled = self.operand == Operand::F16;
        let mut store = String::new();
        for i in 0..self.tm {
            for j in 0..quads_n {
                let a = format!("acc_{i}_{j}");
                let v = if scaled {
                    format!("vec4<f32>(unscale({a}.x), unscale({a}.y), unscale({a}.z), unscale({a}.w))")
                } else {
                    a
                };
                store += &format!("    store4(sc, m{} + {}u, oc{j}, {v});\n", i / 4, i % 4);
            }
        }
        decl += "    let lane = lid % 32u;
    let warp = lid / 32u;
    let tm = (warp % (WG_M / WARP_M)) * WARP_M + lane % WARP_M;
    let tn = (warp / (WG_M / WARP_M)) * (32u / WARP_M) + lane / WARP_M;
";
        let mut epilogue = String::new();
        for q in 0..quads_m {
            epilogue += &format!("    let m{q} = m_tile * BM + ({q}u * WG_M + tm) * 4u;\n");
        }
        for j in 0..quads_n {
            epilogue += &format!("    let oc{j} = oc_tile + ({j}u * WG_N + tn) * 4u;\n");
        }
        epilogue += &store;
        let (ty, enable, convert_a, convert_b, module, prologue) = match self.operand {
            Operand::F32 => ("f32", "", "v", "v", String::new(), String::new()),
            Operand::F16 => (
                "f16",
                "enable f16;\n",
                "f16(v * scale_x)",
                "f16(v * scale_w)",
                scaled_module(MAXIMA_BINDING),
                scaled_prologue(SLOTS_01),
            ),
        };
        let module = format!(
            "{module}var<workgroup> a_tile: array<vec4<{ty}>, BK * BM / 4>; // [k][m]
var<workgroup> b_tile: array<vec4<{ty}>, BK * BN / 4>; // [k][n]

fn stage_a(k: u32, m: u32, v: f32) {{
    a_tile[k * (BM / 4u) + m / 4u][m % 4u] = {convert_a};
}}

fn stage_b(k: u32, n: u32, v: f32) {{
    b_tile[k * (BN / 4u) + n / 4u][n % 4u] = {convert_b};
}}
"
        );
        Parts {
            header: format!(
                "{enable}const BM: u32 = {}u;\nconst BN: u32 = {}u;\nconst BK: u32 = {}u;\nconst TM: u32 = {}u;\nconst TN: u32 = {}u;\nconst WG_M: u32 = BM / TM;\nconst WG_N: u32 = BN / TN;\nconst THREADS: u32 = WG_M * WG_N;\nconst WARP_M: u32 = 8u;\n",
                self.bm, self.bn, self.bk, self.tm, self.tn
            ),
            module,
            prologue,
            acc_decl: decl,
            math,
            epilogue,
        }
        .render(io)
    }
    fn tile_mn(&self) -> (u32, u32) {
        (self.bm, self.bn)
    }
    fn scaled(&self) -> bool {
        self.operand == Operand::F16
    }
    fn is_consistent(&self) -> bool {
        if self.tm == 0 || self.tn == 0 {
            return false;
        }
        let t = self.threads();
        let (wg_m, wg_n) = (self.bm / self.tm, self.bn / self.tn);
        t > 0
            && t.is_multiple_of(32)
            && wg_m.is_multiple_of(8)
            && wg_n.is_multiple_of(4)
            && self.tm.is_multiple_of(4)
            && self.tn.is_multiple_of(4)
            && self.bm.is_multiple_of(self.tm)
            && self.bn.is_multiple_of(self.tn)
            && t.is_multiple_of(self.bm)
            && t.is_multiple_of(self.bn)
            && (self.bk * self.bm).is_multiple_of(t)
            && (self.bk * self.bn).is_multiple_of(t)
    }
}

/// How the GEMM's output pixels reach its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Geometry {
    /// The stride phases of the transposed convolution `shape` (the forward).
    Phases,
    /// One phase: a stride-1 correlation whose output pixel (a, b) reads input (a * step + off - j * dilation)
    /// for its flipped taps j, every tap of the kernel; `shape` is stride 1 with the sampled output's size. This
    /// is grad_input at any stride, a strided convolution of grad_output (src/gpu/backward/grad_input.rs).
    Sampled { step: [usize; 2], off: [i64; 2] },
}

/// The shader's `Phase`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct PhaseUniform {
    rh: u32,
    rw: u32,
    ah: u32,
    aw: u32,
    kh0: u32,
    kw0: u32,
    cnt_h: u32,
    cnt_w: u32,
    off_h: i32,
    off_w: i32,
    m_tiles: u32,
    _pad: u32,
}

/// Phases per dispatch (`MAX_PHASES` in the shader).
const MAX_PHASES: usize = 64;

/// The uniform block `Dispatch` of the shader, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct DispatchUniform {
    slice: SliceFields,
    dispatch_width: u32,
    m_tiles: u32,
    n_tiles_per_group: u32,
    group_begin: u32,
    kstep_h: u32,
    kstep_w: u32,
    istep_h: u32,
    istep_w: u32,
    n_phases: u32,
    _pad: [u32; 2],
    phases: [PhaseUniform; MAX_PHASES],
}

/// Encodes the GEMM kernel `kernel` over every slice of the plan and every phase of `geometry` into `pass`; its
/// scratch buffers (the packed weight) go into `in_flight`, to be kept until the call has submitted.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    geometry: Geometry,
    kernel: &impl GemmKernel,
    input: &GpuTensor,
    weight: Weight<'_>,
    bias: Option<&GpuTensor>,
    output: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<()> {
    let name = kernel.name();
    if !kernel.fits(&ctx.device.limits()) {
        return Err(ConvtError::InvalidArgument(format!("kernel {name} does not fit this adapter")));
    }
    check_index_range(shape)?;
    let slices = plan(shape, input, output);
    if slices.is_empty() {
        return Ok(());
    }
    // The operand maxima for f16 operands: slot 0 the input's, slot 1 the weight's (taken while packing it, or
    // when it was prepared).
    let (maxima, packed) = match weight.prepared {
        Some(p) => {
            let maxima = if kernel.scaled() {
                Some(absmax::encode_slots(ctx, &[(0, input)], &[(1, p.maxima(&name)?)], pass)?)
            } else {
                None
            };
            (maxima, (*p.buffer).clone())
        }
        None => {
            let maxima =
                if kernel.scaled() { Some(absmax::encode_slots(ctx, &[(0, input)], &[], pass)?) } else { None };
            let packed = in_flight.keep(pack_weights(ctx, shape, weight.tensor, maxima.as_ref(), pass)?);
            (maxima, packed)
        }
    };
    let ops = Operands::new(ctx, &packed, bias)?;
    let io = Io::new(ctx, input.dtype(), output.dtype());
    let module = ctx.module_with(&format!("{name} {}", io.key()), || kernel.source(io))?;
    let mut consts = shape_constants(shape, bias.is_some());
    if let Geometry::Sampled { step, .. } = geometry {
        consts.extend([("IN_STEP_H", step[0] as f64), ("IN_STEP_W", step[1] as f64)]);
    }
    let key = format!("{name} {} {:?} {:?}", io.key(), ctx.options().shader_checks, consts);
    let pipeline = ctx.pipeline(key, &module, &consts)?;
    let (bm, bn) = kernel.tile_mn();
    let cog = shape.out_per_group();
    let n_tiles_per_group = cog.div_ceil(bn as usize);
    ctx.scoped(|| {
        let axes = |r: [usize; 2]| {
            let a = |ax: usize| match geometry {
                Geometry::Phases => axis_phase(
                    r[ax],
                    shape.out_hw[ax],
                    shape.kernel[ax],
                    shape.stride[ax],
                    shape.padding[ax],
                    shape.dilation[ax],
                ),
                Geometry::Sampled { off, .. } => AxisPhase {
                    count: shape.out_hw[ax],
                    k0: 0,
                    taps: shape.kernel[ax],
                    kstep: 1,
                    istep: shape.dilation[ax],
                    off: off[ax],
                },
            };
            (a(0), a(1))
        };
        let (ph0, pw0) = axes([0, 0]);
        for s in &slices {
            let (g0, g1) = (s.oc.start / cog, (s.oc.end - 1) / cog + 1);
            // Every non-empty phase of the slice; all of them run in one dispatch (MAX_PHASES at a time).
            let mut phases = Vec::new();
            // Phases past the output's size have no pixel: a stride larger than the output enumerates only these.
            for rh in 0..shape.stride[0].min(shape.out_hw[0]) {
                for rw in 0..shape.stride[1].min(shape.out_hw[1]) {
                    let (ph, pw) = axes([rh, rw]);
                    let m_total = s.samples.len() * ph.count * pw.count;
                    if m_total == 0 {
                        continue;
                    }
                    phases.push(PhaseUniform {
                        rh: rh as u32,
                        rw: rw as u32,
                        ah: ph.count as u32,
                        aw: pw.count as u32,
                        kh0: ph.k0 as u32,
                        kw0: pw.k0 as u32,
                        cnt_h: ph.taps as u32,
                        cnt_w: pw.taps as u32,
                        off_h: ph.off as i32,
                        off_w: pw.off as i32,
                        m_tiles: m_total.div_ceil(bm as usize) as u32,
                        _pad: 0,
                    });
                }
            }
            // Phases with the most taps first. The shader takes the phases fastest (workgroup w: phase w %
            // n_phases), so each pixel tile's phases start together and their interleaved stores meet in L2; the
            // longest of them starts first.
            phases.sort_by_key(|p| std::cmp::Reverse(p.cnt_h * p.cnt_w));
            for batch in phases.chunks(MAX_PHASES) {
                let m_tiles = batch.iter().map(|p| p.m_tiles as usize).max().unwrap_or(0);
                let grid = grid(ctx, m_tiles * n_tiles_per_group * (g1 - g0) * batch.len());
                let mut table = [PhaseUniform::default(); MAX_PHASES];
                table[..batch.len()].copy_from_slice(batch);
                let u = DispatchUniform {
                    slice: SliceFields::from(s),
                    dispatch_width: grid.0,
                    m_tiles: m_tiles as u32,
                    n_tiles_per_group: n_tiles_per_group as u32,
                    group_begin: g0 as u32,
                    kstep_h: ph0.kstep as u32,
                    kstep_w: pw0.kstep as u32,
                    istep_h: ph0.istep as u32,
                    istep_w: pw0.istep as u32,
                    n_phases: batch.len() as u32,
                    _pad: [0; 2],
                    phases: table,
                };
                let input = &input.chunks()[s.in_chunk];
                let out = &output.chunks()[s.out_chunk];
                let mut buffers = ops.buffers(input, out);
                if let Some(m) = maxima.as_ref() {
                    buffers.push(m);
                }
                dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &buffers, grid);
            }
        }
        Ok(())
    })
}

/// This kernel's shaders for validation (`gpu::shader_sources`): every register tile, f32 and f16, the weight
/// packing, and in it the scale functions, which have no entry point of their own.
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let tiles = TILES.iter().chain(F16_TILES);
    let mut v: Vec<crate::gpu::ShaderVariant> = tiles
        .flat_map(|t| {
            Io::variants().into_iter().map(move |io| (SHADER_NAME, format!("{} {}", t.name(), io.key()), t.source(io)))
        })
        .collect();
    v.extend(
        Io::variants()
            .into_iter()
            .map(|io| (PACK_SHADER_NAME, format!("{PACK_SHADER_NAME} {}", io.key()), pack_source(io))),
    );
    v.push((SCALE_SHADER_NAME, format!("{SCALE_SHADER_NAME} in {PACK_SHADER_NAME}"), pack_source(Io::F32)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tile_meets_the_shader_layout_rules() {
        for t in TILES.iter().chain(F16_TILES) {
            assert!(t.is_consistent(), "{t:?}");
            // 32 KiB: what the software driver (Vulkan and GL) offers, where CI runs every tile; the selector
            // checks each adapter's own limit.
            assert!(t.workgroup_bytes() <= 32768, "{t:?} needs more workgroup memory than the software driver has");
            assert!(t.threads() <= 256, "{t:?}");
        }
    }

    #[test]
    fn tiles_whose_steps_would_not_be_staged_whole_are_refused() {
        // 128 invocations, 32 x 4 A values per step: no invocation would load A (A_LOADS = 0).
        assert!(!tile(32, 128, 4, 4, 4).is_consistent());
        assert!(!tile(64, 64, 16, 0, 4).is_consistent());
    }

    #[test]
    fn generated_sources_fill_every_placeholder() {
        for (t, io) in TILES.iter().chain(F16_TILES).flat_map(|t| Io::variants().into_iter().map(move |io| (t, io))) {
            let src = t.source(io);
            assert!(!src.contains("//#"), "{t:?}");
            assert_eq!(src.matches("store4(sc,").count() as u32, t.tm * t.tn / 4, "{t:?}");
        }
    }

    #[test]
    fn the_weight_packs_as_tap_ic_oc_with_its_largest_finite_magnitude() {
        // Blocks of 32 rows x 32 taps: 7 x 7 kernels (two tap blocks, the second partial) and 3 x 5 (one partial),
        // rows (Cin x Cout/groups) that end inside a block, groups; with and without the maximum (precision
        // `fast`), which leaves out an inf and a NaN and does not depend on where the largest value lies.
        let ctx = GpuContext::new().expect("the GPU tests need an adapter");
        let params = |groups| crate::ConvTranspose2dOptions { groups, ..Default::default() };
        for (input, weight, groups) in [([1, 6, 4, 4], [6, 7, 7, 7], 1), ([1, 8, 4, 4], [8, 3, 3, 5], 2)] {
            let shape = params(groups).resolve(&input, &weight, None).unwrap();
            let seed: u64 = rand::random();
            let mut data = crate::Tensor::uniform(weight, -1.0, 1.0, seed).unwrap().into_data();
            let n = data.len();
            data[3] = f32::INFINITY;
            data[n / 2] = f32::NAN;
            data[n - 2] = -1.5e4; // the largest finite magnitude, near the end
            let w = crate::Tensor::new(weight.to_vec(), data.clone()).unwrap();
            let wg = GpuTensor::upload(&ctx, &w).unwrap();
            let (rows, taps) = (weight[0] * weight[1], weight[2] * weight[3]);
            for take_max in [false, true] {
                let mut encoder = ctx.device.create_command_encoder(&Default::default());
                let maxima = wgpu::util::DeviceExt::create_buffer_init(
                    &ctx.device,
                    &wgpu::util::BufferInitDescriptor { label: None, contents: &[0; 16], usage: STORAGE },
                );
                let packed = {
                    let mut pass = encoder.begin_compute_pass(&Default::default());
                    pack_weights(&ctx, &shape, &wg, take_max.then_some(&maxima), &mut pass).unwrap()
                };
                ctx.queue.submit([encoder.finish()]);
                let read = |b: &wgpu::Buffer, bytes| {
                    crate::gpu::memory::read_back(&ctx, (b, 0, bytes), <[u8]>::to_vec).unwrap()
                };
                let got: Vec<f32> = bytemuck::cast_slice(&read(&packed, (4 * n) as u64)).to_vec();
                for (i, (g, want)) in got.iter().zip((0..n).map(|i| data[(i % rows) * taps + i / rows])).enumerate() {
                    assert!(g.to_bits() == want.to_bits(), "{weight:?} seed {seed}: packed[{i}] = {g}, want {want}");
                }
                let m: Vec<u32> = bytemuck::cast_slice(&read(&maxima, 16)).to_vec();
                let want = if take_max { 1.5e4f32.to_bits() } else { 0 };
                assert_eq!(m, [0, want, 0, 0], "{weight:?} seed {seed}, maximum taken: {take_max}");
            }
        }
    }

    #[test]
    fn scratch_buffers_stay_out_of_the_pool_until_the_call_has_submitted() {
        // The packed weight is pooled scratch: were it back in the pool before the submission, another thread
        // could take it and queue its own data into it first (docs/RELIABILITY.md). It returns only when the
        // call's in-flight list goes.
        let ctx = GpuContext::new().expect("the GPU tests need an adapter");
        let shape = crate::ConvTranspose2dOptions::default().resolve(&[1, 8, 6, 5], &[8, 4, 3, 3], None).unwrap();
        let tensor = |dims: Vec<usize>| GpuTensor::empty(&ctx, &dims).unwrap();
        let (x, w, y) = (tensor(shape.input_dims()), tensor(shape.weight_dims()), tensor(shape.output_dims()));
        let idle = |ctx: &GpuContext| ctx.pool.stats().1;
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let mut in_flight = InFlight::default();
        let before = idle(&ctx);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            encode(
                &ctx,
                &shape,
                Geometry::Phases,
                &TILE_64X64_4X8,
                &x,
                Weight { tensor: &w, prepared: None },
                None,
                &y,
                &mut pass,
                &mut in_flight,
            )
            .unwrap();
        }
        assert_eq!(idle(&ctx), before, "a scratch buffer went back to the pool before the submission");
        ctx.queue.submit([encoder.finish()]);
        drop(in_flight);
        assert_eq!(idle(&ctx), before + 1, "the packed weight returns to the pool after the submission");
    }
}
