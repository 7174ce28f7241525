//! The CPU reference: `conv_transpose2d` straight from its definition, accumulated in f64. It is the oracle of
//! the tests and the `--backend cpu` of the CLI, so it favours obviousness over speed (threads aside).
//!
//! Definition (scatter form, PyTorch's): every input element `x[n, g*Cig+ic, ih, iw]` adds
//! `x * w[g*Cig+ic, oc, kh, kw]` to `out[n, g*Cog+oc, ih*sH - pH + kh*dH, iw*sW - pW + kw*dW]` when that
//! position lies inside the output; then the bias is added.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::Result;
use crate::params::{ConvShape, ConvTranspose2dParams};
use crate::tensor::Tensor;

/// `conv_transpose2d` on the CPU in f64, rounded to f32 at the end. Validates exactly like the GPU path.
pub fn conv_transpose2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    params: &ConvTranspose2dParams,
) -> Result<Tensor> {
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let out = conv_transpose2d_f64(&shape, input.data(), weight.data(), bias.map(|b| b.data()));
    Tensor::new(shape.output_dims_as_given(), out.into_iter().map(|v| v as f32).collect())
}

/// The reference in f64 for an already validated problem: the output, `[N, Cout, Ho, Wo]` flattened.
/// One task per output plane `(n, output channel)`, spread over the machine's cores.
pub fn conv_transpose2d_f64(shape: &ConvShape, input: &[f32], weight: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let [h, w] = shape.in_hw;
    let [ho, wo] = shape.out_hw;
    let plane = ho * wo;
    let planes = shape.batch * shape.out_channels;
    let mut out = vec![0f64; planes * plane];
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<&mut [f64]>> = out.chunks_mut(plane.max(1)).map(Mutex::new).collect();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(planes.max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let task = next.fetch_add(1, Ordering::Relaxed);
                if task >= planes {
                    break;
                }
                let (n, co) = (task / shape.out_channels, task % shape.out_channels);
                let (g, oc) = (co / shape.out_per_group(), co % shape.out_per_group());
                // Each task owns its plane; the lock is never contended.
                let mut dst = slots[task].lock().unwrap_or_else(|e| e.into_inner());
                let b = bias.map_or(0.0, |b| b[co] as f64);
                dst.iter_mut().for_each(|v| *v = b);
                for icg in 0..shape.in_per_group() {
                    let ic = g * shape.in_per_group() + icg;
                    let x_plane = &input[(n * shape.in_channels + ic) * h * w..][..h * w];
                    for kh in 0..shape.kernel[0] {
                        for kw in 0..shape.kernel[1] {
                            let wv = weight
                                [((ic * shape.out_per_group() + oc) * shape.kernel[0] + kh) * shape.kernel[1] + kw]
                                as f64;
                            for ih in 0..h {
                                let oh =
                                    (ih * shape.stride[0] + kh * shape.dilation[0]) as i64 - shape.padding[0] as i64;
                                if oh < 0 || oh >= ho as i64 {
                                    continue;
                                }
                                for iw in 0..w {
                                    let ow = (iw * shape.stride[1] + kw * shape.dilation[1]) as i64
                                        - shape.padding[1] as i64;
                                    if ow < 0 || ow >= wo as i64 {
                                        continue;
                                    }
                                    dst[oh as usize * wo + ow as usize] += x_plane[ih * w + iw] as f64 * wv;
                                }
                            }
                        }
                    }
                }
            });
        }
    });
    drop(slots);
    out
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
        let t = oh as i64 + shape.padding[0] as i64 - (kh * shape.dilation[0]) as i64;
        if t < 0 || t % shape.stride[0] as i64 != 0 || t / shape.stride[0] as i64 >= h as i64 {
            continue;
        }
        let ih = (t / shape.stride[0] as i64) as usize;
        for kw in 0..shape.kernel[1] {
            let t = ow as i64 + shape.padding[1] as i64 - (kw * shape.dilation[1]) as i64;
            if t < 0 || t % shape.stride[1] as i64 != 0 || t / shape.stride[1] as i64 >= w as i64 {
                continue;
            }
            let iw = (t / shape.stride[1] as i64) as usize;
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
