//! `convt forward`: safetensors in (`input`, `weight`, optional `bias`), safetensors out (`output`).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};
use convt::{DType, Precision};

use crate::args::{open_problem, ConvArgs, Problem, WeightArgs};
use crate::Outcome;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Backend {
    Gpu,
    Cpu,
}

#[derive(Args, Debug)]
pub struct ForwardArgs {
    /// Safetensors file with tensors `input` [N,Cin,H,W] (or [Cin,H,W]), `weight` [Cin,Cout/G,kH,kW] and optional
    /// `bias` [Cout] (or those from --weights), float tensors of one dtype (F64 and float8 read as f32).
    #[arg(long)]
    tensors: PathBuf,
    /// Where to write the tensor `output`, in the inputs' dtype.
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
    /// Arithmetic on the GPU: `f32` (exact) or `fast` (the fastest kernel within 1e-3 relative error: f16
    /// operands with f32 accumulation, or an exact kernel where that measured faster). The kernel that ran and
    /// its arithmetic are reported.
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// Print what ran and what was written as one JSON object on stdout instead of lines (an error too, as
    /// `{"error": ...}`).
    #[arg(long)]
    json: bool,
}

pub fn run(a: ForwardArgs) -> Result<Outcome> {
    let Problem { out, input, weight, bias, dtype, .. } = open_problem(&a.tensors, &a.weights, &a.out, a.dtype, false)?;
    let (input, weight, bias) = (&input, &weight, bias.as_ref());
    let params = a.conv.params_for(input.shape(), weight.shape())?;
    // Validate before touching the GPU, so bad input fails fast and the same way on both backends.
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let (output, ran) = match a.backend {
        Backend::Cpu => {
            let output = convt::cpu::conv_transpose2d(input, weight, bias, &params)?.to_dtype(dtype);
            (output, serde_json::json!({"backend": "cpu"}))
        }
        Backend::Gpu => {
            let ctx = crate::args::gpu_context()?;
            let (output, strategy) = crate::host::forward(&ctx, a.precision, input, weight, bias, &params)?;
            if !a.json {
                println!("ran {} ({}) on {}", strategy.name(), strategy.arithmetic(), ctx.adapter_info().name);
            }
            let ran = serde_json::json!({
                "backend": "gpu",
                "adapter": ctx.adapter_info().name,
                "kernel": strategy.name(),
                "arithmetic": strategy.arithmetic().to_string(),
            });
            (output, ran)
        }
    };
    out.write_tensors(&[("output", &output)], None)?;
    if !a.json {
        println!("wrote output {:?} ({dtype}) to {}", shape.output_dims_as_given(), a.out.display());
    } else {
        let written = serde_json::json!({"output": shape.output_dims_as_given(), "dtype": dtype.to_string()});
        println!("{}", serde_json::json!({"ran": ran, "wrote": written, "file": a.out.display().to_string()}));
    }
    Ok(Outcome::Ok)
}
