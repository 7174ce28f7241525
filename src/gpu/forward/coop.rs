//! The cooperative-matrix variant of the implicit-GEMM kernel (precision `fast` on tensor cores): the same
//! `shaders/forward/gemm.wgsl` (phases, staging, epilogue stores) with f16 operands multiplied as 16x16 matrices with
//! f32 accumulators (`enable wgpu_cooperative_matrix;`). Runs where the adapter offers 16x16x16 f16 x f16 ->
//! f32 cooperative matrices with 32-wide subgroups (`GpuContext::has_coop_f16`); validated by naga everywhere.

use crate::gpu::forward::gemm::{GemmKernel, Parts};
use crate::gpu::wgsl::coop::{epilogue, products, scratch, scratch_bytes, FULL_RUN, SHORT_RUN, SUBGROUP};
use crate::gpu::wgsl::operands::Io;
use crate::gpu::wgsl::scale::{scaled_module, scaled_prologue, MAXIMA_BINDING, SLOTS_01};

/// A workgroup tile of BM pixels x BN output channels, K steps of BK input channels; each subgroup computes a
/// WM x WN part of it as (WM/16) x (WN/16) accumulator matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoopTile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub wm: u32,
    pub wn: u32,
    /// Pixels the epilogue moves through its scratch at once (`epilogue`): 32, or 16 for half the scratch.
    pub epilogue_run: u32,
}

const fn coop(bm: u32, bn: u32, bk: u32, wm: u32, wn: u32) -> CoopTile {
    CoopTile { bm, bn, bk, wm, wn, epilogue_run: FULL_RUN }
}

/// A tile whose epilogue moves 16-pixel runs (half the scratch: room for K steps of 32 at two workgroups per
/// multiprocessor).
const fn coop_e16(bm: u32, bn: u32, bk: u32, wm: u32, wn: u32) -> CoopTile {
    CoopTile { bm, bn, bk, wm, wn, epilogue_run: SHORT_RUN }
}

/// The heuristic's tile from 128 output channels per group ([`crate::gpu::select`]).
pub const COOP_128X128X32_E16: CoopTile = coop_e16(128, 128, 32, 64, 64);
/// The heuristic's tile below 128 output channels per group.
pub const COOP_128X64X16: CoopTile = coop(128, 64, 16, 64, 32);

/// Every cooperative-matrix tile the selector may choose: the heuristic's two. Sixteen other shapes (K steps of 16
/// and 32, 64 to 256 pixels, 16 to 64 channels per subgroup, the A step staged pixel-major) never won on the
/// suite (docs/PERFORMANCE.md) and were removed.
pub const COOP_TILES: &[CoopTile] = &[COOP_128X128X32_E16, COOP_128X64X16];

/// Halves between neighbouring staged rows beyond the rows' own length. A 16 x 16 operand load reads 16 rows of
/// 32 bytes; rows a multiple of 128 bytes apart fall in the same memory banks, so the load is serialised 8-way.
/// 8 more halves (16 bytes) shift each row by four banks: the tensor-core ceiling with loads from workgroup memory
/// and the kernel both measured much faster so (docs/PERFORMANCE.md).
const STAGE_PAD: u32 = 8;

impl CoopTile {
    pub fn subgroups(&self) -> u32 {
        (self.bm / self.wm) * (self.bn / self.wn)
    }
    /// The staged steps' layout: rows of the A step (staged channel-major, [k][m]), halves between them (LDA),
    /// and between B's rows (LDB).
    fn staged_layout(&self) -> (u32, u32, u32) {
        (self.bk, self.bm + STAGE_PAD, self.bn + STAGE_PAD)
    }
}

impl GemmKernel for CoopTile {
    fn threads(&self) -> u32 {
        SUBGROUP * self.subgroups()
    }
    fn name(&self) -> String {
        let run = if self.epilogue_run == FULL_RUN { String::new() } else { format!("_e{}", self.epilogue_run) };
        format!("coop_{}x{}x{}_{}x{}{run}", self.bm, self.bn, self.bk, self.wm, self.wn)
    }
    /// Workgroup memory: the f16 A and B steps (rows padded), and each subgroup's scratch for the epilogue.
    fn workgroup_bytes(&self) -> u32 {
        let (a_rows, lda, ldb) = self.staged_layout();
        2 * (a_rows * lda + self.bk * ldb) + scratch_bytes(self.subgroups(), self.epilogue_run)
    }
    /// The layout rules of the shader (see its opening comment) and of this generator.
    fn is_consistent(&self) -> bool {
        let t = self.threads();
        self.wm.is_multiple_of(32)
            && self.wn.is_multiple_of(16)
            && self.bk.is_multiple_of(16)
            && self.bm.is_multiple_of(self.wm)
            && self.bn.is_multiple_of(self.wn)
            && t.is_multiple_of(self.bm)
            && t.is_multiple_of(self.bn)
            && (self.bk * self.bm).is_multiple_of(t)
            && (self.bk * self.bn).is_multiple_of(t)
            && (self.epilogue_run == FULL_RUN || self.epilogue_run == SHORT_RUN)
    }

    fn tile_mn(&self) -> (u32, u32) {
        (self.bm, self.bn)
    }
    fn scaled(&self) -> bool {
        true
    }

    /// The cooperative-matrix code: named accumulators, no arrays of matrices.
    fn source(&self, io: Io) -> String {
        let (mi, nj) = (self.wm / 16, self.wn / 16);
        let mut decl = String::new();
        let mut math = String::from("        for (var kk = 0u; kk < BK; kk += 16u) {\n");
        for i in 0..mi {
            // A staged [k][m]: column-major with stride BM.
            math += &format!(
                "            let a{i} = coopLoad<coop_mat16x16<f16, A>>(&a_tile[kk * LDA + sg_m + {}u], LDA);\n",
                16 * i
            );
        }
        for j in 0..nj {
            // B (channels x output channels) is staged [k][n]: row-major with stride BN.
            math += &format!(
                "            let b{j} = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[kk * LDB + sg_n + {}u], LDB);\n",
                16 * j
            );
        }
        let (acc, products) = products(mi, nj);
        decl += &acc;
        math += &products;
        math += "        }\n";
        decl += "    let sg = lid / 32u;\n    let lane = lid % 32u;\n    let sg_m = (sg % SG_M) * WM;\n    let sg_n = (sg / SG_M) * WN;\n";

        let run = self.epilogue_run;
        let epi = epilogue(
            self.wm,
            nj,
            run,
            |r| format!("pixel(sc, m_tile * BM + sg_m + run_pixel + {}u)", run * r),
            |j, r, v| format!("store1(sc, px{r}, oc_tile + sg_n + {}u + c, unscale({v}));", 16 * j),
        );
        let (a_rows, lda, ldb) = self.staged_layout();
        let scratch = scratch(run);
        let module = format!(
            "{}var<workgroup> a_tile: array<f16, A_ROWS * LDA>; // [k][m]
var<workgroup> b_tile: array<f16, BK * LDB>; // [k][n]
{scratch}
fn stage_a(k: u32, m: u32, v: f32) {{
    a_tile[k * LDA + m] = f16(v * scale_x);
}}

fn stage_b(k: u32, n: u32, v: f32) {{
    b_tile[k * LDB + n] = f16(v * scale_w);
}}
",
            scaled_module(MAXIMA_BINDING)
        );
        Parts {
            header: format!(
                "enable f16;\nenable wgpu_cooperative_matrix;\nconst BM: u32 = {}u;\nconst BN: u32 = {}u;\nconst BK: u32 = {}u;\nconst WM: u32 = {}u;\nconst WN: u32 = {}u;\nconst SG_M: u32 = BM / WM;\nconst SG_N: u32 = BN / WN;\nconst THREADS: u32 = {SUBGROUP}u * SG_M * SG_N;\nconst A_ROWS: u32 = {};\nconst LDA: u32 = {};\nconst LDB: u32 = {};\n",
                self.bm, self.bn, self.bk, self.wm, self.wn, a_rows, lda, ldb
            ),
            module,
            prologue: scaled_prologue(SLOTS_01),
            acc_decl: decl,
            math,
            epilogue: epi,
        }
        .render(io)
    }
}

/// This kernel's shaders for validation (`gpu::shader_sources`): every tile (the GEMM's shader).
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let variants = COOP_TILES.iter().flat_map(|t| Io::variants().into_iter().map(move |io| (t, io)));
    variants
        .map(|(t, io)| (crate::gpu::forward::gemm::SHADER_NAME, format!("{} {}", t.name(), io.key()), t.source(io)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::wgsl::coop::workgroup_bytes_aligned;

    #[test]
    fn every_coop_tile_meets_the_layout_rules() {
        for t in COOP_TILES {
            assert!(t.is_consistent(), "{t:?}");
            assert!(t.threads() <= 512, "{t:?}");
            assert!(t.workgroup_bytes() <= 49152, "{t:?}");
            for io in Io::variants() {
                let source = t.source(io);
                assert!(!source.contains("//#"), "{t:?}");
                assert_eq!(workgroup_bytes_aligned(&source, &t.name()), t.workgroup_bytes(), "{t:?} {io:?}");
            }
        }
    }

    #[test]
    fn the_default_tiles_are_candidates() {
        let params = crate::ConvTranspose2dOptions::default();
        for cout in [64, 128] {
            let shape = params.resolve(&[1, 64, 8, 8], &[64, cout, 3, 3], None).unwrap();
            assert!(COOP_TILES.contains(&crate::gpu::select::coop_tile(&shape)), "{shape:?}");
        }
    }
}
