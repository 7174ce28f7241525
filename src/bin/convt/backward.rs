//! `convt backward`: safetensors in (`input`, `weight`, optional `bias`, `grad_output`), safetensors out
//! (`grad_input`, `grad_weight` and, when the file has a bias, `grad_bias`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use convt::{GpuContext, Tensor};

use crate::args::{open_problem, ConvArgs, Problem};
use crate::forward::Backend;
use crate::Outcome;

#[derive(Args, Debug)]
pub struct BackwardArgs {
    /// Safetensors file with f32 tensors `input` [N,Cin,H,W] (or [Cin,H,W]), `weight` [Cin,Cout/G,kH,kW],
    /// optional `bias` [Cout], and `grad_output` (the output's size).
    #[arg(long)]
    tensors: PathBuf,
    /// Where to write the f32 tensors `grad_input`, `grad_weight` and (with a bias) `grad_bias`.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    conv: ConvArgs,
    /// Where to compute: the GPU (wgpu) or the CPU reference (f64 accumulation).
    #[arg(long, value_enum, default_value = "gpu")]
    backend: Backend,
}

pub fn run(a: BackwardArgs) -> Result<Outcome> {
    let Problem { out, file, input, weight, bias } = open_problem(&a.tensors, &a.out)?;
    let (input, weight, bias) = (&input, &weight, bias.as_ref());
    let grad_output = &file.get("grad_output")?;
    let params = a.conv.params();
    // Validate before touching the GPU, so bad input fails fast and the same way on both backends.
    params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?.check_grad_output(grad_output.shape())?;
    let grads = match a.backend {
        Backend::Cpu => convt::cpu::conv_transpose2d_backward(input, weight, bias, grad_output, &params)?,
        Backend::Gpu => {
            let ctx = GpuContext::new()?;
            crate::host::backward(&ctx, input, weight, bias, grad_output, &params)?
        }
    };
    let mut written: Vec<(&str, &Tensor)> =
        vec![("grad_input", &grads.grad_input), ("grad_weight", &grads.grad_weight)];
    if let Some(gb) = &grads.grad_bias {
        written.push(("grad_bias", gb));
    }
    out.write_tensors(&written, None)?;
    let list: Vec<String> = written.iter().map(|(name, t)| format!("{name} {:?}", t.shape())).collect();
    eprintln!("wrote {} to {}", list.join(", "), a.out.display());
    Ok(Outcome::Ok)
}
