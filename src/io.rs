//! Reading and writing named f32 tensors in safetensors files (the format PyTorch users exchange weights in).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::error::{ConvtError, Result};
use crate::tensor::Tensor;

/// The tensors of one file, by name, and the file's string metadata.
#[derive(Debug, Clone, Default)]
pub struct TensorFile {
    pub tensors: BTreeMap<String, Tensor>,
    pub metadata: HashMap<String, String>,
}

impl TensorFile {
    /// Reads every tensor of a safetensors file; all of them must be f32.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| ConvtError::Io { path: path.into(), source })?;
        Self::from_bytes(&bytes, path)
    }

    /// Parses safetensors bytes; `path` only names the source in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self> {
        let bad = |message: String| ConvtError::TensorFile { path: path.into(), message };
        let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| bad(e.to_string()))?;
        let file = SafeTensors::deserialize(bytes).map_err(|e| bad(e.to_string()))?;
        let mut tensors = BTreeMap::new();
        for (name, view) in file.tensors() {
            if view.dtype() != Dtype::F32 {
                return Err(ConvtError::DType { path: path.into(), name, dtype: format!("{:?}", view.dtype()) });
            }
            let data: Vec<f32> =
                view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            tensors.insert(name, Tensor::new(view.shape().to_vec(), data)?);
        }
        let metadata = header.metadata().clone().unwrap_or_default();
        Ok(Self { tensors, metadata })
    }

    /// The tensor called `name`, or an error listing what the file holds.
    pub fn get(&self, name: &str, path: &Path) -> Result<&Tensor> {
        self.tensors.get(name).ok_or_else(|| ConvtError::MissingTensor {
            path: path.into(),
            name: name.into(),
            found: self.tensors.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    /// Removes and returns the tensor called `name`, if present.
    pub fn take(&mut self, name: &str) -> Option<Tensor> {
        self.tensors.remove(name)
    }
}

/// Writes named f32 tensors (and optional metadata) to a safetensors file.
pub fn save_tensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, &Tensor)],
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    let path = path.as_ref();
    let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = tensors
        .iter()
        .map(|(name, t)| (name.to_string(), bytemuck::cast_slice(t.data()).to_vec(), t.shape().to_vec()))
        .collect();
    let views = bytes
        .iter()
        .map(|(name, data, shape)| {
            TensorView::new(Dtype::F32, shape.clone(), data)
                .map(|v| (name.clone(), v))
                .map_err(|e| ConvtError::TensorFile { path: path.into(), message: e.to_string() })
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize_to_file(views, metadata, path)
        .map_err(|e| ConvtError::TensorFile { path: path.into(), message: e.to_string() })
}
