//! The rows kernel, `shaders/forward/rows.wgsl`: the gather form with one workgroup per few output rows of one stride
//! phase and block of output channels, the weights of the kernel rows that reach those rows staged once in
//! workgroup memory, and stores coalesced along the rows. Made for the problems that write far more than they
//! compute (large strides, few channels per group); correct for every option. The shader's opening comment
//! explains the mapping.

use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::forward::gather;
use crate::gpu::kernel::gcd;
use crate::gpu::memory::GpuTensor;
use crate::gpu::wgsl::fill_markers;
use crate::gpu::wgsl::operands::Io;
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "forward/rows.wgsl";
const TEMPLATE: &str = include_str!("../../../shaders/forward/rows.wgsl");
/// Invocations per workgroup: that many consecutive pixels of a row at a time. 256 measured faster than 128, 192
/// or 320-1024 on the shapes the rows kernel serves (docs/PERFORMANCE.md).
pub const WORKGROUP_SIZE: u32 = 256;
/// Weight values one staged slab holds: 16 KiB of f32, the workgroup memory every WebGPU adapter offers.
pub const SLAB: u32 = 4096;

/// A variant of the rows kernel: `channels` output channels (a multiple of 4) of `rows` output rows per
/// invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rows {
    pub channels: u32,
    pub rows: u32,
}

/// Every variant the selector may choose (each is validated by naga and tested on the software driver).
pub const VARIANTS: &[Rows] = &[Rows { channels: 8, rows: 4 }, Rows { channels: 16, rows: 2 }];

impl Rows {
    pub fn name(&self) -> String {
        format!("rows_{}x{}", self.channels, self.rows)
    }

    /// The shader: `shaders/forward/gather.wgsl` and `shaders/forward/rows.wgsl` with this variant's constants and the code
    /// for its rows and named accumulators, for tensors of `io`.
    pub(crate) fn source(&self, io: Io) -> String {
        let (quads, rows) = (self.channels / 4, self.rows);
        let mut g = std::collections::HashMap::<&str, String>::new();
        let mut add = |marker: &'static str, line: String| g.entry(marker).or_default().push_str(&(line + "\n"));
        let any: Vec<String> = (0..rows).map(|i| format!("r{i}.count > 0u")).collect();
        let takes: Vec<String> = (0..rows).map(|i| format!("t{i}.x")).collect();
        for i in 0..rows {
            add("ROWS", format!("    let r{i} = row_taps(wk, rho + S_H * min(rg * RB + {i}u, rows_here - 1u), rg * RB + {i}u < rows_here);"));
            add("ROW_TAPS", format!("                        let t{i} = row_input(r{i}, jh);"));
            add("X_PTRS", format!("                            var x{i} = x_block + t{i}.y * IN_W + iw;"));
            add("STORE", format!("        if (r{i}.ok) {{"));
            for q in 0..quads {
                add("ACC_DECL", format!("        var acc_{i}_{q} = vec4<f32>(0.0);"));
                for (c, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                    add(
                        "STORE",
                        format!(
                            "            store(wk, r{i}.oh, ow, wk.oc0 + {}u, acc_{i}_{q}.{comp});",
                            4 * q + c as u32
                        ),
                    );
                }
            }
            add("STORE", "        }".into());
        }
        add("ROWS", format!("    let any_taps = {};", any.join(" || ")));
        add("ROW_TAPS", format!("                        if (({}) == 0u) {{\n                            continue;\n                        }}", takes.join(" | ")));
        add("ROW_TAPS", format!("                        let every_row = ({}) != 0u;", takes.join(" & ")));
        // The multiply-adds of UNROLL consecutive input channels, every row taking the kernel row.
        const UNROLL: u32 = 4;
        let ind = "                            ";
        let mut unrolled = String::new();
        for i in 0..rows {
            for u in 0..UNROLL {
                unrolled += &format!("{ind}    let v{i}_{u} = vec4<f32>(x_ld(x{i} + {u}u * plane));\n");
            }
        }
        for u in 0..UNROLL {
            for q in 0..quads {
                unrolled += &format!("{ind}    let w{u}_{q} = slab[sb + {}u];\n", u * quads + q);
                for i in 0..rows {
                    unrolled += &format!("{ind}    acc_{i}_{q} = fma(v{i}_{u}, w{u}_{q}, acc_{i}_{q});\n");
                }
            }
        }
        for i in 0..rows {
            unrolled += &format!("{ind}    x{i} += {UNROLL}u * plane;\n");
        }
        // One input channel; `guarded`: each row only where it takes the kernel row.
        let single = |guarded: bool| {
            let mut c = String::new();
            for q in 0..quads {
                c += &format!("{ind}    let w{q} = slab[sb + {q}u];\n");
            }
            for i in 0..rows {
                let (open, close, pad) = if guarded {
                    (format!("{ind}    if (t{i}.x != 0u) {{\n"), format!("{ind}    }}\n"), "    ")
                } else {
                    (String::new(), String::new(), "")
                };
                c += &open;
                c += &format!("{ind}{pad}    let v{i} = vec4<f32>(x_ld(x{i}));\n");
                for q in 0..quads {
                    c += &format!("{ind}{pad}    acc_{i}_{q} = fma(v{i}, w{q}, acc_{i}_{q});\n");
                }
                c += &close;
                c += &format!("{ind}    x{i} += plane;\n");
            }
            c + &format!("{ind}    sb += QUADS;\n")
        };
        add(
            "CHANNELS",
            format!(
                "{ind}if (every_row) {{\n{ind}    var icl = 0u;\n{ind}    for (; icl + {UNROLL}u <= n_ic; icl += {UNROLL}u) {{\n{}{ind}        sb += {UNROLL}u * QUADS;\n{ind}    }}\n{ind}    for (; icl < n_ic; icl++) {{\n{}{ind}    }}\n{ind}}} else {{\n{ind}    for (var icl = 0u; icl < n_ic; icl++) {{\n{}{ind}    }}\n{ind}}}",
                indent(&unrolled),
                indent(&single(false)),
                indent(&single(true)),
            ),
        );
        let parts = ["ROWS", "ACC_DECL", "ROW_TAPS", "X_PTRS", "CHANNELS", "STORE"].map(|m| (m, g[m].as_str()));
        let body = fill_markers(TEMPLATE, &parts);
        let header = format!(
            "const OCB: u32 = {}u;\nconst RB: u32 = {rows}u;\nconst WG: u32 = {WORKGROUP_SIZE}u;\nconst SLAB: u32 = {SLAB}u;\n",
            self.channels
        );
        gather::source(io, &[&header, &body])
    }

    /// Whether an adapter with these limits can run the workgroup.
    pub fn fits(&self, limits: &wgpu::Limits) -> bool {
        self.channels.is_multiple_of(4)
            && self.rows >= 1
            && self.channels + 4 <= SLAB
            && SLAB * 4 <= limits.max_compute_workgroup_storage_size
            && WORKGROUP_SIZE <= limits.max_compute_invocations_per_workgroup
            && WORKGROUP_SIZE <= limits.max_compute_workgroup_size_x
    }

    /// The shader's override constants for one shape: the gather kernels' and the slab's blocks.
    pub(crate) fn constants(&self, shape: &ConvShape, has_bias: bool) -> Result<Vec<(&'static str, f64)>> {
        let mut c = gather::constants(shape, has_bias)?;
        let [jhc, kwc, icc] = self.blocks(shape);
        c.extend([("JHC", jhc as f64), ("KWC", kwc as f64), ("ICC", icc as f64)]);
        Ok(c)
    }

    /// The slab's blocks for a shape (the shader's JHC, KWC, ICC): kernel rows, kernel columns and input
    /// channels. Everything a stride phase's rows need, in one slab, when it fits; else all columns of one kernel
    /// row with as many channels as fit; else as many columns as fit, one channel at a time. Each (kernel row,
    /// kernel column) block takes ICC * channels values and 4 of skew.
    pub fn blocks(&self, shape: &ConvShape) -> [usize; 3] {
        let (slab, ocb) = (SLAB as usize, self.channels as usize);
        let k_step = shape.stride[0] / gcd(shape.stride[0], shape.dilation[0]);
        let row_taps = shape.kernel[0].div_ceil(k_step);
        let k_w = shape.kernel[1];
        let cig = shape.in_per_group().max(1);
        let channels_for = |columns: usize| cig.min((slab / columns - 4) / ocb);
        if row_taps * k_w * (ocb + 4) <= slab {
            [row_taps, k_w, channels_for(row_taps * k_w)]
        } else if k_w * (ocb + 4) <= slab {
            [1, k_w, channels_for(k_w)]
        } else {
            [1, slab / (ocb + 4), 1]
        }
    }
}

/// `code` with every line indented four more spaces.
fn indent(code: &str) -> String {
    code.lines().map(|l| format!("    {l}\n")).collect()
}

/// Encodes the rows kernel over every slice of the plan into `pass`; `output` has `shape`'s output size.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    rows: &Rows,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    output: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<()> {
    // Row phases times groups of `rows` rows of the largest phase (as the shader numbers them).
    let (out_h, s_h) = (shape.out_hw[0], shape.stride[0]);
    let row_groups = s_h.min(out_h) * out_h.div_ceil(s_h).div_ceil(rows.rows as usize);
    let kernel = gather::Kernel {
        name: &rows.name(),
        source: |io| rows.source(io),
        constants: rows.constants(shape, bias.is_some())?,
        block: rows.channels as usize,
        workgroups: |samples: usize, blocks: usize| samples * blocks * row_groups,
    };
    gather::encode(ctx, shape, kernel, [input, weight, output], bias, pass)
}

/// This kernel's shaders for validation (`gpu::shader_sources`): every variant.
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let variants = VARIANTS.iter().flat_map(|r| Io::variants().into_iter().map(move |io| (r, io)));
    variants.map(|(r, io)| (SHADER_NAME, format!("{} {}", r.name(), io.key()), r.source(io))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::ConvTranspose2dOptions;

    fn shape(cin: usize, cout: usize, k: [usize; 2], stride: [usize; 2], dilation: [usize; 2]) -> ConvShape {
        let p = ConvTranspose2dOptions::default()
            .stride((stride[0] as i64, stride[1] as i64))
            .dilation((dilation[0] as i64, dilation[1] as i64));
        p.resolve(&[1, cin, 5, 5], &[cin, cout, k[0], k[1]], None).unwrap()
    }

    #[test]
    fn slab_blocks_always_fit_and_cover_the_kernel() {
        for v in VARIANTS {
            for (cin, k, s, d) in [
                (32, [3, 3], [5, 5], [2, 2]),
                (8, [3, 5], [2, 3], [2, 1]),
                (64, [3, 3], [1, 1], [1, 1]),
                (512, [4, 4], [2, 2], [1, 1]),
                (3, [2, 300], [1, 1], [1, 1]),
                (5, [7, 1000], [3, 1], [1, 1]),
            ] {
                let sh = shape(cin, 16, k, s, d);
                let [jhc, kwc, icc] = v.blocks(&sh);
                assert!(jhc >= 1 && kwc >= 1 && icc >= 1, "{v:?} {sh:?}");
                assert!(jhc * kwc * (icc * v.channels as usize + 4) <= SLAB as usize, "{v:?} {sh:?}");
                assert!(kwc <= sh.kernel[1] && icc <= sh.in_per_group(), "{v:?} {sh:?}");
            }
        }
        // The suite's two rows-kernel cases: one slab holds everything a row needs.
        let kb81 = shape(32, 64, [3, 3], [5, 5], [2, 2]);
        assert_eq!(crate::gpu::select::rows_variant(&kb81).blocks(&kb81), [1, 3, 32]);
        let kb75 = shape(8, 16, [3, 5], [2, 3], [2, 1]);
        assert_eq!(crate::gpu::select::rows_variant(&kb75).blocks(&kb75), [3, 5, 8]);
    }
}
