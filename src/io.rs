//! Reading and writing named f32 tensors in safetensors files (the format PyTorch users exchange weights in).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensorError, SafeTensors, TensorView};

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

    /// Parses safetensors bytes; `path` only names the source in errors. Every tensor must be f32; a file that
    /// breaks the format is a [`ConvtError::TensorFile`] whose message names the offending values (header
    /// length, tensor, dtype, shape, data offsets, file size).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self> {
        let bad = |e: SafeTensorError| ConvtError::TensorFile { path: path.into(), message: explain(bytes, &e) };
        // The reader checks the header: lengths, JSON, and that the data offsets tile the data section exactly,
        // each tensor's span matching its dtype and shape.
        let parsed = SafeTensors::read_metadata(bytes);
        // JSON allows a key twice and the reader keeps the last: a file naming one tensor twice is ambiguous.
        if let Some(name) = repeated_name(bytes) {
            return Err(ConvtError::TensorFile {
                path: path.into(),
                message: format!("the header names tensor `{name}` more than once"),
            });
        }
        let (header_len, header) = parsed.map_err(bad)?;
        let data = &bytes[8 + header_len..];
        // By name, so that the first non-f32 tensor reported is the same on every run.
        let mut infos: Vec<_> = header.tensors().into_iter().collect();
        infos.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some((name, info)) = infos.iter().find(|(_, info)| info.dtype != Dtype::F32) {
            return Err(ConvtError::DType {
                path: path.into(),
                name: name.clone(),
                dtype: format!("{:?}", info.dtype),
            });
        }
        let mut tensors = BTreeMap::new();
        for (name, info) in infos {
            let (start, end) = info.data_offsets;
            let raw = data.get(start..end).ok_or_else(|| bad(SafeTensorError::InvalidOffset(name.clone())))?;
            let values: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            tensors.insert(name, Tensor::new(info.shape.clone(), values)?);
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

/// The largest header the safetensors reader accepts (its own `MAX_HEADER_SIZE`).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// A message for a file the safetensors reader rejected that names what is wrong with which values: the reader's
/// own messages do not say which tensor, which offsets or which lengths.
fn explain(bytes: &[u8], e: &SafeTensorError) -> String {
    let len = bytes.len() as u64;
    let header_len = bytes.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    // The data section's size, when the header length fits in the file.
    let data_len = len.checked_sub(8).and_then(|rest| rest.checked_sub(header_len));
    let entries = || header_entries(bytes, header_len);
    match e {
        SafeTensorError::HeaderTooSmall => {
            format!(
                "the file is {len} bytes long, too short for the 8-byte header length a safetensors file starts with"
            )
        }
        SafeTensorError::HeaderTooLarge => format!(
            "the header length (the first 8 bytes) is {header_len} bytes, more than the {MAX_HEADER_BYTES} bytes \
             safetensors allows"
        ),
        SafeTensorError::InvalidHeaderLength => format!(
            "the header length (the first 8 bytes) is {header_len} bytes, but only {} bytes follow it",
            len.saturating_sub(8)
        ),
        SafeTensorError::InvalidHeader(utf8) => format!("the {header_len}-byte header is not UTF-8: {utf8}"),
        SafeTensorError::InvalidHeaderDeserialization(json) => {
            format!("the {header_len}-byte header is not a safetensors JSON header: {json}")
        }
        SafeTensorError::InvalidOffset(name) => {
            // The reader walks the tensors in order of their offsets; each must start where the previous ended.
            let mut sorted = entries();
            sorted.sort_by_key(|t| t.offsets);
            let at = sorted.iter().position(|t| t.name == *name);
            let start = at.and_then(|i| i.checked_sub(1)).map_or(0, |i| sorted[i].offsets.1);
            match at.map(|i| &sorted[i]) {
                Some(t) => format!(
                    "tensor `{name}` has data_offsets [{}, {}], but its data must start at byte {start} of the data \
                     section (where the previous tensor's ends) and end no earlier than it starts",
                    t.offsets.0, t.offsets.1
                ),
                None => format!("tensor `{name}` has invalid data_offsets"),
            }
        }
        SafeTensorError::TensorInvalidInfo | SafeTensorError::ValidationOverflow | SafeTensorError::MisalignedSlice => {
            let culprit = entries().into_iter().find_map(|t| {
                let need = t.shape.iter().try_fold(t.bits as u128, |acc, &d| acc.checked_mul(d as u128));
                let span = t.offsets.1 as i128 - t.offsets.0 as i128;
                match need {
                    None => Some(format!(
                        "tensor `{}` ({}, shape {:?}) has a byte size that overflows",
                        t.name, t.dtype, t.shape
                    )),
                    Some(bits) if bits % 8 != 0 || bits / 8 != span as u128 || span < 0 => Some(format!(
                        "tensor `{}` ({}, shape {:?}) needs {} bytes, but its data_offsets [{}, {}] span {span}",
                        t.name,
                        t.dtype,
                        t.shape,
                        bits / 8,
                        t.offsets.0,
                        t.offsets.1
                    )),
                    Some(_) => None,
                }
            });
            culprit.unwrap_or_else(|| e.to_string())
        }
        SafeTensorError::MetadataIncompleteBuffer => {
            let end = entries().iter().map(|t| t.offsets.1).max().unwrap_or(0);
            match data_len {
                Some(avail) if end as u64 > avail => format!(
                    "the tensors' data_offsets reach byte {end} of the data section, but the file holds only {avail} \
                     bytes of data (truncated?)"
                ),
                Some(avail) => format!(
                    "the tensors' data ends at byte {end} of the data section, but the file holds {avail} bytes of \
                     data ({} bytes too many)",
                    avail - end as u64
                ),
                None => e.to_string(),
            }
        }
        other => other.to_string(),
    }
}

/// The bytes of the header, when the header length fits in the file.
fn header_bytes(bytes: &[u8], header_len: u64) -> Option<&[u8]> {
    let n = usize::try_from(header_len).ok()?;
    bytes.get(8..8usize.checked_add(n)?)
}

/// A key the header's top-level JSON object holds more than once (none if the header is not such an object).
fn repeated_name(bytes: &[u8]) -> Option<String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                keys.push(key);
            }
            Ok(keys)
        }
    }
    let header = header_bytes(bytes, u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))?;
    let mut keys = serde_json::Deserializer::from_slice(header).deserialize_map(Keys).ok()?;
    keys.sort();
    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0].clone())
}

/// One tensor entry of a header, as far as [`explain`] needs it.
struct HeaderEntry {
    name: String,
    dtype: String,
    bits: usize,
    shape: Vec<usize>,
    offsets: (usize, usize),
}

/// The tensor entries of a header that parsed as safetensors JSON (those whose fields read; others skipped).
fn header_entries(bytes: &[u8], header_len: u64) -> Vec<HeaderEntry> {
    let Some(header) = header_bytes(bytes, header_len) else {
        return Vec::new();
    };
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice::<serde_json::Value>(header) else {
        return Vec::new();
    };
    map.into_iter()
        .filter(|(name, _)| name != "__metadata__")
        .filter_map(|(name, v)| {
            let dtype: Dtype = serde_json::from_value(v.get("dtype")?.clone()).ok()?;
            let shape: Vec<usize> = serde_json::from_value(v.get("shape")?.clone()).ok()?;
            let offsets: (usize, usize) = serde_json::from_value(v.get("data_offsets")?.clone()).ok()?;
            Some(HeaderEntry { name, dtype: format!("{dtype:?}"), bits: dtype.bitsize(), shape, offsets })
        })
        .collect()
}
