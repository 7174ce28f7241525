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
    // A shader added to shaders/ must be in gpu::shader_sources(), so the test above sees it.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".wgsl") {
            assert!(
                convt::gpu::shader_sources().iter().any(|(file, _, _)| *file == name),
                "{name} is not in gpu::shader_sources()"
            );
        }
    }
}
