//! What the Vulkan driver compiled convt's kernels into (the tensor-core ones too where the device has cooperative
//! matrices): registers, spills, workgroup memory and whatever
//! else it reports through `VK_KHR_pipeline_executable_properties`, per kernel and suite case.
//!
//! A diagnostic for kernel work (docs/PERFORMANCE.md): a register tile that spills, or one whose register count
//! leaves room for a single workgroup per multiprocessor, explains timings that the WGSL alone does not. It
//! compiles each kernel as wgpu does on Vulkan with runtime checks off (naga's SPIR-V writer, the case's override
//! constants, no bounds checks, no loop bounding), but through its own Vulkan device, since wgpu neither enables
//! the extension nor asks for the statistics.
//!
//! ```sh
//! cargo run --release --manifest-path tools/kernel-stats/Cargo.toml -- [--case kb57 kb69 ...] \
//!     [--strategy gemm_64x64x16_4x4 ...] [--fast] [--ir DIR]
//! ```
//! Without `--strategy`, every exact candidate, or with `--fast` every candidate of precision `fast`.
//! `--ir DIR` also writes every internal representation the driver offers (one file per kernel and case; NVIDIA's
//! driver offered none where tried, Mesa's hardware drivers do). The statistics need a driver with the extension
//! (NVIDIA's has it; Mesa's software driver does not, and there the kernels are only built). Seen on NVIDIA's
//! driver: register count, binary size, stack size and shared memory per kernel.

use std::ffi::CStr;

use anyhow::{anyhow, bail, Context, Result};
use ash::vk;
use convt::gpu::Strategy;

fn text(chars: &[std::ffi::c_char]) -> String {
    // SAFETY: Vulkan fills these fixed arrays with NUL-terminated strings.
    unsafe { CStr::from_ptr(chars.as_ptr()) }.to_string_lossy().into_owned()
}

/// SPIR-V for `source` specialised by `constants`, written as wgpu writes a trusted module on Vulkan 1.3.
fn spirv(source: &str, constants: &[(&str, f64)]) -> Result<Vec<u32>> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| anyhow!("{}", e.emit_to_string(source)))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)?;
    let constants: naga::back::PipelineConstants = constants.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, "main")),
        &constants,
    )?;
    let options = naga::back::spv::Options {
        lang_version: (1, 6),
        bounds_check_policies: naga::proc::BoundsCheckPolicies::default(), // Unchecked
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        ..Default::default()
    };
    let pipeline =
        naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    Ok(naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))?)
}

/// The descriptor bindings of set 0 as the shader declares them (binding, uniform or storage).
fn bindings(source: &str) -> Result<Vec<vk::DescriptorSetLayoutBinding<'static>>> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| anyhow!("{}", e.emit_to_string(source)))?;
    let mut out = Vec::new();
    for (_, var) in module.global_variables.iter() {
        let Some(rb) = &var.binding else { continue };
        let ty = match var.space {
            naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
            naga::AddressSpace::Storage { .. } => vk::DescriptorType::STORAGE_BUFFER,
            other => bail!("binding {} in address space {other:?}", rb.binding),
        };
        out.push(
            vk::DescriptorSetLayoutBinding::default()
                .binding(rb.binding)
                .descriptor_type(ty)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE),
        );
    }
    Ok(out)
}

fn main() -> Result<()> {
    let mut cases = vec!["kb57".to_string(), "kb69".into(), "kb81".into()];
    let mut names: Vec<String> = Vec::new();
    let mut ir_dir: Option<std::path::PathBuf> = None;
    let mut fast = false;
    let mut args = std::env::args().skip(1).peekable();
    while let Some(a) = args.next() {
        let mut values = Vec::new();
        while let Some(v) = args.next_if(|v| !v.starts_with("--")) {
            values.push(v);
        }
        match a.as_str() {
            "--case" => cases = values,
            "--strategy" => names = values,
            "--fast" => fast = true,
            "--ir" => ir_dir = values.into_iter().next().map(Into::into),
            _ => bail!("unknown argument {a} (expected --case, --strategy, --fast, --ir)"),
        }
    }
    let strategies: Vec<Strategy> = if names.is_empty() && fast {
        Strategy::fast_candidates()
    } else if names.is_empty() {
        Strategy::candidates()
    } else {
        names
            .iter()
            .map(|n| Strategy::all().into_iter().find(|s| &s.name() == n).ok_or_else(|| anyhow!("no strategy {n}")))
            .collect::<Result<_>>()?
    };

    // SAFETY: plain Vulkan calls on objects this function creates and destroys in order.
    unsafe {
        let entry = ash::Entry::load().context("no Vulkan loader")?;
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
        let instance = entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)?;
        let physical = instance.enumerate_physical_devices()?;
        let pd = *physical
            .iter()
            .find(|&&p| instance.get_physical_device_properties(p).device_type == vk::PhysicalDeviceType::DISCRETE_GPU)
            .or(physical.first())
            .ok_or_else(|| anyhow!("no Vulkan device"))?;
        let props = instance.get_physical_device_properties(pd);
        println!("device: {}  driver version {:#x}", text(&props.device_name), props.driver_version);
        let ext = ash::khr::pipeline_executable_properties::NAME;
        let has = instance
            .enumerate_device_extension_properties(pd)?
            .iter()
            .any(|e| e.extension_name_as_c_str().ok() == Some(ext));
        if !has {
            // The kernels are still compiled (which checks them on this driver), but nothing can be reported.
            println!("this driver does not offer {}: pipelines are built, no statistics", ext.to_string_lossy());
        }
        let family = instance
            .get_physical_device_queue_family_properties(pd)
            .iter()
            .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or_else(|| anyhow!("no compute queue"))? as u32;
        let priorities = [1.0];
        let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
        let mut exec =
            vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default().pipeline_executable_info(true);
        // The tensor-core kernels need what wgpu enables for them: cooperative matrices, f16 in shaders and in
        // storage buffers, and the Vulkan memory model (wgpu-hal's vulkan/adapter.rs).
        let coop_ext = ash::khr::cooperative_matrix::NAME;
        let has_coop = instance
            .enumerate_device_extension_properties(pd)?
            .iter()
            .any(|e| e.extension_name_as_c_str().ok() == Some(coop_ext))
            && {
                let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
                let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
                let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
                let mut all =
                    vk::PhysicalDeviceFeatures2::default().push_next(&mut coop).push_next(&mut v11).push_next(&mut v12);
                instance.get_physical_device_features2(pd, &mut all);
                [
                    coop.cooperative_matrix,
                    v11.storage_buffer16_bit_access,
                    v11.uniform_and_storage_buffer16_bit_access,
                    v12.shader_float16,
                    v12.vulkan_memory_model,
                    v12.vulkan_memory_model_device_scope,
                ]
                .iter()
                .all(|&f| f == vk::TRUE)
            };
        let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut v11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(true)
            .uniform_and_storage_buffer16_bit_access(true);
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default()
            .shader_float16(true)
            .vulkan_memory_model(true)
            .vulkan_memory_model_device_scope(true);
        let mut extensions = Vec::new();
        let mut create = vk::DeviceCreateInfo::default().queue_create_infos(&queues);
        if has {
            extensions.push(ext.as_ptr());
            create = create.push_next(&mut exec);
        }
        if has_coop {
            extensions.push(coop_ext.as_ptr());
            create = create.push_next(&mut coop).push_next(&mut v11).push_next(&mut v12);
        }
        create = create.enabled_extension_names(&extensions);
        let device = instance.create_device(pd, &create, None)?;
        let exec_props = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);

        for case_name in &cases {
            let case = convt::suite::find(case_name).ok_or_else(|| anyhow!("no case {case_name}"))?;
            let shape = case.params.resolve(&case.input_dims(), &case.weight_dims(), None)?;
            for s in &strategies {
                if matches!(s, Strategy::Coop(_) | Strategy::CoopNhwc(_)) && !has_coop {
                    println!("{:<6} {:<24} skipped: this device has no cooperative matrices", case.name, s.name());
                    continue;
                }
                // The Winograd tiles take stride-1 shapes with small enough kernels only.
                let (source, constants) = match s.shader(&shape, case.bias) {
                    Ok(shader) => shader,
                    Err(e) => {
                        println!("{:<6} {:<24} skipped: {e}", case.name, s.name());
                        continue;
                    }
                };
                let code = spirv(&source, &constants).with_context(|| s.name())?;
                let module = device.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)?;
                let layout_bindings = bindings(&source)?;
                let set_layout = device.create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&layout_bindings),
                    None,
                )?;
                let set_layouts = [set_layout];
                let layout = device
                    .create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts), None)?;
                let stage = vk::PipelineShaderStageCreateInfo::default()
                    .stage(vk::ShaderStageFlags::COMPUTE)
                    .module(module)
                    .name(c"main");
                let flags = if !has {
                    vk::PipelineCreateFlags::empty()
                } else if ir_dir.is_some() {
                    vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                        | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR
                } else {
                    vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                };
                let info = vk::ComputePipelineCreateInfo::default().flags(flags).stage(stage).layout(layout);
                let pipeline = device
                    .create_compute_pipelines(vk::PipelineCache::null(), &[info], None)
                    .map_err(|(_, e)| anyhow!("{}: pipeline creation failed: {e}", s.name()))?[0];
                let pinfo = vk::PipelineInfoKHR::default().pipeline(pipeline);
                if !has {
                    println!("{case_name:<6} {:<24} built", s.name());
                }
                let executables = if has { exec_props.get_pipeline_executable_properties(&pinfo)? } else { Vec::new() };
                for (i, p) in executables.iter().enumerate() {
                    let einfo = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(i as u32);
                    let mut line = format!("{case_name:<6} {:<24} {}:", s.name(), text(&p.name));
                    for st in exec_props.get_pipeline_executable_statistics(&einfo)? {
                        let v = match st.format {
                            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => (st.value.b32 != 0).to_string(),
                            vk::PipelineExecutableStatisticFormatKHR::INT64 => st.value.i64.to_string(),
                            vk::PipelineExecutableStatisticFormatKHR::UINT64 => st.value.u64.to_string(),
                            _ => format!("{:.3}", st.value.f64),
                        };
                        line += &format!("  {}={v}", text(&st.name).replace(' ', "_"));
                    }
                    println!("{line}");
                    if let Some(dir) = &ir_dir {
                        write_representations(&exec_props, &einfo, dir, &format!("{case_name}-{}", s.name()))?;
                    }
                }
                device.destroy_pipeline(pipeline, None);
                device.destroy_pipeline_layout(layout, None);
                device.destroy_descriptor_set_layout(set_layout, None);
                device.destroy_shader_module(module, None);
            }
        }
        device.destroy_device(None);
        instance.destroy_instance(None);
    }
    Ok(())
}

/// Writes each internal representation of one executable to `dir/<stem>-<n>.txt` (text ones as they are).
unsafe fn write_representations(
    exec_props: &ash::khr::pipeline_executable_properties::Device,
    einfo: &vk::PipelineExecutableInfoKHR<'_>,
    dir: &std::path::Path,
    stem: &str,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    // Two calls: the sizes first, then the data into buffers of those sizes.
    let reps = exec_props.get_pipeline_executable_internal_representations(einfo)?;
    let mut buffers: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
    let mut filled: Vec<vk::PipelineExecutableInternalRepresentationKHR<'_>> = reps
        .iter()
        .zip(buffers.iter_mut())
        .map(|(r, b)| vk::PipelineExecutableInternalRepresentationKHR {
            data_size: r.data_size,
            p_data: b.as_mut_ptr().cast(),
            ..Default::default()
        })
        .collect();
    let mut count = filled.len() as u32;
    let fp = exec_props.fp();
    (fp.get_pipeline_executable_internal_representations_khr)(
        exec_props.device(),
        einfo,
        &mut count,
        filled.as_mut_ptr(),
    )
    .result()?;
    for (n, (r, b)) in filled.iter().zip(&buffers).enumerate() {
        let data = if r.is_text != 0 {
            String::from_utf8_lossy(b).trim_end_matches('\0').to_string()
        } else {
            format!("<{} bytes of binary>", b.len())
        };
        std::fs::write(
            dir.join(format!("{stem}-{n}.txt")),
            format!("{}\n{}\n\n{data}", text(&r.name), text(&r.description)),
        )?;
    }
    Ok(())
}
