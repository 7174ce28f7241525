//! What the cooperative-matrix kernels share: the subgroup width they are written for, named accumulators and
//! their products, and the epilogue that moves accumulators through workgroup scratch so that stores run along the
//! pixels (and a result reaches a tensor of any dtype through the operand store functions).

/// Invocations per subgroup the kernel is written for (the scope of a cooperative-matrix operation).
pub const SUBGROUP: u32 = 32;

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
