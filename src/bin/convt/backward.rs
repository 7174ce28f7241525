//! `convt backward`: safetensors in (`input`, `weight`, optional `bias`, `grad_output`), safetensors out
//! (`grad_input`, `grad_weight` and, when the file has a bias, `grad_bias`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use convt::{DType, Precision, Tensor};

use crate::args::{open_problem, ConvArgs, Problem, WeightArgs};
use crate::forward::Backend;
use crate::Outcome;

#[derive(Args, Debug)]
pub struct BackwardArgs {
    /// Safetensors file with tensors `input` [N,Cin,H,W] (or [Cin,H,W]), `weight` [Cin,Cout/G,kH,kW], optional
    /// `bias` [Cout] (or those from --weights), and `grad_output` (the output's size), float tensors of one dtype
    /// (F64 and float8 read as f32).
    #[arg(long)]
    tensors: PathBuf,
    /// Where to write the tensors `grad_input`, `grad_weight` and (with a bias) `grad_bias`, in the inputs' dtype.
    #[arg(long)]
    out: PathBuf,
    /// Compute in this dtype (f32, f16, bf16), converting the file's tensors to it [default: the file's].
    #[arg(long)]
    dtype: Option<DType>,
    #[command(flatten)]
    weights: WeightArgs,
    #[command(flatten)]
    conv: ConvArgs,
    /// Where to compute: the GPU (wgpu) or the CPU reference (f64 accumulation).
    #[arg(long, value_enum, default_value = "gpu")]
    backend: Backend,
    /// Arithmetic on the GPU: `f32` (exact) or `fast` (the fastest kernels within 1e-3 relative error: f16
    /// operands with f32 accumulation, or exact ones where they measured faster). The kernels that ran are
    /// reported.
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// Print what was written as one JSON object on stdout (the same as the line on stderr).
    #[arg(long)]
    json: bool,
}

pub fn run(a: BackwardArgs) -> Result<Outcome> {
    let Problem { out, input, weight, bias, grad_output, dtype } =
        open_problem(&a.tensors, &a.weights, &a.out, a.dtype, true)?;
    let (input, weight, bias) = (&input, &weight, bias.as_ref());
    let Some(grad_output) = grad_output.as_ref() else { anyhow::bail!("{}: no `grad_output`", a.tensors.display()) };
    let params = a.conv.params_for(input.shape(), weight.shape())?.precision(a.precision);
    // Validate before touching the GPU, so bad input fails fast and the same way on both backends.
    params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?.check_grad_output(grad_output.shape())?;
    let mut ran = serde_json::json!({"backend": "cpu"});
    let grads = match a.backend {
        Backend::Cpu => {
            let g = convt::cpu::conv_transpose2d_backward(input, weight, bias, grad_output, &params)?;
            convt::Gradients {
                grad_input: g.grad_input.to_dtype(dtype),
                grad_weight: g.grad_weight.to_dtype(dtype),
                grad_bias: g.grad_bias.map(|b| b.to_dtype(dtype)),
            }
        }
        Backend::Gpu => {
            let ctx = crate::args::gpu_context()?;
            let (grads, (gi, gw)) = crate::host::backward(&ctx, input, weight, bias, grad_output, &params)?;
            let (gi, gw) = (gi.name(), gw.name());
            if !a.json {
                println!(
                    "ran grad_input {gi}, grad_weight {gw} (precision {}) on {}",
                    a.precision,
                    ctx.adapter_info().name
                );
            }
            ran = serde_json::json!({"backend": "gpu", "adapter": ctx.adapter_info().name, "precision": a.precision,
                "grad_input_kernel": gi, "grad_weight_kernel": gw});
            grads
        }
    };
    let mut written: Vec<(&str, &Tensor)> =
        vec![("grad_input", &grads.grad_input), ("grad_weight", &grads.grad_weight)];
    if let Some(gb) = &grads.grad_bias {
        written.push(("grad_bias", gb));
    }
    out.write_tensors(&written, None)?;
    let list: Vec<String> = written.iter().map(|(name, t)| format!("{name} {:?} ({dtype})", t.shape())).collect();
    if !a.json {
        println!("wrote {} to {}", list.join(", "), a.out.display());
    } else {
        let shapes: serde_json::Map<String, serde_json::Value> =
            written.iter().map(|(name, t)| (name.to_string(), serde_json::json!(t.shape()))).collect();
        ran["wrote"] = serde_json::json!(shapes);
        ran["dtype"] = serde_json::json!(dtype.to_string());
        ran["file"] = serde_json::json!(a.out.display().to_string());
        println!("{ran}");
    }
    Ok(Outcome::Ok)
}
