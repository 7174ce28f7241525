//! The cooperative-matrix variant of the implicit-GEMM kernel (precision `fast` on tensor cores): the same
//! `shaders/forward/gemm.wgsl` (phases, staging, epilogue stores) with f16 operands multiplied as 16x16 matrices with
//! f32 accumulators (`enable wgpu_cooperative_matrix;`). Runs where the adapter offers 16x16x16 f16 x f16 ->
//! f32 cooperative matrices with 32-wide subgroups (`GpuContext::has_coop_f16`); validated by naga everywhere.

use crate::gpu::forward::gemm::{scaled_module, GemmKernel, Parts, MAXIMA_BINDING, SCALED_PROLOGUE};

/// Invocations per subgroup the kernel is written for (the scope of a cooperative-matrix operation).
pub const SUBGROUP: u32 = 32;

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
    fn source(&self) -> String {
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
            prologue: SCALED_PROLOGUE.to_string(),
            acc_decl: decl,
            math,
            epilogue: epi,
        }
        .render()
    }
}

/// Floats between the 16 columns of a subgroup's epilogue scratch beyond its pixels. With columns 32 floats
/// apart (32 banks), the lanes of a `coopStore` that hold the same row of different columns hit the same memory
/// bank; 4 more spreads them over all 32, which measured faster (docs/PERFORMANCE.md).
const SCRATCH_PAD: u32 = 4;
/// Pixels the epilogue moves through the scratch at once: one store of 32 lanes, 32 consecutive pixels of one
/// channel; or 16 (`SHORT_RUN`), lanes 0-15 and 16-31 storing 16 pixels of two channels, for half the scratch.
pub(crate) const FULL_RUN: u32 = 32;
pub(crate) const SHORT_RUN: u32 = 16;

/// The epilogue's scratch in workgroup memory (see [`epilogue`]): per subgroup, 16 columns of C_LD floats (a run of
/// `run` pixels, padded). Kept small: on NVIDIA's driver every workgroup's memory counts against about 48 KiB per
/// multiprocessor, so it decides how many workgroups run at once (docs/PERFORMANCE.md).
pub(crate) fn scratch(run: u32) -> String {
    format!(
        "const C_LD: u32 = {run}u + {SCRATCH_PAD}u;\nvar<workgroup> c_tile: array<f32, SG_M * SG_N * C_LD * 16u>; // per subgroup: 16 channels x C_LD pixels\n"
    )
}

/// Bytes of [`scratch`] for `subgroups` subgroups.
pub(crate) fn scratch_bytes(subgroups: u32, run: u32) -> u32 {
    4 * subgroups * (run + SCRATCH_PAD) * 16
}

/// The declarations of a subgroup's mi x nj named f32 accumulators `acc_<i>_<j>` (no array of matrices: arrays
/// were demoted to local memory on NVIDIA's driver) and one K step's products of the operand matrices `a<i>`, `b<j>`.
pub(crate) fn products(mi: u32, nj: u32) -> (String, String) {
    let (mut decl, mut math) = (String::new(), String::new());
    for i in 0..mi {
        for j in 0..nj {
            decl += &format!("    var acc_{i}_{j} = coop_mat16x16<f32, C>();\n");
            math += &format!("            acc_{i}_{j} = coopMultiplyAdd(a{i}, b{j}, acc_{i}_{j});\n");
        }
    }
    (decl, math)
}

/// The epilogue of a subgroup's WM x (16 nj) accumulators: per 16-channel column j and run r of `run` pixels
/// (32 or 16), one [`scratch_round`] through the subgroup's scratch in `c_tile` (see [`scratch`]). `pixel(r)` is
/// the WGSL expression of run r's pixel for this lane (it may use `run_pixel`; bound once to `px<r>`), `store(j, r,
/// v)` the statement storing value `v` of run r in column j at channel offset `c`. Expects `sg`, `lane` and the
/// constant WM in the shader.
pub(crate) fn epilogue(
    wm: u32,
    nj: u32,
    run: u32,
    pixel: impl Fn(u32) -> String,
    store: impl Fn(u32, u32, &str) -> String,
) -> String {
    let mut epi = format!(
        "    let scratch = sg * C_LD * 16u;\n    let run_pixel = lane % {run}u;\n    let run_channel = lane / {run}u;\n"
    );
    for r in 0..wm / run {
        epi += &format!("    let px{r} = {};\n", pixel(r));
    }
    for j in 0..nj {
        for r in 0..wm / run {
            let rows: Vec<u32> = (r * run / 16..(r + 1) * run / 16).collect();
            epi += &scratch_round(&rows, j, &store(j, r, "c_tile[scratch + c * C_LD + run_pixel]"), "    ");
        }
    }
    epi
}

/// One round of the epilogue's scratch path, for accumulator column j of the consecutive fragment rows `rows` (one
/// or two: a run of 16 or 32 pixels): the subgroup stores the rows' accumulators into its scratch (column-major:
/// pixel fastest, channels C_LD apart); after a barrier each lane runs `store` (a statement that reads its value as
/// `c_tile[scratch + c * C_LD + run_pixel]`, channel c of the column) for every SUBGROUP / run-th channel, so that
/// consecutive lanes write consecutive pixels of one channel; then a barrier before the scratch is reused. Expects
/// in scope `scratch` (the subgroup's scratch), `run_pixel = lane % run` and `run_channel = lane / run` for this
/// run; `indent` starts every line.
pub(crate) fn scratch_round(rows: &[u32], j: u32, store: &str, indent: &str) -> String {
    debug_assert!(matches!(rows.len(), 1 | 2), "runs of one or two fragment rows: {rows:?}");
    let run = 16 * rows.len() as u32;
    let mut e = String::new();
    for (h, r) in rows.iter().enumerate() {
        // naga 30 needs every coopStore argument bound to a `let` (its SPIR-V writer panics otherwise).
        e += &format!(
            "{indent}{{\n{indent}    let t = acc_{r}_{j};\n{indent}    let off = scratch + {}u;\n{indent}    let st = C_LD;\n{indent}    coopStore(t, &c_tile[off], st);\n{indent}}}\n",
            16 * h
        );
    }
    e + &format!(
        "{indent}workgroupBarrier();\n{indent}for (var c0 = 0u; c0 < 16u; c0 += {}u) {{\n{indent}    let c = c0 + run_channel;\n{indent}    {store}\n{indent}}}\n{indent}workgroupBarrier();\n",
        SUBGROUP / run
    )
}

/// The workgroup memory `source` declares, in bytes, after checking that every workgroup variable is a multiple of
/// 16 bytes: then the arrays cooperative matrices load from and store to start 16-byte aligned whatever order the
/// driver lays the variables out in (NVIDIA's driver does not align them itself: docs/PERFORMANCE.md).
#[cfg(test)]
pub(crate) fn workgroup_bytes_aligned(source: &str, what: &str) -> u32 {
    let module = naga::front::wgsl::parse_str(source).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut bytes = 0;
    for (_, v) in module.global_variables.iter().filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup) {
        let size = module.types[v.ty].inner.size(module.to_ctx());
        assert_eq!(size % 16, 0, "{what}: {:?} is {size} bytes", v.name);
        bytes += size;
    }
    bytes
}

/// This kernel's shaders for validation (`gpu::shader_sources`): every tile (the GEMM's shader).
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    COOP_TILES.iter().map(|t| (crate::gpu::forward::gemm::SHADER_NAME, t.name(), t.source())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_coop_tile_meets_the_layout_rules() {
        for t in COOP_TILES {
            assert!(t.is_consistent(), "{t:?}");
            assert!(t.threads() <= 512, "{t:?}");
            assert!(t.workgroup_bytes() <= 49152, "{t:?}");
            assert!(!t.source().contains("//#"), "{t:?}");
            assert_eq!(workgroup_bytes_aligned(&t.source(), &t.name()), t.workgroup_bytes(), "{t:?}");
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
