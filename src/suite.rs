//! The benchmark suite: KernelBench level 1's seven ConvTranspose2d problems and two decoder shapes. Used by
//! `convt verify --case` and the benchmarks.

use crate::params::ConvTranspose2dOptions;

/// One benchmark problem: the sizes of a `[N, Cin, H, W]` input and a `[Cin, Cout/groups, kH, kW]` weight, and
/// the options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// The case's name, which `convt verify --case` and [`find`] take (case-insensitive).
    pub name: &'static str,
    /// Samples in the batch, `N`.
    pub batch: usize,
    /// Input channels, `Cin`.
    pub in_channels: usize,
    /// Output channels, `Cout`.
    pub out_channels: usize,
    /// The input's `[H, W]`, in pixels.
    pub in_hw: [usize; 2],
    /// The kernel's `[kH, kW]`, in taps.
    pub kernel: [usize; 2],
    /// Stride, padding, output_padding, dilation and groups (f32 precision).
    pub params: ConvTranspose2dOptions,
    /// Whether the problem has a bias `[Cout]` (the same value as `params.bias`).
    pub bias: bool,
}

impl Case {
    /// The input's dimensions, `[N, Cin, H, W]`.
    pub fn input_dims(&self) -> Vec<usize> {
        vec![self.batch, self.in_channels, self.in_hw[0], self.in_hw[1]]
    }
    /// The weight's dimensions, `[Cin, Cout/groups, kH, kW]`.
    pub fn weight_dims(&self) -> Vec<usize> {
        vec![self.in_channels, self.out_channels / self.params.groups as usize, self.kernel[0], self.kernel[1]]
    }
    /// The same case with another batch size (to scale a case down to what a CPU reference can check).
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }
}

#[allow(clippy::too_many_arguments)]
const fn case(
    name: &'static str,
    batch: usize,
    cin: usize,
    cout: usize,
    hw: [usize; 2],
    k: [usize; 2],
    stride: [i64; 2],
    padding: [i64; 2],
    output_padding: [i64; 2],
    dilation: [i64; 2],
    groups: i64,
    bias: bool,
) -> Case {
    Case {
        name,
        batch,
        in_channels: cin,
        out_channels: cout,
        in_hw: hw,
        kernel: k,
        params: ConvTranspose2dOptions {
            stride,
            padding,
            output_padding,
            dilation,
            groups,
            bias,
            precision: crate::precision::Precision::F32,
        },
        bias,
    }
}

/// The nine benchmark cases (KernelBench's use no bias; the two decoders use it where noted).
pub const CASES: &[Case] = &[
    case("kb57", 8, 64, 64, [1024, 1024], [3, 3], [1, 1], [0, 0], [0, 0], [1, 1], 1, false),
    case("kb65", 8, 64, 64, [512, 512], [3, 7], [1, 1], [0, 0], [0, 0], [1, 1], 1, false),
    case("kb69", 64, 64, 128, [128, 256], [3, 5], [1, 1], [0, 0], [0, 0], [1, 1], 1, false),
    case("kb71", 8, 32, 32, [512, 1024], [3, 3], [1, 1], [0, 0], [0, 0], [1, 1], 1, false),
    case("kb75", 16, 32, 64, [128, 256], [3, 5], [2, 3], [1, 2], [0, 0], [2, 1], 4, false),
    case("kb78", 8, 32, 32, [512, 1024], [3, 7], [1, 1], [1, 3], [0, 0], [1, 1], 1, false),
    case("kb81", 16, 32, 64, [64, 128], [3, 3], [5, 5], [1, 1], [0, 0], [2, 2], 1, false),
    case("up2x", 32, 256, 128, [64, 64], [3, 3], [2, 2], [1, 1], [1, 1], [1, 1], 1, true),
    case("dcgan", 128, 512, 256, [8, 8], [4, 4], [2, 2], [1, 1], [0, 0], [1, 1], 1, false),
];

/// The case called `name`, if any.
pub fn find(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.name.eq_ignore_ascii_case(name))
}
