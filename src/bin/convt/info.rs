//! `convt info`: which adapters wgpu finds, which one convt chooses, and what that one offers.

use anyhow::Result;
use clap::Args;
use convt::gpu::describe;
use convt::GpuContext;

use crate::Outcome;

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: InfoArgs) -> Result<Outcome> {
    let opts = crate::args::gpu_options()?;
    let ctx = GpuContext::with_options(opts.clone())?;
    let report = describe(&ctx, &opts);
    if a.json {
        println!("{report}");
        return Ok(Outcome::Ok);
    }
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    println!("adapters found (--adapter takes the number or part of the name):");
    for (i, s) in report["adapters"].as_array().into_iter().flatten().enumerate() {
        println!(
            "  {i}: {} ({}, {}, driver {} {})",
            text(&s["name"]),
            text(&s["backend"]),
            text(&s["device_type"]),
            text(&s["driver"]),
            text(&s["driver_info"])
        );
    }
    let chosen = &report["chosen"];
    println!("chosen: {} ({}, {})", text(&chosen["name"]), text(&chosen["backend"]), text(&chosen["device_type"]));
    println!("driver: {} {}", text(&chosen["driver"]), text(&chosen["driver_info"]));
    println!("limits:");
    for (k, v) in report["limits"].as_object().into_iter().flatten() {
        println!("  {k}: {v}");
    }
    let features: Vec<String> = report["features"].as_array().into_iter().flatten().map(text).collect();
    println!("features: {}", if features.is_empty() { "none of interest".to_string() } else { features.join(", ") });
    Ok(Outcome::Ok)
}
