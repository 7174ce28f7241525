//! Reading and writing named f32, f16 and bf16 tensors in safetensors files (the format PyTorch users exchange weights in).
//!
//! Reading maps the file into memory and checks its header (length, JSON, every tensor's dtype, shape and data
//! offsets against the file's size) before any tensor data is read; a tensor's values are copied out only when
//! it is asked for, so a file far larger than memory costs nothing but the tensors taken from it.
//!
//! Writing never destroys what it was not asked to write ([`OutputFile`]): the target must be a regular file or
//! not exist yet, must not be one of the inputs, and is replaced only once the new contents are complete.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use safetensors::tensor::{Dtype, SafeTensorError, SafeTensors};

use crate::dtype::DType;
use crate::error::{ConvtError, Result};
use crate::tensor::{filled_vec, reserve, Tensor};

/// A safetensors file whose header has been checked; its tensors are read on demand.
#[derive(Debug)]
pub struct TensorFile {
    path: PathBuf,
    bytes: FileBytes,
    /// Where the data section starts in `bytes`.
    data_start: usize,
    /// name -> its entry, every one within the file.
    entries: BTreeMap<String, Entry>,
    metadata: HashMap<String, String>,
}

/// A tensor of a file: (how its values are stored, shape, data offsets within the data section).
type Entry = (Stored, Vec<usize>, (usize, usize));

/// How a file stores a tensor's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    /// In one of convt's dtypes, read as they are.
    Native(DType),
    /// In another float dtype, converted to f32 (rounded to nearest even) when read: F64, and PyTorch's float8
    /// dtypes F8_E4M3 (`torch.float8_e4m3fn`) and F8_E5M2 (`torch.float8_e5m2`), whose values f32 holds exactly.
    ToF32(Dtype),
    /// In a dtype convt does not compute with (integers, booleans, microscaling formats): the file opens, and the
    /// tensor is an error only when asked for by name (a model's state_dict holds such counters, e.g. BatchNorm's
    /// `num_batches_tracked`).
    Other(Dtype),
}

/// f32 of an F8_E4M3 (`float8_e4m3fn`) value: 4 exponent bits (bias 7), 3 mantissa bits, no infinities, NaN
/// at all bits of exponent and mantissa set.
fn f8_e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exp, man) = (i32::from((b >> 3) & 0xf), f32::from(b & 0x7));
    sign * match (exp, b & 0x7f) {
        (_, 0x7f) => f32::NAN,
        (0, _) => man / 8.0 * 2f32.powi(-6),
        _ => (1.0 + man / 8.0) * 2f32.powi(exp - 7),
    }
}

/// f32 of an F8_E5M2 (`float8_e5m2`) value: the high byte of an IEEE f16.
fn f8_e5m2_to_f32(b: u8) -> f32 {
    half::f16::from_bits(u16::from(b) << 8).to_f32()
}

/// A file's bytes: mapped for a regular file, read for anything else (a pipe, a device).
#[derive(Debug)]
enum FileBytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Owned(v) => v,
        }
    }
}

impl TensorFile {
    /// Opens a safetensors file and checks its header. Tensors of F32, F16 and BF16 are read as they are; F64,
    /// F8_E4M3 and F8_E5M2 ones as f32; tensors of other dtypes (integers, booleans) are an error only when asked
    /// for by name, so a model's state_dict opens whatever counters it holds. A regular file is mapped into
    /// memory, not read: only the tensors later taken with [`Self::get`] are read. (Changing the file while it
    /// is open is not supported, as with any memory-mapped reader.)
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| ConvtError::Io { path: path.into(), source };
        let mut file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        let bytes = if meta.is_file() && meta.len() > 0 {
            // SAFETY: the map is only read, and lives as long as this value; the file is not changed by convt
            // while mapped (a change by another process is the documented exception of every mapped reader).
            FileBytes::Mapped(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        } else {
            FileBytes::Owned(read_declared(&mut file, path)?)
        };
        Self::parse(bytes, path)
    }

    /// Parses safetensors bytes held in memory; `path` only names the source in errors. Dtypes as in
    /// [`Self::load`]; a file that breaks the format is a [`ConvtError::TensorFile`] whose message names the offending
    /// values (header length, tensor, dtype, shape, data offsets, file size).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self> {
        let mut owned = filled_vec(bytes.len(), 0u8, || format!("a copy of {}", path.display()))?;
        owned.copy_from_slice(bytes);
        Self::parse(FileBytes::Owned(owned), path)
    }

    fn parse(bytes: FileBytes, path: &Path) -> Result<Self> {
        let bad = |e: SafeTensorError| ConvtError::TensorFile { path: path.into(), message: explain(&bytes, &e) };
        // The reader checks the header only: lengths, JSON, and that the data offsets tile the data section
        // exactly, each tensor's span matching its dtype and shape. No tensor data is touched.
        let parsed = SafeTensors::read_metadata(&bytes);
        // JSON allows a key twice and the reader keeps the last: a file naming one tensor twice is ambiguous.
        if let Some(name) = repeated_name(&bytes) {
            return Err(ConvtError::TensorFile {
                path: path.into(),
                message: format!("the header names tensor `{name}` more than once"),
            });
        }
        let (header_len, header) = parsed.map_err(bad)?;
        let data_start = 8 + header_len;
        let data_len = bytes.len() - data_start;
        // By name, so that the first tensor of another dtype reported is the same on every run.
        let mut infos: Vec<_> = header.tensors().into_iter().collect();
        infos.sort_by(|a, b| a.0.cmp(&b.0));
        let mut entries = BTreeMap::new();
        for (name, info) in infos {
            let dtype = match info.dtype {
                Dtype::F32 => Stored::Native(DType::F32),
                Dtype::F16 => Stored::Native(DType::F16),
                Dtype::BF16 => Stored::Native(DType::BF16),
                d @ (Dtype::F64 | Dtype::F8_E4M3 | Dtype::F8_E5M2) => Stored::ToF32(d),
                other => Stored::Other(other),
            };
            let (start, end) = info.data_offsets;
            if start > end || end > data_len {
                return Err(bad(SafeTensorError::InvalidOffset(name)));
            }
            entries.insert(name, (dtype, info.shape.clone(), info.data_offsets));
        }
        let metadata = header.metadata().clone().unwrap_or_default();
        Ok(Self { path: path.into(), bytes, data_start, entries, metadata })
    }

    /// The tensor called `name`, in its dtype, read from the file now, or an error listing what the file holds.
    pub fn get(&self, name: &str) -> Result<Tensor> {
        let (dtype, shape, (start, end)) = self.entries.get(name).ok_or_else(|| ConvtError::MissingTensor {
            path: self.path.clone(),
            name: name.into(),
            found: self.names().collect::<Vec<_>>().join(", "),
        })?;
        let raw = &self.bytes[self.data_start + start..self.data_start + end];
        let what = || format!("tensor `{name}` of {}", self.path.display());
        match *dtype {
            Stored::Native(dtype) => {
                let mut values = filled_vec(raw.len() / dtype.size(), 0f32, what)?;
                dtype.decode(raw, &mut values);
                Tensor::of_dtype(shape.clone(), values, dtype)
            }
            Stored::ToF32(stored) => {
                let values: Vec<f32> = match stored {
                    Dtype::F64 => {
                        let mut v = filled_vec(raw.len() / 8, 0f32, what)?;
                        for (o, b) in v.iter_mut().zip(raw.chunks_exact(8)) {
                            *o = f64::from_le_bytes(b.try_into().unwrap_or_default()) as f32;
                        }
                        v
                    }
                    Dtype::F8_E4M3 | Dtype::F8_E5M2 => {
                        let f = if stored == Dtype::F8_E4M3 { f8_e4m3_to_f32 } else { f8_e5m2_to_f32 };
                        let mut v = filled_vec(raw.len(), 0f32, what)?;
                        for (o, &b) in v.iter_mut().zip(raw) {
                            *o = f(b);
                        }
                        v
                    }
                    other => return Err(self.dtype_error(name, other)),
                };
                Tensor::new(shape.clone(), values)
            }
            Stored::Other(other) => Err(self.dtype_error(name, other)),
        }
    }

    fn dtype_error(&self, name: &str, dtype: Dtype) -> ConvtError {
        ConvtError::DType { path: self.path.clone(), name: name.into(), dtype: format!("{dtype:?}") }
    }

    /// The dtype the tensor called `name` has once read (F64 and float8 tensors are read as f32), if the file has
    /// one that convt reads.
    pub fn dtype(&self, name: &str) -> Option<DType> {
        self.entries.get(name).and_then(|e| match e.0 {
            Stored::Native(d) => Some(d),
            Stored::ToF32(_) => Some(DType::F32),
            Stored::Other(_) => None,
        })
    }

    /// The tensor called `name` if the file has one.
    pub fn get_optional(&self, name: &str) -> Result<Option<Tensor>> {
        self.contains(name).then(|| self.get(name)).transpose()
    }

    /// Whether the file has a tensor called `name`, of any dtype (even one convt does not read).
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The tensors' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// How many tensors the file holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The size of tensor `name`, if the file has it (from the header; no data is read).
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|(_, shape, _)| shape.as_slice())
    }

    /// The file's string metadata (`__metadata__`).
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads a safetensors stream that cannot be mapped (a pipe, a device): its header first (at most
/// [`MAX_HEADER_BYTES`]), then only as many data bytes as the header declares, so an endless or oversized
/// stream is refused by its header instead of filling memory.
fn read_declared(file: &mut File, path: &Path) -> Result<Vec<u8>> {
    let io = |source| ConvtError::Io { path: path.into(), source };
    let mut bytes = Vec::new();
    Read::by_ref(file).take(8).read_to_end(&mut bytes).map_err(io)?;
    let Ok(len8) = <[u8; 8]>::try_from(bytes.as_slice()) else { return Ok(bytes) };
    let header_len = u64::from_le_bytes(len8);
    if header_len > MAX_HEADER_BYTES {
        return Ok(bytes); // the parser names the length
    }
    Read::by_ref(file).take(header_len).read_to_end(&mut bytes).map_err(io)?;
    let declared = header_entries(&bytes, header_len).iter().map(|t| t.offsets.1 as u64).max().unwrap_or(0);
    // The declared data and one byte more, which tells the parser when the stream holds more than its header
    // says, read into memory reserved once (checked against what the host has; untouched pages cost nothing).
    let want = declared.saturating_add(1);
    reserve(&mut bytes, usize::try_from(want).unwrap_or(usize::MAX), || {
        format!("the {declared} bytes of data the header of {} declares", path.display())
    })?;
    Read::by_ref(file).take(want).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// Writes named f32 tensors (and optional metadata) to a safetensors file, through [`OutputFile`]: `path` must
/// be a regular file or not exist yet, and is replaced only once the new file is complete.
pub fn save_tensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, &Tensor)],
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    OutputFile::create(path.as_ref(), &[])?.write_tensors(tensors, metadata)
}

/// An output file about to be written. [`OutputFile::create`] checks the target before any work is done; the
/// new contents go to a temporary file in the target's directory, which replaces the target (keeping its mode
/// and, where allowed, its owner; a new file's mode follows the umask) only when complete. The temporary file
/// exists only while the contents are written, so an interrupted program leaves none behind unless it is stopped
/// during the write itself.
#[derive(Debug)]
pub struct OutputFile {
    /// The path as the user gave it (named in errors).
    path: PathBuf,
    /// The regular file to replace or create: `path` with its links resolved.
    target: PathBuf,
    /// The replaced file's metadata, whose mode and owner the new file takes.
    existing: Option<std::fs::Metadata>,
}

impl OutputFile {
    /// Checks that `path` can take the output. Refused: a `path` that exists and is not a regular file (a device,
    /// a pipe, a directory, a link to one), one that is the same file as any of `inputs` (compared by resolved
    /// path and by file identity, so links are caught), an existing file this process may not write (as a shell's
    /// `>` would refuse it), and one whose directory does not exist or cannot be written.
    pub fn create(path: &Path, inputs: &[&Path]) -> Result<Self> {
        let write_err = |source| ConvtError::Write { path: path.into(), source };
        let name = path.file_name().ok_or_else(|| {
            write_err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path does not name a file"))
        })?;
        let existing = match std::fs::metadata(path) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if std::fs::symlink_metadata(path).is_ok() {
                    return Err(ConvtError::NotARegularFile { path: path.into(), kind: "a dangling link".into() });
                }
                None
            }
            Err(e) => return Err(write_err(e)),
        };
        let target = match &existing {
            Some(meta) if !meta.is_file() => {
                return Err(ConvtError::NotARegularFile { path: path.into(), kind: file_kind(meta) });
            }
            Some(_) => std::fs::canonicalize(path).map_err(write_err)?,
            None => {
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                std::fs::canonicalize(dir).map_err(write_err)?.join(name)
            }
        };
        for input in inputs {
            let same_path = std::fs::canonicalize(input).is_ok_and(|p| p == target);
            let same_file = match (&existing, std::fs::metadata(input)) {
                (Some(out), Ok(inp)) => same_identity(out, &inp),
                _ => false,
            };
            if same_path || same_file {
                return Err(ConvtError::SameFileAsInput { path: path.into(), input: input.to_path_buf() });
            }
        }
        if existing.is_some() {
            // Opened for writing, not truncated: the permission a shell's `>` would need.
            OpenOptions::new().write(true).open(&target).map_err(write_err)?;
        }
        // The directory must take a new file: one is made and removed at once.
        let (tmp, probe) = create_temporary(target.parent().unwrap_or(Path::new("/"))).map_err(write_err)?;
        drop(probe);
        std::fs::remove_file(&tmp).map_err(write_err)?;
        Ok(Self { path: path.into(), target, existing })
    }

    /// The path the output will be written to, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the tensors as a safetensors file (little-endian, each in its dtype, in the order given) and puts it
    /// in place.
    pub fn write_tensors(self, tensors: &[(&str, &Tensor)], metadata: Option<HashMap<String, String>>) -> Result<()> {
        let mut header = serde_json::Map::new();
        let mut offset = 0usize;
        for (name, t) in tensors {
            let bytes = t.numel() * t.dtype().size();
            let dtype = match t.dtype() {
                DType::F32 => "F32",
                DType::F16 => "F16",
                DType::BF16 => "BF16",
            };
            let entry =
                serde_json::json!({"dtype": dtype, "shape": t.shape(), "data_offsets": [offset, offset + bytes]});
            if *name == "__metadata__" || header.insert(name.to_string(), entry).is_some() {
                return Err(ConvtError::InvalidArgument(format!(
                    "cannot write tensor name `{name}` twice or as a name"
                )));
            }
            offset += bytes;
        }
        if let Some(m) = metadata {
            header.insert("__metadata__".into(), serde_json::json!(m));
        }
        let mut text = serde_json::to_vec(&header).map_err(|e| ConvtError::InvalidArgument(e.to_string()))?;
        // The data section starts 8-byte aligned, as safetensors' own writer pads it.
        text.resize(text.len().next_multiple_of(8), b' ');
        self.write_with(|w| {
            w.write_all(&(text.len() as u64).to_le_bytes())?;
            w.write_all(&text)?;
            // In pieces of at most 1 MiB of encoded bytes: no second copy of a large tensor.
            let mut piece = Vec::new();
            for (_, t) in tensors {
                if cfg!(target_endian = "little") && t.dtype() == DType::F32 {
                    w.write_all(bytemuck::cast_slice(t.data()))?;
                } else {
                    for values in t.data().chunks(1 << 18) {
                        piece.clear();
                        t.dtype().encode(values, &mut piece);
                        w.write_all(&piece)?;
                    }
                }
            }
            Ok(())
        })
    }

    /// Writes `bytes` as the whole file and puts it in place.
    pub fn write_bytes(self, bytes: &[u8]) -> Result<()> {
        self.write_with(|w| w.write_all(bytes))
    }

    /// Writes the contents into a new temporary file beside the target and renames it over the target; on any
    /// error the temporary file is removed and the target is left as it was.
    fn write_with(self, body: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>) -> Result<()> {
        let write_err = |source| ConvtError::Write { path: self.path.clone(), source };
        let dir = self.target.parent().unwrap_or(Path::new("/"));
        let (tmp, file) = create_temporary(dir).map_err(write_err)?;
        let result = (|| {
            if let Some(meta) = &self.existing {
                take_over_attributes(&file, meta)?;
            }
            let mut w = BufWriter::new(&file);
            body(&mut w)?;
            w.flush()?;
            drop(w);
            file.sync_all()?;
            drop(file);
            std::fs::rename(&tmp, &self.target)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(write_err(e));
        }
        Ok(())
    }
}

/// Gives a new file the replaced file's owner (where the process may: only a privileged one can give a file away)
/// and then its permissions (changing the owner on Linux clears the set-id bits, so the mode comes second).
fn take_over_attributes(file: &File, meta: &std::fs::Metadata) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let mine = file.metadata()?;
        if mine.uid() != meta.uid() {
            let _ = std::os::unix::fs::fchown(file, Some(meta.uid()), None);
        }
        if mine.gid() != meta.gid() {
            let _ = std::os::unix::fs::fchown(file, None, Some(meta.gid()));
        }
    }
    file.set_permissions(meta.permissions())
}

/// A new, hidden file in `dir` unique to this process, created only if no such file exists. Its name does not
/// repeat the target's, so a long target name cannot make it too long.
fn create_temporary(dir: &Path) -> std::io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".convt-{}-{n}.tmp", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Whether two existing paths are the same file (device and inode on Unix; elsewhere the resolved paths decide).
fn same_identity(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

/// What kind of file `meta` describes, in words.
fn file_kind(meta: &std::fs::Metadata) -> String {
    if meta.is_dir() {
        return "a directory".into();
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_char_device() {
            return "a character device".into();
        }
        if t.is_block_device() {
            return "a block device".into();
        }
        if t.is_fifo() {
            return "a named pipe".into();
        }
        if t.is_socket() {
            return "a socket".into();
        }
    }
    "not a regular file".into()
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
