//! Elementwise arithmetic on GPU tensors (`shaders/elementwise.wgsl`): what a training loop needs besides the
//! convolution and its gradients (a loss gradient, an optimizer step), so it can stay on the GPU.

use crate::dtype::DType;
use crate::error::{ConvtError, Result};
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{dispatch_buffers, grid};
use crate::gpu::memory::GpuTensor;

/// The name under which [`SHADER`] is compiled and reported in errors (its path under `shaders/`).
pub const SHADER_NAME: &str = "elementwise.wgsl";
/// The WGSL source of `axpby` (`shaders/elementwise.wgsl`).
pub const SHADER: &str = include_str!("../../shaders/elementwise.wgsl");
const WORKGROUP_SIZE: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    a: f32,
    b: f32,
    len: u32,
    dispatch_width: u32,
}

/// `y = a*x + b*y`, elementwise; `x` and `y` must have the same shape, and be f32.
pub fn axpby(ctx: &GpuContext, a: f32, x: &GpuTensor, b: f32, y: &GpuTensor) -> Result<()> {
    if x.shape() != y.shape() {
        return Err(ConvtError::ShapeMismatch { expected: y.shape().to_vec(), actual: x.shape().to_vec() });
    }
    if let Some(t) = [x, y].into_iter().find(|t| t.dtype() != DType::F32) {
        return Err(ConvtError::UnsupportedDType { what: "axpby".into(), dtype: t.dtype() });
    }
    y.mark_written();
    let module = ctx.module(SHADER_NAME, SHADER)?;
    let pipeline = ctx.pipeline(format!("axpby {:?}", ctx.options().shader_checks), &module, &[])?;
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        ctx.scoped(|| {
            // Equal shapes have equal chunks.
            for (cx, cy) in x.chunks().iter().zip(y.chunks()) {
                let len = cy.planes * y.plane_elems();
                let grid = grid(ctx, len.div_ceil(WORKGROUP_SIZE));
                let p = Params { a, b, len: len as u32, dispatch_width: grid.0 };
                dispatch_buffers(ctx, &mut pass, &pipeline, bytemuck::bytes_of(&p), &[&cx, &cy], grid);
            }
            Ok(())
        })?;
    }
    ctx.scoped(|| {
        ctx.queue.submit([encoder.finish()]);
        Ok(())
    })?;
    y.mark_written();
    Ok(())
}

/// The gradient of the mean squared error `mean((pred - target)^2)` with respect to `pred`, written into
/// `grad`: `2/n * (pred - target)`.
pub fn mse_grad(ctx: &GpuContext, pred: &GpuTensor, target: &GpuTensor, grad: &GpuTensor) -> Result<()> {
    if pred.shape() != target.shape() || pred.shape() != grad.shape() {
        return Err(ConvtError::ShapeMismatch { expected: pred.shape().to_vec(), actual: target.shape().to_vec() });
    }
    let scale = 2.0 / pred.numel().max(1) as f32;
    pred.copy_to(ctx, grad)?;
    axpby(ctx, -scale, target, scale, grad)
}

/// This module's shader for validation (`gpu::shader_sources`).
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    vec![(SHADER_NAME, SHADER_NAME.to_string(), SHADER.to_string())]
}
