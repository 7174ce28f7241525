//! Random valid problems covering every option, for the property tests of the forward and the backward.

use convt::{ConvShape, ConvTranspose2dOptions, Tensor};
use proptest::prelude::*;

/// A valid problem: (input dims, weight dims, bias, params).
#[derive(Debug, Clone)]
pub struct Problem {
    pub input: Vec<usize>,
    pub weight: Vec<usize>,
    pub bias: bool,
    pub params: ConvTranspose2dOptions,
    pub seed: u64,
}

impl Problem {
    pub fn shape(&self) -> ConvShape {
        let cout = self.weight[1] * self.params.groups as usize;
        self.params.resolve(&self.input, &self.weight, self.bias.then_some(&[cout][..])).expect("valid problem")
    }

    /// Input, weight and optional bias drawn from U(-1, 1) with the problem's seed.
    pub fn tensors(&self) -> (Tensor, Tensor, Option<Tensor>) {
        let x = Tensor::uniform(self.input.clone(), -1.0, 1.0, self.seed).unwrap();
        let w = Tensor::uniform(self.weight.clone(), -1.0, 1.0, self.seed ^ 1).unwrap();
        let b = self.bias.then(|| Tensor::uniform(vec![self.shape().out_channels], -1.0, 1.0, self.seed ^ 2).unwrap());
        (x, w, b)
    }
}

/// What [`problems`] draws: (batch, groups, input and output channels per group), (H, W, kH, kW), (stride,
/// dilation), (padding, output_padding, bias, seed).
pub type Drawn =
    ((usize, usize, usize, usize), (usize, usize, usize, usize), ([i64; 2], [i64; 2]), ([i64; 2], [i64; 2], bool, u64));

/// The problem `drawn` describes, its output_padding taken modulo max(stride, dilation) (PyTorch's bound), or
/// `None` where it has no valid output.
pub fn problem_of(((n, g, cig, cog), (h, w, kh, kw), (s, d), (p, op, bias, seed)): Drawn) -> Option<Problem> {
    // output_padding < max(stride, dilation), as PyTorch requires.
    let op = [op[0] % s[0].max(d[0]), op[1] % s[1].max(d[1])];
    let params = ConvTranspose2dOptions {
        stride: s,
        padding: p,
        output_padding: op,
        dilation: d,
        groups: g as i64,
        ..Default::default()
    };
    let pr = Problem { input: vec![n, g * cig, h, w], weight: vec![g * cig, cog, kh, kw], bias, params, seed };
    let cout = cog * g;
    params.resolve(&pr.input, &pr.weight, bias.then_some(&[cout][..])).ok().map(|_| pr)
}

pub fn problems() -> impl Strategy<Value = Problem> {
    (
        (1usize..=3, 1usize..=4, 1usize..=4, 1usize..=4), // batch, groups, in per group, out per group
        (1usize..=7, 1usize..=7, 1usize..=5, 1usize..=5), // H, W, kH, kW
        ([1i64..=4, 1i64..=4], [1i64..=3, 1i64..=3]),     // stride, dilation
        ([0i64..=3, 0i64..=3], [0i64..=3, 0i64..=3], any::<bool>(), any::<u64>()),
    )
        .prop_filter_map("output must be non-empty", problem_of)
}
