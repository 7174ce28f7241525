//! The register micro-kernel of the register-tile kernels (the GEMM's [`crate::gpu::forward::gemm::Tile`] and the
//! Winograd kernel's GEMM per transform point).

/// The register micro-kernel of the register-tile kernels (this GEMM's [`Tile`] and the Winograd kernel's GEMM
/// per transform point): the declarations of TM x TN/4 named vec4 accumulators `acc_<i>_<j>` (no array, so
/// nothing can be demoted to local memory), and one K step's math over `bk` channels, straight-line, the next
/// channel's fragments read before the current one's multiply-adds (as a loop the driver did not keep the reads
/// ahead, and measured slower: docs/PERFORMANCE.md). `read_a(k, q)` and `read_b(k, j)` are the WGSL
/// vec4 expressions of the invocation's pixel run q and channel run j at channel k of the step.
pub(crate) fn register_tile(
    tm: u32,
    tn: u32,
    bk: u32,
    read_a: impl Fn(u32, u32) -> String,
    read_b: impl Fn(u32, u32) -> String,
) -> (String, String) {
    let (quads_m, quads_n) = (tm / 4, tn / 4);
    let mut decl = String::new();
    for i in 0..tm {
        for j in 0..quads_n {
            decl += &format!("    var acc_{i}_{j} = vec4<f32>(0.0);\n");
        }
    }
    let fragments = |k: u32| {
        let mut f = String::new();
        for q in 0..quads_m {
            f += &format!("            let a{q}_{k} = {};\n", read_a(k, q));
        }
        for j in 0..quads_n {
            f += &format!("            let b{j}_{k} = {};\n", read_b(k, j));
        }
        f
    };
    let mut math = String::from("        {\n");
    math += &fragments(0);
    for k in 0..bk {
        if k + 1 < bk {
            math += &fragments(k + 1);
        }
        for i in 0..tm {
            let a = format!("a{}_{k}.{}", i / 4, ["x", "y", "z", "w"][(i % 4) as usize]);
            for j in 0..quads_n {
                math += &format!("            acc_{i}_{j} = fma(vec4<f32>({a}), b{j}_{k}, acc_{i}_{j});\n");
            }
        }
    }
    math += "        }\n";
    (decl, math)
}
