//! Shape math and validation, shared by every backend: [`ConvTranspose2dOptions`] holds the operator's options
//! exactly as `torch.nn.functional.conv_transpose2d` takes them, and [`ConvShape`] is one validated problem
//! (input, weight, bias and options resolved together), from which every kernel reads its sizes.

use crate::error::{ConvtError, Result};
use crate::precision::Precision;

/// A per-axis (height, width) pair. Converts from a single value (both axes, as in PyTorch) or a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hw(pub [i64; 2]);

impl From<i64> for Hw {
    fn from(v: i64) -> Self {
        Hw([v, v])
    }
}
impl From<(i64, i64)> for Hw {
    fn from((h, w): (i64, i64)) -> Self {
        Hw([h, w])
    }
}
impl From<[i64; 2]> for Hw {
    fn from(v: [i64; 2]) -> Self {
        Hw(v)
    }
}

/// The options of a 2-D transposed convolution: the keyword arguments of `nn.ConvTranspose2d` and
/// `F.conv_transpose2d`, per axis as `[height, width]`, and the GPU arithmetic. One type for the layer, the
/// functional calls and the CLI; build it with the methods below, which take a single value (both axes, as in
/// PyTorch) or a pair: `ConvTranspose2dOptions::default().stride(2).padding(1)`.
///
/// Signed like PyTorch's, so the same rules reject the same values ([`ConvTranspose2dOptions::validate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvTranspose2dOptions {
    /// `[height, width]` step between the output positions of neighbouring input pixels (PyTorch's `stride`);
    /// at least 1.
    pub stride: [i64; 2],
    /// `[height, width]` rows and columns cropped from each side of the full output (PyTorch's `padding`; its
    /// docs describe it as `dilation * (kernel - 1) - padding` zero-padding of the input); at least 0.
    pub padding: [i64; 2],
    /// `[height, width]` extra output rows and columns added at the bottom and right (PyTorch's
    /// `output_padding`); at least 0 and smaller than `max(stride, dilation)` on each axis.
    pub output_padding: [i64; 2],
    /// `[height, width]` spacing between kernel taps (PyTorch's `dilation`); at least 1.
    pub dilation: [i64; 2],
    /// Number of blocked connections from input to output channels (PyTorch's `groups`); at least 1 and must
    /// divide both the input and the output channel counts.
    pub groups: i64,
    /// Whether a layer built with these options has a bias (`nn.ConvTranspose2d`'s `bias`). The functional calls
    /// take the bias tensor, or none, instead.
    pub bias: bool,
    /// The arithmetic on the GPU, forward and backward: exact f32 (default) or `fast` (f16 operands, f32
    /// accumulation; see [`Precision`]). The CPU reference is exact either way.
    pub precision: Precision,
}

impl Default for ConvTranspose2dOptions {
    /// PyTorch's defaults: stride 1, padding 0, output_padding 0, dilation 1, groups 1, a bias; exact f32.
    fn default() -> Self {
        Self {
            stride: [1, 1],
            padding: [0, 0],
            output_padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
            bias: true,
            precision: Precision::F32,
        }
    }
}

impl ConvTranspose2dOptions {
    /// Sets [`Self::bias`]: whether a layer built with these options has a bias.
    pub fn bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }
    /// Sets [`Self::precision`], the forward's arithmetic on the GPU.
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }
    /// Sets [`Self::stride`]: one value for both axes, or a `(height, width)` pair.
    pub fn stride(mut self, v: impl Into<Hw>) -> Self {
        self.stride = v.into().0;
        self
    }
    /// Sets [`Self::padding`]: one value for both axes, or a `(height, width)` pair.
    pub fn padding(mut self, v: impl Into<Hw>) -> Self {
        self.padding = v.into().0;
        self
    }
    /// Sets [`Self::output_padding`]: one value for both axes, or a `(height, width)` pair.
    pub fn output_padding(mut self, v: impl Into<Hw>) -> Self {
        self.output_padding = v.into().0;
        self
    }
    /// Sets [`Self::dilation`]: one value for both axes, or a `(height, width)` pair.
    pub fn dilation(mut self, v: impl Into<Hw>) -> Self {
        self.dilation = v.into().0;
        self
    }
    /// Sets [`Self::groups`].
    pub fn groups(mut self, groups: i64) -> Self {
        self.groups = groups;
        self
    }

    /// The rules PyTorch applies to the options alone (no tensor sizes involved).
    pub fn validate(&self) -> Result<()> {
        if self.groups < 1 {
            return Err(ConvtError::NonPositiveGroups { groups: self.groups });
        }
        if self.stride.iter().any(|&s| s < 1) {
            return Err(ConvtError::NonPositiveStride { stride: self.stride });
        }
        if self.dilation.iter().any(|&d| d < 1) {
            return Err(ConvtError::NonPositiveDilation { dilation: self.dilation });
        }
        if self.padding.iter().any(|&p| p < 0) {
            return Err(ConvtError::NegativePadding { padding: self.padding });
        }
        if self.output_padding.iter().any(|&p| p < 0) {
            return Err(ConvtError::NegativeOutputPadding { output_padding: self.output_padding });
        }
        for axis in 0..2 {
            if self.output_padding[axis] >= self.stride[axis].max(self.dilation[axis]) {
                return Err(ConvtError::OutputPaddingTooLarge {
                    output_padding: self.output_padding,
                    stride: self.stride,
                    dilation: self.dilation,
                });
            }
        }
        Ok(())
    }

    /// `(in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1` per axis, which may be
    /// zero or negative (then the problem is rejected by [`Self::resolve`]).
    pub fn output_size(&self, input_hw: [usize; 2], kernel_hw: [usize; 2]) -> [i64; 2] {
        self.output_size_wide(input_hw, kernel_hw).map(|v| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
    }

    /// [`Self::output_size`] in i128, saturating: exact whenever the true value lies within i128 (always, for
    /// valid options and sizes up to `usize::MAX`, except when two terms near 2^127 add up past it, where the
    /// saturated value is still far beyond any addressable size). Never overflows, whatever the values.
    pub fn output_size_wide(&self, input_hw: [usize; 2], kernel_hw: [usize; 2]) -> [i128; 2] {
        let mut out = [0i128; 2];
        for (axis, o) in out.iter_mut().enumerate() {
            let term = |size: usize, factor: i64| (size as i128 - 1).saturating_mul(factor as i128);
            *o = term(input_hw[axis], self.stride[axis])
                .saturating_sub(2 * self.padding[axis] as i128)
                .saturating_add(term(kernel_hw[axis], self.dilation[axis]))
                .saturating_add(self.output_padding[axis] as i128 + 1);
        }
        out
    }

    /// PyTorch's `forward(input, output_size=...)`: these options with the output_padding that makes the output of
    /// `input` and `weight` (as [`Self::resolve`] takes them) `output_size`, which is `[H, W]` or the whole output
    /// shape (its last two taken). As in PyTorch, each axis reaches the sizes from the output without padding to
    /// `stride - 1` more, whatever output_padding the options held; others are an
    /// [`ConvtError::OutputSizeUnreachable`] naming the range.
    pub fn for_output_size(&self, input: &[usize], weight: &[usize], output_size: &[usize]) -> Result<Self> {
        if !(3..=4).contains(&input.len()) {
            return Err(ConvtError::InputRank { shape: input.to_vec() });
        }
        let size: [usize; 2] = match output_size.len() {
            2 => [output_size[0], output_size[1]],
            n if n == input.len() => [output_size[n - 2], output_size[n - 1]],
            got => return Err(ConvtError::OutputSizeLength { input_dims: input.len(), got }),
        };
        let unpadded = Self { output_padding: [0, 0], ..*self };
        unpadded.validate()?;
        let ([_, _, kh, kw], _) = unpadded.check_weight(weight, None)?;
        let input_hw = [input[input.len() - 2], input[input.len() - 1]];
        let min = unpadded.output_size_wide(input_hw, [kh, kw]);
        let max = [0, 1].map(|a| min[a].saturating_add(self.stride[a] as i128 - 1));
        if (0..2).any(|a| (size[a] as i128) < min[a] || size[a] as i128 > max[a]) {
            let clamp = |v: [i128; 2]| v.map(|v| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64);
            return Err(ConvtError::OutputSizeUnreachable {
                requested: output_size.to_vec(),
                min: clamp(min),
                max: clamp(max),
                input_hw,
            });
        }
        // Within [min, min + stride - 1]: the difference fits i64 (stride does).
        Ok(Self { output_padding: [0, 1].map(|a| (size[a] as i128 - min[a]) as i64), ..*self })
    }

    /// Checks a weight `[Cin, Cout/groups, kH, kW]` and optional bias `[Cout]` against these options (which must
    /// already be valid); returns the weight's dimensions and `Cout`.
    pub fn check_weight(&self, weight: &[usize], bias: Option<&[usize]>) -> Result<([usize; 4], usize)> {
        let dims = match weight {
            [a, b, c, d] => [*a, *b, *c, *d],
            _ => return Err(ConvtError::WeightRank { shape: weight.to_vec() }),
        };
        if dims.contains(&0) {
            return Err(ConvtError::EmptyWeight { shape: weight.to_vec() });
        }
        if self.groups < 1 {
            return Err(ConvtError::NonPositiveGroups { groups: self.groups });
        }
        let groups = self.groups as usize;
        if dims[0] % groups != 0 {
            return Err(ConvtError::InChannelsNotDivisible { in_channels: dims[0], groups: self.groups });
        }
        let out_channels = dims[1].checked_mul(groups).ok_or(ConvtError::SizeOverflow { shape: weight.to_vec() })?;
        if let Some(b) = bias {
            if b != [out_channels] {
                return Err(ConvtError::BiasShape { expected: out_channels, shape: b.to_vec() });
            }
        }
        Ok((dims, out_channels))
    }

    /// Validates one problem the way PyTorch does and resolves every size the kernels need.
    /// `input` is `[N, Cin, H, W]` or unbatched `[Cin, H, W]`; `weight` is `[Cin, Cout/groups, kH, kW]`;
    /// `bias`, when given, is `[Cout]`.
    pub fn resolve(&self, input: &[usize], weight: &[usize], bias: Option<&[usize]>) -> Result<ConvShape> {
        let (batch, in_dims, unbatched) = match input {
            [n, c, h, w] => (*n, [*c, *h, *w], false),
            [c, h, w] => (1, [*c, *h, *w], true),
            _ => return Err(ConvtError::InputRank { shape: input.to_vec() }),
        };
        self.validate()?;
        let ([wc, _, kh, kw], out_channels) = self.check_weight(weight, bias)?;
        let [cin, h, w] = in_dims;
        if cin != wc {
            return Err(ConvtError::ChannelMismatch {
                input: input.to_vec(),
                weight: weight.to_vec(),
                expected: wc,
                actual: cin,
            });
        }
        if h == 0 || w == 0 {
            return Err(ConvtError::EmptyInput { shape: input.to_vec() });
        }
        let groups = self.groups as usize;
        let [out_h, out_w] = self.output_size_wide([h, w], [kh, kw]);
        if out_h < 1 || out_w < 1 {
            let clamp = |v: i128| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
            return Err(ConvtError::OutputTooSmall { in_h: h, in_w: w, out_h: clamp(out_h), out_w: clamp(out_w) });
        }
        // A dimension that does not even fit in usize (the element count check below rejects the rest).
        if out_h > usize::MAX as i128 || out_w > usize::MAX as i128 {
            return Err(ConvtError::OutputTooLarge { in_h: h, in_w: w, out_h, out_w });
        }
        let shape = ConvShape {
            batch,
            in_channels: cin,
            out_channels,
            groups,
            in_hw: [h, w],
            out_hw: [out_h as usize, out_w as usize],
            kernel: [kh, kw],
            stride: self.stride.map(|v| v as usize),
            padding: self.padding.map(|v| v as usize),
            output_padding: self.output_padding.map(|v| v as usize),
            dilation: self.dilation.map(|v| v as usize),
            unbatched,
        };
        // Every element count must be addressable; a tensor whose size overflows is rejected here, once. With an
        // empty batch the tensors hold nothing, but their samples (planes of `H * W`) must still be addressable:
        // every backend computes per sample and per plane.
        for dims in [shape.input_dims(), shape.output_dims(), shape.weight_dims()] {
            checked_numel(&dims)?;
            checked_numel(&dims[1..]).map_err(|_| ConvtError::SizeOverflow { shape: dims.clone() })?;
        }
        Ok(shape)
    }
}

/// The most bytes one f32 tensor may hold: `isize::MAX`, the largest allocation Rust allows (a `Vec` asked for
/// more panics with "capacity overflow" instead of failing).
pub const MAX_TENSOR_BYTES: usize = isize::MAX as usize;

/// The number of elements of an f32 tensor of these dimensions, or an error if it overflows `usize` or its byte
/// count exceeds [`MAX_TENSOR_BYTES`].
pub fn checked_numel(dims: &[usize]) -> Result<usize> {
    let n = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    match n {
        Some(n) if n.checked_mul(4).is_some_and(|bytes| bytes <= MAX_TENSOR_BYTES) => Ok(n),
        _ => Err(ConvtError::SizeOverflow { shape: dims.to_vec() }),
    }
}

/// One validated transposed-convolution problem: every size a kernel needs, as unsigned values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvShape {
    /// Samples in the batch, `N` (1 for an unbatched input); may be 0.
    pub batch: usize,
    /// Input channels, `Cin` (the weight's first dimension).
    pub in_channels: usize,
    /// Output channels, `Cout` (the weight's second dimension times `groups`).
    pub out_channels: usize,
    /// Channel groups; divides `in_channels` and `out_channels`.
    pub groups: usize,
    /// The input's `[H, W]`, in pixels.
    pub in_hw: [usize; 2],
    /// The output's `[Ho, Wo]`, in pixels ([`ConvTranspose2dOptions::output_size`]).
    pub out_hw: [usize; 2],
    /// The kernel's `[kH, kW]`, in taps.
    pub kernel: [usize; 2],
    /// [`ConvTranspose2dOptions::stride`], validated.
    pub stride: [usize; 2],
    /// [`ConvTranspose2dOptions::padding`], validated.
    pub padding: [usize; 2],
    /// [`ConvTranspose2dOptions::output_padding`], validated.
    pub output_padding: [usize; 2],
    /// [`ConvTranspose2dOptions::dilation`], validated.
    pub dilation: [usize; 2],
    /// The input was `[Cin, H, W]`: the output is `[Cout, Ho, Wo]` (computed as a batch of one).
    pub unbatched: bool,
}

impl ConvShape {
    /// The options that resolve to this shape, with a bias or not and at `precision` (which a shape does not
    /// record).
    pub fn options(&self, bias: bool, precision: Precision) -> ConvTranspose2dOptions {
        let signed = |v: [usize; 2]| v.map(|x| x as i64);
        ConvTranspose2dOptions {
            stride: signed(self.stride),
            padding: signed(self.padding),
            output_padding: signed(self.output_padding),
            dilation: signed(self.dilation),
            groups: self.groups as i64,
            bias,
            precision,
        }
    }

    /// Input channels per group, `Cin / groups`.
    pub fn in_per_group(&self) -> usize {
        self.in_channels / self.groups
    }
    /// Output channels per group, `Cout / groups` (the weight's second dimension).
    pub fn out_per_group(&self) -> usize {
        self.out_channels / self.groups
    }
    /// The input's dimensions as the caller gave them (and `grad_input`'s).
    pub fn input_dims_as_given(&self) -> Vec<usize> {
        let d = self.input_dims();
        if self.unbatched {
            d[1..].to_vec()
        } else {
            d
        }
    }
    /// `[N, Cin, H, W]` (always batched).
    pub fn input_dims(&self) -> Vec<usize> {
        vec![self.batch, self.in_channels, self.in_hw[0], self.in_hw[1]]
    }
    /// `[N, Cout, Ho, Wo]` (always batched).
    pub fn output_dims(&self) -> Vec<usize> {
        vec![self.batch, self.out_channels, self.out_hw[0], self.out_hw[1]]
    }
    /// The output's dimensions as the caller sees them: unbatched in, unbatched out.
    pub fn output_dims_as_given(&self) -> Vec<usize> {
        let d = self.output_dims();
        if self.unbatched {
            d[1..].to_vec()
        } else {
            d
        }
    }
    /// Checks that a gradient of the output has the output's size (as the caller sees it: unbatched in,
    /// unbatched out).
    pub fn check_grad_output(&self, grad_output: &[usize]) -> Result<()> {
        if grad_output != self.output_dims_as_given() {
            return Err(ConvtError::GradOutputShape {
                expected: self.output_dims_as_given(),
                actual: grad_output.to_vec(),
            });
        }
        Ok(())
    }
    /// `[Cin, Cout/groups, kH, kW]`.
    pub fn weight_dims(&self) -> Vec<usize> {
        vec![self.in_channels, self.out_per_group(), self.kernel[0], self.kernel[1]]
    }

    /// Multiply-adds whose product lands inside the output (taps cropped by padding are not counted); saturates
    /// at `u64::MAX`. Counted per axis in closed form over the shorter of input and kernel (in i128, so that no
    /// stride, dilation or padding can wrap a position): cheap for any size.
    pub fn useful_macs(&self) -> u64 {
        let axis_taps = |axis: usize| -> u64 {
            let (n_in, n_k) = (self.in_hw[axis] as i128, self.kernel[axis] as i128);
            let (s, d, p) = (self.stride[axis] as i128, self.dilation[axis] as i128, self.padding[axis] as i128);
            let out = self.out_hw[axis] as i128;
            // Output position i*s + k*d - p must lie in [0, out): for each index of the shorter range, count the
            // indices of the other whose position does.
            let (n_outer, n_inner, step_outer, step_inner) =
                if n_in <= n_k { (n_in, n_k, s, d) } else { (n_k, n_in, d, s) };
            let mut taps = 0u64;
            for a in 0..n_outer {
                // p - a*step_outer <= b*step_inner <= out - 1 + p - a*step_outer, with 0 <= b < n_inner.
                let lo = (p - a * step_outer).max(0);
                let hi = out - 1 + p - a * step_outer;
                if hi < lo {
                    continue;
                }
                let first = (lo + step_inner - 1) / step_inner;
                let last = (hi / step_inner).min(n_inner - 1);
                if last >= first {
                    taps = taps.saturating_add((last - first + 1) as u64);
                }
            }
            taps
        };
        let pairs =
            (self.batch as u64).saturating_mul(self.in_channels as u64).saturating_mul(self.out_per_group() as u64);
        axis_taps(0).saturating_mul(axis_taps(1)).saturating_mul(pairs)
    }

    /// Useful floating-point operations (two per multiply-add), as the benchmark tables count them.
    pub fn useful_flops(&self) -> u64 {
        self.useful_macs().saturating_mul(2)
    }

    /// Bytes of f32 data if each tensor (input, weight, bias, output) is moved once.
    pub fn min_bytes(&self, has_bias: bool) -> u64 {
        // Saturating: each tensor fits in memory, their sum in bytes need not fit in u64.
        let n = |d: Vec<usize>| d.iter().fold(1u64, |acc, &x| acc.saturating_mul(x as u64));
        let elems = n(self.input_dims())
            .saturating_add(n(self.weight_dims()))
            .saturating_add(n(self.output_dims()))
            .saturating_add(if has_bias { self.out_channels as u64 } else { 0 });
        elems.saturating_mul(4)
    }
}
