//! The CPU reference: `conv_transpose2d` straight from its definition, accumulated in f64. It is the oracle of
//! the tests and the `--backend cpu` of the CLI, so it favours obviousness over speed (threads aside).
//!
//! Definition (scatter form, PyTorch's): every input element `x[n, g*Cig+ic, ih, iw]` adds
//! `x * w[g*Cig+ic, oc, kh, kw]` to `out[n, g*Cog+oc, ih*sH - pH + kh*dH, iw*sW - pW + kw*dW]` when that
//! position lies inside the output; then the bias is added. The gradients follow from the same form: each term
//! `x * w` sends `grad_output` at its output position back to `x` (weighted by `w`) and to `w` (weighted by `x`).

use std::sync::Mutex;

use crate::error::Result;
use crate::gradients::Gradients;
use crate::params::{ConvShape, ConvTranspose2dOptions};
use crate::tensor::{filled_vec, to_f32_vec, Tensor};

/// `conv_transpose2d` on the CPU in f64, rounded to f32 at the end. Validates exactly like the GPU path.
pub fn conv_transpose2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    params: &ConvTranspose2dOptions,
) -> Result<Tensor> {
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let out = conv_transpose2d_f64(&shape, input.data(), weight.data(), bias.map(|b| b.data()))?;
    Tensor::new(shape.output_dims_as_given(), to_f32_vec(&out, || "the output".into())?)
}

/// Runs `task(i, chunk)` for every `chunk_len`-long chunk `i` of `out`, spread over the machine's cores. Each
/// task owns its chunk.
fn par_chunks(out: &mut [f64], chunk_len: usize, task: impl Fn(usize, &mut [f64]) + Sync) {
    let count = out.len().div_ceil(chunk_len.max(1));
    // The chunks are handed out one at a time from a shared iterator (no list of them is made: its size would
    // grow with the output's). The lock is held only to take the next chunk.
    let chunks = Mutex::new(out.chunks_mut(chunk_len.max(1)).enumerate());
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(count.max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let next = chunks.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((i, chunk)) = next else { break };
                task(i, chunk);
            });
        }
    });
}

/// The output row `oh` that input row `ih` reaches through tap `k` along `axis`, if inside the output.
fn out_index(shape: &ConvShape, axis: usize, i: usize, k: usize) -> Option<usize> {
    // i128: stride and dilation may be near 2^63 in a valid problem.
    let o =
        i as i128 * shape.stride[axis] as i128 + k as i128 * shape.dilation[axis] as i128 - shape.padding[axis] as i128;
    (o >= 0 && o < shape.out_hw[axis] as i128).then_some(o as usize)
}

/// The reference in f64 for an already validated problem: the output, `[N, Cout, Ho, Wo]` flattened.
/// One task per output plane `(n, output channel)`.
pub fn conv_transpose2d_f64(
    shape: &ConvShape,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Result<Vec<f64>> {
    let [h, w] = shape.in_hw;
    let [ho, wo] = shape.out_hw;
    let [kh_n, kw_n] = shape.kernel;
    let mut out = filled_vec(shape.batch * shape.out_channels * ho * wo, 0f64, || "the f64 reference output".into())?;
    par_chunks(&mut out, ho * wo, |task, dst| {
        let (n, co) = (task / shape.out_channels, task % shape.out_channels);
        let (g, oc) = (co / shape.out_per_group(), co % shape.out_per_group());
        dst.fill(bias.map_or(0.0, |b| b[co] as f64));
        for ic in g * shape.in_per_group()..(g + 1) * shape.in_per_group() {
            let x_plane = &input[(n * shape.in_channels + ic) * h * w..][..h * w];
            for kh in 0..kh_n {
                for kw in 0..kw_n {
                    let wv = weight[((ic * shape.out_per_group() + oc) * kh_n + kh) * kw_n + kw] as f64;
                    for ih in 0..h {
                        let Some(oh) = out_index(shape, 0, ih, kh) else { continue };
                        for iw in 0..w {
                            let Some(ow) = out_index(shape, 1, iw, kw) else { continue };
                            dst[oh * wo + ow] += x_plane[ih * w + iw] as f64 * wv;
                        }
                    }
                }
            }
        }
    });
    Ok(out)
}

/// The three gradients of `conv_transpose2d` given the gradient of its output, on the CPU in f64, rounded to
/// f32 at the end. Validates like the forward, plus `grad_output`'s size.
pub fn conv_transpose2d_backward(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    grad_output: &Tensor,
    params: &ConvTranspose2dOptions,
) -> Result<Gradients> {
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    shape.check_grad_output(grad_output.shape())?;
    let gi = grad_input_f64(&shape, grad_output.data(), weight.data())?;
    let grad_input = Tensor::new(shape.input_dims_as_given(), to_f32_vec(&gi, || "grad_input".into())?)?;
    drop(gi);
    let gw = grad_weight_f64(&shape, input.data(), grad_output.data())?;
    let grad_weight = Tensor::new(shape.weight_dims(), to_f32_vec(&gw, || "grad_weight".into())?)?;
    let grad_bias = match bias {
        Some(_) => {
            let gb = grad_bias_f64(&shape, grad_output.data())?;
            Some(Tensor::new(vec![shape.out_channels], to_f32_vec(&gb, || "grad_bias".into())?)?)
        }
        None => None,
    };
    Ok(Gradients { grad_input, grad_weight, grad_bias })
}

/// `grad_input[n, ic, ih, iw]` = sum over the output channels `oc` of `ic`'s group and the taps `(kh, kw)` that
/// land inside the output of `grad_output[n, oc, ih*sH - pH + kh*dH, iw*sW - pW + kw*dW] * w[ic, oc, kh, kw]`:
/// the derivative of the scatter form with respect to each input element. `[N, Cin, H, W]` flattened.
pub fn grad_input_f64(shape: &ConvShape, grad_output: &[f32], weight: &[f32]) -> Result<Vec<f64>> {
    let [h, w] = shape.in_hw;
    let [ho, wo] = shape.out_hw;
    let [kh_n, kw_n] = shape.kernel;
    let mut gi = filled_vec(shape.batch * shape.in_channels * h * w, 0f64, || "the f64 reference grad_input".into())?;
    par_chunks(&mut gi, h * w, |task, dst| {
        let (n, ic) = (task / shape.in_channels, task % shape.in_channels);
        let g = ic / shape.in_per_group();
        for oc in 0..shape.out_per_group() {
            let co = g * shape.out_per_group() + oc;
            let go_plane = &grad_output[(n * shape.out_channels + co) * ho * wo..][..ho * wo];
            for kh in 0..kh_n {
                for kw in 0..kw_n {
                    let wv = weight[((ic * shape.out_per_group() + oc) * kh_n + kh) * kw_n + kw] as f64;
                    for ih in 0..h {
                        let Some(oh) = out_index(shape, 0, ih, kh) else { continue };
                        for iw in 0..w {
                            let Some(ow) = out_index(shape, 1, iw, kw) else { continue };
                            dst[ih * w + iw] += go_plane[oh * wo + ow] as f64 * wv;
                        }
                    }
                }
            }
        }
    });
    Ok(gi)
}

/// `grad_weight[ic, oc, kh, kw]` = sum over samples and input pixels whose tap `(kh, kw)` lands inside the output
/// of `x[n, ic, ih, iw] * grad_output[n, g*Cog + oc, ih*sH - pH + kh*dH, iw*sW - pW + kw*dW]`.
/// `[Cin, Cout/groups, kH, kW]` flattened.
pub fn grad_weight_f64(shape: &ConvShape, input: &[f32], grad_output: &[f32]) -> Result<Vec<f64>> {
    let [h, w] = shape.in_hw;
    let [ho, wo] = shape.out_hw;
    let [kh_n, kw_n] = shape.kernel;
    let row = shape.out_per_group() * kh_n * kw_n;
    let mut gw = filled_vec(shape.in_channels * row, 0f64, || "the f64 reference grad_weight".into())?;
    par_chunks(&mut gw, row, |ic, dst| {
        let g = ic / shape.in_per_group();
        for n in 0..shape.batch {
            let x_plane = &input[(n * shape.in_channels + ic) * h * w..][..h * w];
            for oc in 0..shape.out_per_group() {
                let co = g * shape.out_per_group() + oc;
                let go_plane = &grad_output[(n * shape.out_channels + co) * ho * wo..][..ho * wo];
                for kh in 0..kh_n {
                    for kw in 0..kw_n {
                        let mut acc = 0f64;
                        for ih in 0..h {
                            let Some(oh) = out_index(shape, 0, ih, kh) else { continue };
                            for iw in 0..w {
                                let Some(ow) = out_index(shape, 1, iw, kw) else { continue };
                                acc += x_plane[ih * w + iw] as f64 * go_plane[oh * wo + ow] as f64;
                            }
                        }
                        dst[(oc * kh_n + kh) * kw_n + kw] += acc;
                    }
                }
            }
        }
    });
    Ok(gw)
}

/// `grad_bias[co]` = the sum of `grad_output[n, co, :, :]` over samples and pixels. `[Cout]`.
pub fn grad_bias_f64(shape: &ConvShape, grad_output: &[f32]) -> Result<Vec<f64>> {
    let plane = shape.out_hw[0] * shape.out_hw[1];
    let mut gb = filled_vec(shape.out_channels, 0f64, || "the f64 reference grad_bias".into())?;
    for (co, acc) in gb.iter_mut().enumerate() {
        *acc = (0..shape.batch)
            .flat_map(|n| &grad_output[(n * shape.out_channels + co) * plane..][..plane])
            .map(|&v| v as f64)
            .sum();
    }
    Ok(gb)
}

/// One output element in f64 by the gather form, written independently of [`conv_transpose2d_f64`]: a tap
/// `(kh, kw)` contributes iff `t = oh + pH - kh*dH` is a non-negative multiple of `sH` with `t / sH < H`
/// (likewise for the width). Used to check huge outputs at sampled positions and to cross-check the scatter form.
pub fn output_at(
    shape: &ConvShape,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    [n, co, oh, ow]: [usize; 4],
) -> f64 {
    let [h, w] = shape.in_hw;
    let (g, oc) = (co / shape.out_per_group(), co % shape.out_per_group());
    let mut acc = bias.map_or(0.0, |b| b[co] as f64);
    for kh in 0..shape.kernel[0] {
        let t = oh as i128 + shape.padding[0] as i128 - kh as i128 * shape.dilation[0] as i128;
        if t < 0 || t % shape.stride[0] as i128 != 0 || t / shape.stride[0] as i128 >= h as i128 {
            continue;
        }
        let ih = (t / shape.stride[0] as i128) as usize;
        for kw in 0..shape.kernel[1] {
            let t = ow as i128 + shape.padding[1] as i128 - kw as i128 * shape.dilation[1] as i128;
            if t < 0 || t % shape.stride[1] as i128 != 0 || t / shape.stride[1] as i128 >= w as i128 {
                continue;
            }
            let iw = (t / shape.stride[1] as i128) as usize;
            for icg in 0..shape.in_per_group() {
                let ic = g * shape.in_per_group() + icg;
                let x = input[((n * shape.in_channels + ic) * h + ih) * w + iw] as f64;
                let wv = weight[((ic * shape.out_per_group() + oc) * shape.kernel[0] + kh) * shape.kernel[1] + kw];
                acc += x * wv as f64;
            }
        }
    }
    acc
}

/// One element of grad_input in f64, written independently of [`grad_input_f64`] (gather over the taps that
/// land inside the output). For checking huge problems at sampled positions.
pub fn grad_input_at(shape: &ConvShape, grad_output: &[f32], weight: &[f32], [n, ic, ih, iw]: [usize; 4]) -> f64 {
    let [ho, wo] = shape.out_hw;
    let g = ic / shape.in_per_group();
    let mut acc = 0f64;
    for oc in 0..shape.out_per_group() {
        let co = g * shape.out_per_group() + oc;
        for kh in 0..shape.kernel[0] {
            let Some(oh) = out_index(shape, 0, ih, kh) else { continue };
            for kw in 0..shape.kernel[1] {
                let Some(ow) = out_index(shape, 1, iw, kw) else { continue };
                let wv = weight[((ic * shape.out_per_group() + oc) * shape.kernel[0] + kh) * shape.kernel[1] + kw];
                acc += grad_output[((n * shape.out_channels + co) * ho + oh) * wo + ow] as f64 * wv as f64;
            }
        }
    }
    acc
}

/// One element of grad_weight in f64 (a sum over the whole batch and every input pixel). For checking huge
/// problems at sampled positions.
pub fn grad_weight_at(shape: &ConvShape, input: &[f32], grad_output: &[f32], [ic, oc, kh, kw]: [usize; 4]) -> f64 {
    let [h, w] = shape.in_hw;
    let [ho, wo] = shape.out_hw;
    let co = ic / shape.in_per_group() * shape.out_per_group() + oc;
    let mut acc = 0f64;
    for n in 0..shape.batch {
        for ih in 0..h {
            let Some(oh) = out_index(shape, 0, ih, kh) else { continue };
            let x_row = &input[((n * shape.in_channels + ic) * h + ih) * w..][..w];
            let go_row = &grad_output[((n * shape.out_channels + co) * ho + oh) * wo..][..wo];
            for (iw, &x) in x_row.iter().enumerate() {
                let Some(ow) = out_index(shape, 1, iw, kw) else { continue };
                acc += x as f64 * go_row[ow] as f64;
            }
        }
    }
    acc
}
