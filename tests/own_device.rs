//! convt on an application's own wgpu device (`GpuContext::from_wgpu`): a device opened with wgpu's default limits
//! runs every option forward and backward against the float64 reference; tensors that are views of the
//! application's buffers (`GpuTensor::from_buffer`) are read and written in place, so an application's pass feeds
//! convt and convt's output feeds the application's next pass without a copy through the host; a device without
//! what convt needs is refused naming each missing limit; a context is cheap to clone and used from several
//! threads at once.

mod common;

use convt::gpu::{list_adapters, REQUIRED_LIMITS};
use convt::{
    conv_transpose2d, conv_transpose2d_backward, conv_transpose2d_into, ConvTranspose2d, ConvTranspose2dOptions,
    ConvtError, DType, ErrorStats, GpuContext, GpuOptions, GpuTensor, Run, Tensor,
};
use proptest::prelude::*;

/// The adapter convt would choose, and a device opened on it the way an application might: wgpu's default limits,
/// no optional features.
fn app_device(limits: wgpu::Limits) -> (wgpu::Adapter, wgpu::Device, wgpu::Queue) {
    let adapter = list_adapters(&GpuOptions::from_env().unwrap()).into_iter().next().expect("an adapter");
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("application"),
        required_limits: limits,
        ..Default::default()
    }))
    .expect("the adapter opens a device with these limits");
    (adapter, device, queue)
}

/// One context on an application's device with default limits, shared by the tests (outputs poisoned).
fn app_ctx() -> &'static (GpuContext, wgpu::Device, wgpu::Queue) {
    static CTX: std::sync::OnceLock<(GpuContext, wgpu::Device, wgpu::Queue)> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        let (adapter, device, queue) = app_device(wgpu::Limits::default());
        let options = GpuOptions { poison_outputs: true, ..GpuOptions::from_env().unwrap() };
        let ctx = GpuContext::from_wgpu(adapter, device.clone(), queue.clone(), options).unwrap();
        (ctx, device, queue)
    })
}

fn rel_l2(got: &Tensor, want: &Tensor) -> ErrorStats {
    assert_eq!(got.shape(), want.shape());
    ErrorStats::compare(got.data(), &want.data().iter().map(|&v| f64::from(v)).collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(12), ..ProptestConfig::default() })]

    /// Whatever kernel the selector picks on a device of wgpu's default limits computes the forward and the
    /// backward of random problems, every option, within the exact-f32 tolerance.
    #[test]
    fn a_device_with_default_limits_runs_every_option(
        stride in (1i64..4, 1i64..4),
        padding in (0i64..3, 0i64..3),
        dilation in (1i64..3, 1i64..3),
        kernel in (1usize..5, 1usize..5),
        groups in 1usize..3,
        channels in (1usize..20, 1usize..20),
        hw in (1usize..12, 1usize..12),
        batch in 1usize..3,
        bias in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let (ctx, _, _) = app_ctx();
        let (cin, cout) = (channels.0 * groups, channels.1 * groups);
        let options = ConvTranspose2dOptions::default()
            .stride([stride.0, stride.1])
            .padding([padding.0, padding.1])
            .dilation([dilation.0, dilation.1])
            .groups(groups as i64);
        let x = Tensor::uniform(vec![batch, cin, hw.0, hw.1], -1.0, 1.0, seed).unwrap();
        let w = Tensor::uniform(vec![cin, cout / groups, kernel.0, kernel.1], -1.0, 1.0, seed ^ 1).unwrap();
        let b = bias.then(|| Tensor::uniform(vec![cout], -1.0, 1.0, seed ^ 2).unwrap());
        let Ok(shape) = options.resolve(x.shape(), w.shape(), b.as_ref().map(|b| b.shape())) else {
            return Ok(()); // an empty output: refused as in PyTorch, not this test's subject
        };
        let (xg, wg) = (GpuTensor::upload(ctx, &x).unwrap(), GpuTensor::upload(ctx, &w).unwrap());
        let bg = b.as_ref().map(|b| GpuTensor::upload(ctx, b).unwrap());
        let y = conv_transpose2d(ctx, &xg, &wg, bg.as_ref(), &options).unwrap().download(ctx).unwrap();
        let want = convt::cpu::conv_transpose2d(&x, &w, b.as_ref(), &options).unwrap();
        let s = rel_l2(&y, &want);
        prop_assert!(s.non_finite == 0 && s.rel_l2 <= common::F32_TOLERANCE, "forward {shape:?}: {s:?}");

        let go = Tensor::uniform(shape.output_dims_as_given(), -1.0, 1.0, seed ^ 3).unwrap();
        let gog = GpuTensor::upload(ctx, &go).unwrap();
        let got = conv_transpose2d_backward(ctx, &xg, &wg, bg.as_ref(), &gog, &options).unwrap().download(ctx).unwrap();
        let want = convt::cpu::conv_transpose2d_backward(&x, &w, b.as_ref(), &go, &options).unwrap();
        for (what, g, r) in [
            ("grad_input", &got.grad_input, &want.grad_input),
            ("grad_weight", &got.grad_weight, &want.grad_weight),
        ] {
            let s = rel_l2(g, r);
            prop_assert!(s.non_finite == 0 && s.rel_l2 <= common::F32_TOLERANCE, "{what} {shape:?}: {s:?}");
        }
    }
}

/// A WGSL pass of the application's own over one f32 array: `dst[i] = f(src[i], i)`, bound at byte offsets.
fn app_pass(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    body: &str,
    src: (&wgpu::Buffer, u64),
    dst: (&wgpu::Buffer, u64),
    count: u32,
) {
    let source = format!(
        "@group(0) @binding(0) var<storage, read> src: array<f32>;\n\
         @group(0) @binding(1) var<storage, read_write> dst: array<f32>;\n\
         @compute @workgroup_size(64)\n\
         fn main(@builtin(global_invocation_id) id: vec3<u32>) {{\n\
             let i = id.x;\n\
             if (i < {count}u) {{ {body} }}\n\
         }}"
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
    let bytes = std::num::NonZeroU64::new(u64::from(count) * 4);
    fn bind<'a>(
        binding: u32,
        (buffer, offset): (&'a wgpu::Buffer, u64),
        size: Option<std::num::NonZeroU64>,
    ) -> wgpu::BindGroupEntry<'a> {
        wgpu::BindGroupEntry {
            binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset, size }),
        }
    }
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[bind(0, src, bytes), bind(1, dst, bytes)],
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

/// Reads `count` f32 from byte `offset` of `buffer` (a COPY_SRC buffer), as the application would at the end.
fn read_f32(device: &wgpu::Device, queue: &wgpu::Queue, buffer: &wgpu::Buffer, offset: u64, count: usize) -> Vec<f32> {
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: count as u64 * 4,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, count as u64 * 4);
    queue.submit([encoder.finish()]);
    staging.map_async(wgpu::MapMode::Read, .., |r| r.expect("mapped"));
    device.poll(wgpu::PollType::Wait { submission_index: None, timeout: None }).unwrap();
    let view = staging.get_mapped_range(..).unwrap();
    bytemuck::cast_slice(&view).to_vec()
}

fn app_buffer(device: &wgpu::Device, size: u64) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("application buffer"),
        size,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

/// The application computes the input with its own pass, convt reads it and writes its output into the
/// application's buffer, and the application's next pass reads that output: the host sees only the final result.
#[test]
fn an_application_pass_feeds_convt_and_reads_its_output_in_place() {
    let (ctx, device, queue) = app_ctx();
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1);
    let layer = ConvTranspose2d::new(4, 3, 3, options, common::fresh_seed()).unwrap().to_gpu(ctx).unwrap();
    let in_dims = [2usize, 4, 5, 6];
    let numel: usize = in_dims.iter().product();
    let out_dims = [2usize, 3, 10, 12];
    let out_numel: usize = out_dims.iter().product();
    // The application's buffers: the input at offset 256 of one, the output at offset 1024 of another (views at
    // offsets; wgpu lets no dispatch read and write one buffer, so a call's output shares no buffer with its
    // inputs), the input's source and the final result in a third.
    let input_buffer = app_buffer(device, 256 + numel as u64 * 4);
    let shared = app_buffer(device, 1024 + out_numel as u64 * 4);
    let result_at = (numel as u64 * 4).next_multiple_of(256);
    let other = app_buffer(device, result_at + out_numel as u64 * 4);
    let phase = (common::fresh_seed() % 1000) as f32 / 100.0;
    app_pass(
        device,
        queue,
        &format!("dst[i] = sin(f32(i) * 0.37 + {phase:?}) + 0.0 * src[i];"),
        (&other, 0),
        (&input_buffer, 256),
        numel as u32,
    );
    // The output's bytes poisoned first, so that an element convt does not write shows.
    queue.write_buffer(&shared, 1024, bytemuck::cast_slice(&vec![f32::NAN; out_numel]));

    let x = GpuTensor::from_buffer(ctx, &input_buffer, 256, &in_dims, DType::F32).unwrap();
    let y = GpuTensor::from_buffer(ctx, &shared, 1024, &out_dims, DType::F32).unwrap();
    layer.forward_into(&x, &y, None).unwrap();
    assert_eq!(y.buffer().map(|(_, offset)| offset), Some(1024));
    // The application's next pass reads convt's output where it wrote it.
    app_pass(device, queue, "dst[i] = 2.0 * src[i] + 1.0;", (&shared, 1024), (&other, result_at), out_numel as u32);
    let got = read_f32(device, queue, &other, result_at, out_numel);

    let input: Vec<f32> = (0..numel).map(|i| (i as f32 * 0.37 + phase).sin()).collect();
    let host = layer.to_host().unwrap();
    let want = host.forward_cpu(&Tensor::new(in_dims.to_vec(), input).unwrap()).unwrap();
    let want: Vec<f64> = want.data().iter().map(|&v| 2.0 * f64::from(v) + 1.0).collect();
    let s = ErrorStats::compare(&got, &want);
    // sin on the GPU and on the host may differ in the last bits: the bound is the exact kernels' all the same.
    assert!(s.non_finite == 0 && s.rel_l2 <= common::F32_TOLERANCE, "{s:?}");

    // The functional call into a view, and a result's own buffer read by the application.
    let w = layer.weight();
    let y2 = GpuTensor::from_buffer(ctx, &shared, 1024, &out_dims, DType::F32).unwrap();
    queue.write_buffer(&shared, 1024, bytemuck::cast_slice(&vec![f32::NAN; out_numel]));
    conv_transpose2d_into(ctx, &x, w, layer.bias(), &options, &y2, Run::default()).unwrap();
    let z = layer.forward(&x).unwrap();
    let (buffer, offset) = z.buffer().expect("a small result sits in one buffer");
    let from_convt = read_f32(device, queue, buffer, offset, out_numel);
    let in_place = read_f32(device, queue, &shared, 1024, out_numel);
    assert_eq!(from_convt, in_place);
}

#[test]
fn views_are_checked() {
    let (ctx, device, _) = app_ctx();
    let buffer = app_buffer(device, 4096);
    let e = GpuTensor::from_buffer(ctx, &buffer, 100, &[2, 3], DType::F32).unwrap_err();
    assert_eq!(e.to_string(), "a tensor view's offset must be a multiple of 256 bytes, got 100");
    let e = GpuTensor::from_buffer(ctx, &buffer, 3840, &[1, 1, 10, 10], DType::F32).unwrap_err();
    assert!(e.to_string().contains("needs 400 bytes from offset 3840, but the buffer holds 4096"), "{e}");
    // f16 values take 2 bytes, rounded up to whole words: 128 fit the last 256 bytes, 129 do not.
    assert!(GpuTensor::from_buffer(ctx, &buffer, 3840, &[128], DType::F16).is_ok());
    let e = GpuTensor::from_buffer(ctx, &buffer, 3840, &[129], DType::F16).unwrap_err();
    assert!(e.to_string().contains("needs 260 bytes from offset 3840"), "{e}");
    let uniform = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 256,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: false,
    });
    let e = GpuTensor::from_buffer(ctx, &uniform, 0, &[4], DType::F32).unwrap_err();
    assert!(e.to_string().contains("needs a buffer with the usages"), "{e}");
    // A view reads and writes through convt's own calls too.
    let view = GpuTensor::from_buffer(ctx, &buffer, 512, &[2, 2, 3], DType::F32).unwrap();
    let t = Tensor::uniform(vec![2, 2, 3], -1.0, 1.0, common::fresh_seed()).unwrap();
    let src = GpuTensor::upload(ctx, &t).unwrap();
    src.copy_to(ctx, &view).unwrap();
    assert_eq!(view.download(ctx).unwrap().data(), t.data());
    view.fill(ctx, 0.5).unwrap();
    assert!(view.download(ctx).unwrap().data().iter().all(|&v| v == 0.5));
}

#[test]
fn a_device_without_the_limits_convt_needs_is_refused_naming_them() {
    let low = wgpu::Limits {
        max_compute_workgroup_storage_size: 8192,
        max_compute_invocations_per_workgroup: 128,
        max_compute_workgroup_size_x: 128,
        ..wgpu::Limits::default()
    };
    let (adapter, device, queue) = app_device(low);
    let e = GpuContext::from_wgpu(adapter, device, queue, GpuOptions::default()).expect_err("refused");
    assert!(matches!(e, ConvtError::DeviceLacks { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "the device lacks limits convt needs: max_compute_invocations_per_workgroup 256 (it has 128), \
         max_compute_workgroup_size_x 256 (it has 128), max_compute_workgroup_storage_size 16384 (it has 8192); \
         request at least wgpu::Limits::default() for these"
    );
    assert!(REQUIRED_LIMITS.check_limits(&wgpu::Limits::default()));
}

/// Clones share one device and its caches; calls from several threads at once (each with its own clone, and a
/// layer moved to a thread) all match the reference.
#[test]
fn a_context_is_shared_by_clones_across_threads() {
    let (ctx, _, _) = app_ctx();
    let options = ConvTranspose2dOptions::default().stride(2).padding(1);
    let layer = ConvTranspose2d::new(5, 4, 3, options, common::fresh_seed()).unwrap();
    let handles: Vec<_> = (0..4u64)
        .map(|i| {
            let ctx = ctx.clone();
            let gpu_layer = layer.to_gpu(&ctx).unwrap();
            let host = layer.clone();
            std::thread::spawn(move || {
                let x = Tensor::uniform(vec![2, 5, 6, 7], -1.0, 1.0, common::fresh_seed() ^ i).unwrap();
                let y = gpu_layer.forward(&GpuTensor::upload(&ctx, &x).unwrap()).unwrap().download(&ctx).unwrap();
                rel_l2(&y, &host.forward_cpu(&x).unwrap())
            })
        })
        .collect();
    for h in handles {
        let s = h.join().expect("no panic");
        assert!(s.non_finite == 0 && s.rel_l2 <= common::F32_TOLERANCE, "{s:?}");
    }
    let clone = ctx.clone();
    assert!(std::ptr::eq(clone.device(), ctx.device()), "clones share the device");
}

/// A view is one chunk laid out as convt lays out every tensor of its shape (the planes an f32 tensor's binding
/// holds, whatever the dtype), so views and convt's own tensors of one shape copy chunk for chunk; a view that
/// would need several bindings is refused.
#[test]
fn views_keep_convts_layout_under_a_small_binding_limit() {
    let ctx = common::ctx_with_binding_limit(1024, None);
    let buffer = app_buffer(ctx.device(), 4096);
    // Two 16 x 16 f16 planes take 1024 bytes, but 2048 at 4 bytes per value: more than one binding.
    let e = GpuTensor::from_buffer(&ctx, &buffer, 0, &[1, 2, 16, 16], DType::F16).unwrap_err();
    assert!(matches!(e, ConvtError::TooLargeForBinding { .. }), "{e:?}");
    let view = GpuTensor::from_buffer(&ctx, &buffer, 256, &[1, 1, 16, 16], DType::F16).unwrap();
    let t = Tensor::uniform(vec![1, 1, 16, 16], -1.0, 1.0, common::fresh_seed()).unwrap().to_dtype(DType::F16);
    GpuTensor::upload(&ctx, &t).unwrap().copy_to(&ctx, &view).unwrap();
    let back = GpuTensor::empty_with(&ctx, &[1, 1, 16, 16], DType::F16).unwrap();
    view.copy_to(&ctx, &back).unwrap();
    assert_eq!(back.download(&ctx).unwrap().data(), t.data());
}
