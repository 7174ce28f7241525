//! convt inside an application that owns its wgpu device: the application opens the device, fills an input with
//! a compute pass of its own, convt upsamples it (a ConvTranspose2d, stride 2) straight from and into the
//! application's buffers, and the application's next pass (a ReLU) reads convt's output where convt wrote it.
//! Nothing passes through the host but the final read-back, which the example checks against the CPU reference.
//!
//! `cargo run --release --example own_device`

use convt::gpu::list_adapters;
use convt::{ConvTranspose2d, ConvTranspose2dOptions, DType, GpuContext, GpuOptions, GpuTensor, Tensor};

/// The application's own compute pass over f32 arrays: `dst[i] = <body>` for i < count.
fn run_pass(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    body: &str,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    count: u32,
) {
    let source = format!(
        "@group(0) @binding(0) var<storage, read> src: array<f32>;\n\
         @group(0) @binding(1) var<storage, read_write> dst: array<f32>;\n\
         @compute @workgroup_size(64)\n\
         fn main(@builtin(global_invocation_id) id: vec3<u32>) {{ let i = id.x; if (i < {count}u) {{ dst[i] = {body}; }} }}"
    );
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("application pass"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("application pass"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: dst.as_entire_binding() },
        ],
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(count.div_ceil(64), 1, 1);
    }
    queue.submit([encoder.finish()]);
}

fn storage(device: &wgpu::Device, floats: usize) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("application buffer"),
        size: floats as u64 * 4,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The application's device: any adapter, wgpu's default limits (what convt needs), no optional features.
    let adapter = list_adapters(&GpuOptions::from_env()?).into_iter().next().ok_or("no GPU adapter")?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default()))?;
    println!("application device on {}", adapter.get_info().name);
    // convt on that device; the context is a reference count, cheap to clone into other parts of the application.
    let ctx = GpuContext::from_wgpu(adapter, device.clone(), queue.clone(), GpuOptions::default())?;

    let (in_dims, out_dims) = ([1usize, 8, 16, 16], [1usize, 4, 32, 32]);
    let (n_in, n_out) = (in_dims.iter().product::<usize>(), out_dims.iter().product::<usize>());
    let (seed, input, output, relu) =
        (storage(&device, 1), storage(&device, n_in), storage(&device, n_out), storage(&device, n_out));
    run_pass(&device, &queue, "sin(f32(i) * 0.1) + 0.0 * src[0]", &seed, &input, n_in as u32);

    // convt reads the application's input and writes into the application's output buffer, in place.
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1);
    let layer = ConvTranspose2d::new(8, 4, 3, options, 7)?;
    let gpu_layer = layer.to_gpu(&ctx)?;
    let x = GpuTensor::from_buffer(&ctx, &input, 0, &in_dims, DType::F32)?; // the application's buffers
    let y = GpuTensor::from_buffer(&ctx, &output, 0, &out_dims, DType::F32)?;
    let kernel = gpu_layer.forward_into(&x, &y, None)?; // written into `output`; no host copy
    println!("convt ran {} into the application's buffer", kernel.name());
    run_pass(&device, &queue, "max(src[i], 0.0)", &output, &relu, n_out as u32);

    // The only read-back: the application's final result.
    let result = GpuTensor::from_buffer(&ctx, &relu, 0, &out_dims, DType::F32)?.download(&ctx)?;
    let host_input = Tensor::new(in_dims.to_vec(), (0..n_in).map(|i| (i as f32 * 0.1).sin()).collect())?;
    let reference = layer.forward_cpu(&host_input)?;
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (&got, &want) in result.data().iter().zip(reference.data()) {
        let want = f64::from(want.max(0.0));
        err += (f64::from(got) - want).powi(2);
        norm += want * want;
    }
    let rel = (err / norm).sqrt();
    println!("relative L2 error against the CPU reference: {rel:.1e}");
    if rel.is_nan() || rel > 1e-5 {
        return Err(format!("the result differs from the reference (relative L2 error {rel:.1e})").into());
    }
    Ok(())
}
