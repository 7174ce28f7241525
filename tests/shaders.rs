//! Every WGSL shader parses and validates with naga, with no GPU needed.

#[test]
fn every_shader_validates_with_naga() {
    let sources = convt::gpu::shader_sources();
    assert!(!sources.is_empty());
    for (_, name, source) in &sources {
        let module =
            naga::front::wgsl::parse_str(source).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
}

#[test]
fn every_shader_file_is_registered() {
    // A shader added under shaders/ must be in gpu::shader_sources() (named by its path below shaders/), so the
    // test above sees it.
    fn wgsl_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                wgsl_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "wgsl") {
                out.push(path);
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut files = Vec::new();
    wgsl_files(&root, &mut files);
    assert!(files.len() > 20, "{files:?}");
    let sources = convt::gpu::shader_sources();
    for path in files {
        let name = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        assert!(sources.iter().any(|(file, _, _)| *file == name), "{name} is not in gpu::shader_sources()");
    }
}

#[test]
fn every_shader_translates_to_spirv() {
    // What wgpu does with a shader on Vulkan: resolve the override constants, then write SPIR-V. naga's writer
    // can panic on code that validates (it did on cooperative-matrix stores), so this runs on every variant.
    for (_, name, source) in &convt::gpu::shader_sources() {
        let module = naga::front::wgsl::parse_str(source).unwrap();
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .unwrap();
        // Every override without a default gets a small valid value (3 for sizes, true for flags).
        let constants: naga::back::PipelineConstants = module
            .overrides
            .iter()
            .filter(|(_, o)| o.init.is_none())
            .filter_map(|(_, o)| o.name.clone())
            .map(|n| (n, 3.0))
            .collect();
        let (module, info) = naga::back::pipeline_constants::process_overrides(&module, &info, None, &constants)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let options = naga::back::spv::Options::default();
        let pipeline =
            naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
        naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
}
