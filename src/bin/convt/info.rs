//! `convt info`: which adapters wgpu finds, which one convt chooses, and what that one offers.

use anyhow::Result;
use clap::Args;
use convt::gpu::{list_adapters, AdapterSummary};
use convt::GpuContext;
use serde_json::json;

use crate::Outcome;

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: InfoArgs) -> Result<Outcome> {
    let opts = crate::args::gpu_options()?;
    let found: Vec<AdapterSummary> = list_adapters(&opts).iter().map(|a| AdapterSummary::from(&a.get_info())).collect();
    let ctx = GpuContext::with_options(opts)?;
    let chosen = AdapterSummary::from(ctx.adapter_info());
    let l = ctx.device().limits();
    let limits = json!({
        "max_storage_buffer_binding_size": l.max_storage_buffer_binding_size,
        "max_buffer_size": l.max_buffer_size,
        "max_compute_workgroup_storage_size": l.max_compute_workgroup_storage_size,
        "max_compute_invocations_per_workgroup": l.max_compute_invocations_per_workgroup,
        "max_compute_workgroups_per_dimension": l.max_compute_workgroups_per_dimension,
        "subgroup_min_size": ctx.adapter_info().subgroup_min_size,
        "subgroup_max_size": ctx.adapter_info().subgroup_max_size,
        "binding_limit_used": ctx.binding_limit(),
    });
    let f = ctx.adapter().features();
    let features: Vec<&str> = [
        ("TIMESTAMP_QUERY", wgpu::Features::TIMESTAMP_QUERY),
        ("TIMESTAMP_QUERY_INSIDE_PASSES", wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
        ("SUBGROUP", wgpu::Features::SUBGROUP),
        ("SHADER_F16", wgpu::Features::SHADER_F16),
        ("EXPERIMENTAL_COOPERATIVE_MATRIX", wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
    ]
    .into_iter()
    .filter(|(_, flag)| f.contains(*flag))
    .map(|(name, _)| name)
    .collect();
    if a.json {
        println!("{}", json!({ "adapters": found, "chosen": chosen, "limits": limits, "features": features }));
        return Ok(Outcome::Ok);
    }
    println!("adapters found (--adapter takes the number or part of the name):");
    for (i, s) in found.iter().enumerate() {
        println!("  {i}: {} ({}, {}, driver {} {})", s.name, s.backend, s.device_type, s.driver, s.driver_info);
    }
    println!("chosen: {} ({}, {})", chosen.name, chosen.backend, chosen.device_type);
    println!("driver: {} {}", chosen.driver, chosen.driver_info);
    println!("limits:");
    for (k, v) in limits.as_object().into_iter().flatten() {
        println!("  {k}: {v}");
    }
    println!("features: {}", if features.is_empty() { "none of interest".to_string() } else { features.join(", ") });
    Ok(Outcome::Ok)
}
