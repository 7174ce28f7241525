//! grad_weight at precision `fast` (`shaders/backward/grad_weight_half.wgsl`): the per-tap GEMM of the exact kernel
//! with f16 operands scaled by powers of two per tensor and f32 sums, on tensor cores (cooperative matrices; what
//! the selector takes) or on the FMA units (a variant for adapters without cooperative matrices, which only the
//! tuner or a caller forces: there it measured slower than the exact kernels, which the selector takes instead);
//! its partial sums go through the exact kernel's deterministic split-K reduction ([`super::grad_weight`]).

use crate::gpu::context::GpuContext;
use crate::gpu::wgsl::coop::{self, FULL_RUN, SUBGROUP};
use crate::gpu::wgsl::scale::{scaled_module, scaled_prologue, SLOTS_01};
use crate::gpu::wgsl::{self, fill_markers, with_shape_prelude};

pub const SHADER_NAME: &str = "backward/grad_weight_half.wgsl";
/// `shaders/backward/grad_weight_half.wgsl` behind the shape's constants: the template of every tile.
const SHADER: &str = with_shape_prelude!("backward/grad_weight_half.wgsl");
/// The binding of the operand maxima (after x, grad_output and the partial sums).
pub(crate) const MAXIMA_BINDING: u32 = 4;
/// Output channels per invocation of the FMA variant (each owns 4 input channels x FMA_TN output channels).
const FMA_TN: u32 = 8;

/// Where a tile's products run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Units {
    /// Cooperative matrices (16x16x16 f16 x f16 -> f32), one subgroup of 32 per WM x WN part of the tile.
    TensorCores,
    /// f32 fused multiply-adds of the f16 operands, for adapters with f16 shaders and no cooperative matrices: a
    /// candidate of the tuner (`convt tune --backward --precision fast`) and of a forced run, never the selector's.
    Fma,
}

/// A workgroup tile of BM input channels x BN output channels of one tap; on tensor cores each subgroup computes a
/// WM x WN part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HalfTile {
    /// Input channels per workgroup tile.
    pub bm: u32,
    /// Output channels per workgroup tile.
    pub bn: u32,
    /// Pixels per K step (a multiple of 16: one 16-deep product per 16).
    pub bk: u32,
    /// Input channels per subgroup (tensor cores).
    pub wm: u32,
    /// Output channels per subgroup (tensor cores).
    pub wn: u32,
    /// Where the products run.
    pub units: Units,
}

const fn coop_tile(bm: u32, bn: u32, bk: u32, wm: u32, wn: u32) -> HalfTile {
    HalfTile { bm, bn, bk, wm, wn, units: Units::TensorCores }
}

/// The tensor-core tiles, all of 32-wide subgroups: 64 x 64 channels in K steps of 128 pixels (four 32 x 32
/// subgroups), the heuristic's tile from 64 channels a side; 64 x 64 in steps of 64 (two 64 x 32 subgroups), the
/// fastest measured on kb57; 32 x 32 in steps of 32 (one subgroup) for narrower groups. Tiles of 128 x 128 and
/// steps of 32 pixels on 64 x 64 never won (docs/PERFORMANCE.md).
pub const HALF_64X64X128: HalfTile = coop_tile(64, 64, 128, 32, 32);
pub const HALF_64X64X64: HalfTile = coop_tile(64, 64, 64, 64, 32);
pub const HALF_32X32X32: HalfTile = coop_tile(32, 32, 32, 32, 32);
/// The FMA variant's tile.
pub const HALF_FMA_64X64: HalfTile = HalfTile { bm: 64, bn: 64, bk: 32, wm: 64, wn: 64, units: Units::Fma };
/// Every tile of this build.
pub const HALF_TILES: [HalfTile; 4] = [HALF_64X64X128, HALF_64X64X64, HALF_32X32X32, HALF_FMA_64X64];

impl HalfTile {
    /// Its name, as the tuning cache and `convt bench` show it.
    pub fn name(&self) -> String {
        match self.units {
            Units::TensorCores => {
                format!("grad_weight_coop_{}x{}x{}_{}x{}", self.bm, self.bn, self.bk, self.wm, self.wn)
            }
            Units::Fma => format!("grad_weight_f16_{}x{}x{}", self.bm, self.bn, self.bk),
        }
    }

    /// Invocations per workgroup.
    pub fn threads(&self) -> u32 {
        match self.units {
            Units::TensorCores => SUBGROUP * (self.bm / self.wm) * (self.bn / self.wn),
            Units::Fma => self.bm * self.bn / (4 * FMA_TN),
        }
    }

    /// Workgroup memory: the two staged f16 steps, and on tensor cores each subgroup's epilogue scratch.
    pub fn workgroup_bytes(&self) -> u32 {
        let staged = 2 * (self.bm + self.bn) * (self.bk + 8);
        match self.units {
            Units::TensorCores => staged + coop::scratch_bytes(self.threads() / SUBGROUP, FULL_RUN),
            Units::Fma => staged,
        }
    }

    /// The layout rules of the shader (its staging covers each row of a step once) and of this generator.
    pub fn is_consistent(&self) -> bool {
        let t = self.threads();
        let bk = self.bk;
        let staging = bk.is_multiple_of(16)
            && t.is_multiple_of(bk)
            && (self.bm * bk).is_multiple_of(t)
            && (self.bn * bk).is_multiple_of(t);
        let layout = match self.units {
            Units::TensorCores => {
                self.wm.is_multiple_of(FULL_RUN)
                    && self.wn.is_multiple_of(16)
                    && self.bm.is_multiple_of(self.wm)
                    && self.bn.is_multiple_of(self.wn)
            }
            Units::Fma => self.bm.is_multiple_of(4) && self.bn.is_multiple_of(FMA_TN),
        };
        staging && layout
    }

    /// Whether `ctx`'s device has what the tile needs (f16 shaders; cooperative matrices on tensor cores) and room
    /// for its workgroup.
    pub fn runs_on(&self, ctx: &GpuContext) -> bool {
        let limits = ctx.device.limits();
        let units = match self.units {
            Units::TensorCores => ctx.has_coop_f16(),
            Units::Fma => ctx.has_f16(),
        };
        units
            && self.workgroup_bytes() <= limits.max_compute_workgroup_storage_size
            && self.threads() <= limits.max_compute_invocations_per_workgroup
            && self.threads() <= limits.max_compute_workgroup_size_x
    }

    /// The shader: the template with this tile's constants in front, its products and epilogue at the marker
    /// lines, and `shared` (what the per-tap kernels share: shaders/backward/grad_weight_common.wgsl and
    /// tap_range.wgsl) behind.
    pub fn source(&self, shared: &str) -> String {
        let (acc_decl, math, epilogue, enable, module) = match self.units {
            Units::TensorCores => self.coop_parts(),
            Units::Fma => self.fma_parts(),
        };
        let header = format!(
            "enable f16;\n{enable}const BM: u32 = {}u;\nconst BN: u32 = {}u;\nconst BK: u32 = {}u;\nconst WM: u32 = {}u;\nconst WN: u32 = {}u;\nconst SG_M: u32 = BM / WM;\nconst SG_N: u32 = BN / WN;\nconst THREADS: u32 = {}u;\n",
            self.bm,
            self.bn,
            self.bk,
            self.wm,
            self.wn,
            self.threads()
        );
        let body = fill_markers(
            SHADER,
            &[
                ("PROLOGUE", &scaled_prologue(SLOTS_01)),
                ("JOB", super::grad_weight::JOB),
                ("ACC_DECL", &acc_decl),
                ("MATH", &math),
                ("EPILOGUE", &epilogue),
            ],
        );
        wgsl::module(&[&header, &scaled_module(MAXIMA_BINDING), &module, &body, shared])
    }

    /// Tensor cores: x's rows as A (row-major [m][k]: `coopLoadT`), grad_output's as B (column-major [n][k]:
    /// `coopLoad`), named accumulators, the epilogue through each subgroup's scratch in runs of 32 input channels.
    fn coop_parts(&self) -> (String, String, String, &'static str, String) {
        let (mi, nj) = (self.wm / 16, self.wn / 16);
        let (acc, products) = coop::products(mi, nj);
        let decl = format!(
            "{acc}    let sg = lid / 32u;\n    let lane = lid % 32u;\n    let sg_m = (sg % SG_M) * WM;\n    let sg_n = (sg / SG_M) * WN;\n"
        );
        let mut math = String::from("        for (var kk = 0u; kk < BK; kk += 16u) {\n");
        for i in 0..mi {
            math += &format!(
                "            let a{i} = coopLoadT<coop_mat16x16<f16, A>>(&a_tile[(sg_m + {}u) * LDK + kk], LDK);\n",
                16 * i
            );
        }
        for j in 0..nj {
            math += &format!(
                "            let b{j} = coopLoad<coop_mat16x16<f16, B>>(&b_tile[(sg_n + {}u) * LDK + kk], LDK);\n",
                16 * j
            );
        }
        math += &products;
        math += "        }\n";
        let epilogue = coop::epilogue(
            self.wm,
            nj,
            FULL_RUN,
            |r| format!("sg_m + run_pixel + {}u", FULL_RUN * r),
            |j, r, v| format!("put(sc, px{r}, sg_n + {}u + c, unscale({v}));", 16 * j),
        );
        (decl, math, epilogue, "enable wgpu_cooperative_matrix;\n", coop::scratch(FULL_RUN))
    }

    /// The FMA units: invocation lid owns input channels fm .. fm + 3 and output channels fn0 .. fn0 + FMA_TN - 1.
    fn fma_parts(&self) -> (String, String, String, &'static str, String) {
        let decl = format!(
            "    var acc: array<array<f32, {FMA_TN}>, 4>;\n    let fm = (lid % (BM / 4u)) * 4u;\n    let fn0 = (lid / (BM / 4u)) * {FMA_TN}u;\n"
        );
        let math = format!(
            "        for (var k = 0u; k < BK; k++) {{
            var a: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {{
                a[i] = f32(a_tile[(fm + i) * LDK + k]);
            }}
            for (var j = 0u; j < {FMA_TN}u; j++) {{
                let b = f32(b_tile[(fn0 + j) * LDK + k]);
                for (var i = 0u; i < 4u; i++) {{
                    acc[i][j] = fma(a[i], b, acc[i][j]);
                }}
            }}
        }}
"
        );
        let epilogue = format!(
            "    for (var i = 0u; i < 4u; i++) {{
        for (var j = 0u; j < {FMA_TN}u; j++) {{
            put(sc, fm + i, fn0 + j, unscale(acc[i][j]));
        }}
    }}
"
        );
        (decl, math, epilogue, "", String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_half_tile_meets_the_layout_rules_and_aligns_its_workgroup_memory() {
        for t in HALF_TILES {
            assert!(t.is_consistent(), "{t:?}");
            assert!(t.threads() <= 256, "{t:?}");
            let source = t.source(&super::super::grad_weight::shared_source(crate::gpu::wgsl::operands::Io::F32));
            let bytes = coop::workgroup_bytes_aligned(&source, &t.name());
            assert_eq!(bytes, t.workgroup_bytes(), "{t:?}");
            // 32 KiB: what the software driver offers, where the FMA tile runs in CI (the tensor-core tiles are
            // checked against each adapter's limit by `runs_on`).
            assert!(t.units == Units::TensorCores || t.workgroup_bytes() <= 32768, "{t:?}");
        }
    }
}
